"""Selection and hidden evaluation, in a separate process that imports only pristine code.

The parent writes a spec (JSON) and runs `python -m ai4ai.evaluation SPEC OUT` with its bytecode
redirected to a harness-private cache (outputs/.cache/eval-pycache) that no sandbox mounts, so
no planted .pyc is ever read, and the libraries' bytecode is reused across gradings (compiling
torch and transformers from source each time cost ~7 s per seed). The worker builds the model from the pristine repo copy, loads each
candidate checkpoint strictly (exact parameter keys, shapes, dtypes, all finite, safetensors
only), picks the best on the selection split and evaluates that one on the test split.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .scoring import phi

CKPT_RE = re.compile(r"^ckpt_(\d{8})\.safetensors$")
MAX_CKPT_OVERHEAD = 1 << 20     # header slack beyond the raw parameter bytes


class InvalidCheckpoint(ValueError):
    """The checkpoint is the submission's fault: malformed, wrong keys, non-finite..."""


@dataclass(frozen=True)
class EvalSpec:
    task: str
    repo: str                  # pristine repo copy (never mounted in a sandbox)
    grader: str                # grader_hidden/<task>
    model: str                 # module:function
    scale: str
    candidates: list           # checkpoint paths, oldest first
    direction: str
    transform: str
    metadata_keys: list
    device: str
    threads: int
    mode: str = "grade"        # grade | anchors (no-info and best) | proxy (validation only)


def run_worker(spec: EvalSpec, workdir: Path, timeout_s: float = 3600) -> dict:
    """Run the worker process; a crash of the worker itself is a harness error (raised)."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, out_path = workdir / "eval_spec.json", workdir / "eval_result.json"
    spec_path.write_text(json.dumps(spec.__dict__, indent=1))
    out_path.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    from . import PROJECT_ROOT
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(PYTHONPYCACHEPREFIX=str(PROJECT_ROOT / "outputs" / ".cache" / "eval-pycache"),
               OMP_NUM_THREADS=str(spec.threads), MKL_NUM_THREADS=str(spec.threads),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    r = subprocess.run([sys.executable, "-m", "ai4ai.evaluation", str(spec_path), str(out_path)],
                       env=env, cwd=str(workdir), capture_output=True, text=True, timeout=timeout_s)
    (workdir / "eval.log").write_text(r.stdout + r.stderr)
    if r.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"evaluation worker failed (exit {r.returncode}); see {workdir / 'eval.log'}:\n"
                           + (r.stderr or r.stdout)[-2000:])
    return json.loads(out_path.read_text())


# --------------------------------------------------------------------------- worker side

def load_strict(model, path: Path):
    """Load a checkpoint into `model` (pristine code) or raise InvalidCheckpoint."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import safe_open

    params = dict(model.named_parameters())
    limit = sum(p.numel() * p.element_size() for p in params.values()) + MAX_CKPT_OVERHEAD
    size = path.stat().st_size
    if size > limit:
        raise InvalidCheckpoint(f"{path.name}: {size} bytes, more than the model's parameters need ({limit})")
    try:
        with safe_open(str(path), framework="pt") as f:
            keys = set(f.keys())
            extra, missing = sorted(keys - set(params)), sorted(set(params) - keys)
            if extra or missing:
                raise InvalidCheckpoint(f"{path.name}: keys differ from the model's parameters "
                                        f"(extra {extra[:5]}, missing {missing[:5]})")
            tensors = {k: f.get_tensor(k) for k in keys}
    except SafetensorError as e:
        raise InvalidCheckpoint(f"{path.name}: not a readable safetensors file ({e})") from None
    with torch.no_grad():
        for k, p in params.items():
            t = tensors[k]
            if t.shape != p.shape or t.dtype != p.dtype:
                raise InvalidCheckpoint(f"{path.name}: {k} is {t.dtype}{list(t.shape)}, "
                                        f"expected {p.dtype}{list(p.shape)}")
            if not torch.isfinite(t).all():
                raise InvalidCheckpoint(f"{path.name}: {k} has non-finite values")
            p.copy_(t)
    return model.eval()


def read_metadata(path: Path, keys: list) -> dict:
    meta = path.with_suffix(".json")
    if not meta.exists() or meta.stat().st_size > 65536:
        return {}
    try:
        d = json.loads(meta.read_text())
    except (ValueError, UnicodeDecodeError):
        return {}
    return {k: d[k] for k in keys if isinstance(d, dict) and k in d and isinstance(d[k], (int, float, str))}


def _worker(spec: EvalSpec) -> dict:
    import torch

    from .hidden import load_grader

    torch.set_num_threads(spec.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    sys.path.insert(0, spec.repo)
    mod_name, fn_name = spec.model.split(":")
    build = getattr(importlib.import_module(mod_name), fn_name)
    for name in list(sys.modules):      # the model must come from the pristine copy
        f = getattr(sys.modules[name], "__file__", None) or ""
        if name == mod_name and not f.startswith(spec.repo):
            raise RuntimeError(f"model module {name} imported from {f}, not the pristine copy")
    grader = load_grader(spec.task, Path(spec.grader))
    device = torch.device(spec.device)

    def fresh():
        return build(spec.scale).to(device)

    out: dict = {"candidates": []}
    if spec.mode == "anchors":
        test = grader.split("test", None)
        out["no_info"] = grader.evaluate(grader.uninformative(fresh()).eval(), test, None)
        out["best"] = grader.best_attainable(test, None) if hasattr(grader, "best_attainable") else None
        if "validation" in grader.SPLITS:
            val = grader.split("validation", None)
            out["validation_no_info"] = grader.evaluate(grader.uninformative(fresh()).eval(), val, None)
            out["validation_best"] = grader.best_attainable(val, None) if hasattr(grader, "best_attainable") else None
        return out

    if spec.mode == "proxy":
        # The agent's proxy: the newest valid checkpoint on the visible validation split only.
        val = grader.split("validation", None)
        for c in reversed(spec.candidates):
            path = Path(c)
            rec = {"name": path.name}
            try:
                cfg = {"scale": spec.scale, "metadata": read_metadata(path, spec.metadata_keys)}
                out["validation_metric"] = float(grader.evaluate(load_strict(fresh(), path), val, cfg))
                out["chosen"] = path.name
                return out
            except InvalidCheckpoint as e:
                rec.update(valid=False, reason=str(e))
                out["candidates"].append(rec)
        out["chosen"] = None
        return out

    selection = grader.split("selection", None)
    best_i, best_phi = None, -math.inf
    for i, c in enumerate(spec.candidates):
        path = Path(c)
        m = CKPT_RE.match(path.name)
        rec = {"name": path.name, "step": int(m.group(1)) if m else None,
               "metadata": read_metadata(path, spec.metadata_keys)}
        try:
            model = load_strict(fresh(), path)
            raw = float(grader.evaluate(model, selection, {"scale": spec.scale, "metadata": rec["metadata"]}))
            if not math.isfinite(raw):
                raise InvalidCheckpoint(f"{path.name}: selection metric is {raw}")
            rec.update(valid=True, selection_metric=raw)
            p = phi(raw, spec.direction, spec.transform)
            if p > best_phi:
                best_i, best_phi = i, p
        except InvalidCheckpoint as e:
            rec.update(valid=False, reason=str(e), selection_metric=None)
        out["candidates"].append(rec)
    if best_i is None:
        out["chosen"] = None
        return out
    chosen = Path(spec.candidates[best_i])
    model = load_strict(fresh(), chosen)
    cfg = {"scale": spec.scale, "metadata": out["candidates"][best_i]["metadata"]}
    test = grader.split("test", None)
    out["chosen"] = chosen.name
    if hasattr(grader, "evaluate_with_noise"):
        raw, se = grader.evaluate_with_noise(model, test, cfg)
        out["test_metric"], out["test_excess_se"] = float(raw), float(se)
    else:
        out["test_metric"] = float(grader.evaluate(model, test, cfg))
    if "validation" in grader.SPLITS:
        out["validation_metric"] = float(grader.evaluate(model, grader.split("validation", None), cfg))
    return out


def main(argv: list[str]) -> None:
    spec = EvalSpec(**json.loads(Path(argv[0]).read_text()))
    result = _worker(spec)
    Path(argv[1]).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
