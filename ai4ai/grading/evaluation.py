"""Selection and hidden evaluation, in a separate process that imports only pristine code.

The parent writes a spec (JSON) and runs `ai4ai.grading.evaluation.main([SPEC, OUT])` in a fresh interpreter (its own
copy of the harness, see _BOOT) with its bytecode
redirected to a harness-private cache (outputs/.cache/eval-pycache) that no sandbox mounts, so
no planted .pyc is ever read, and the libraries' bytecode is reused across gradings (compiling
torch and transformers from source each time cost ~7 s per seed). The worker builds the model from the pristine repo copy, loads each
candidate checkpoint strictly (exact parameter keys, shapes, dtypes, all finite, safetensors
only), picks the best on the selection split and evaluates that one on the test split.

Who is at fault decides the status. Whatever a submission controls (checkpoint bytes, metadata,
and so what the hidden grader computes from its weights) can only make a candidate invalid, with a
short harness-written reason; a seed with no valid candidate is invalid. The worker failing before
it judges any candidate (importing the grader, generating a split), or a grader that fails on
pristine weights as well, is the harness's fault: the worker exits non-zero and the seed is `error`.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ai4ai import PROJECT_ROOT
from ai4ai.core.hidden import load_grader
from ai4ai.core.scoring import phi

CKPT_RE = re.compile(r"^ckpt_(\d{8})\.safetensors$")
MAX_CKPT_OVERHEAD = 1 << 20  # header slack beyond the raw parameter bytes
MAX_METADATA_BYTES = 65536
MAX_METADATA_DEPTH = 16  # flat in every task; bounded before parsing (json recurses per level)
MAX_METADATA_STR = 200
MAX_METADATA_INT = 1 << 63


class InvalidCheckpoint(ValueError):
    """The checkpoint is the submission's fault: malformed, wrong keys, non-finite..."""


class WorkerError(RuntimeError):
    """The evaluation worker failed before judging the candidates: the harness's fault.

    The message is one line (the exit status and the worker's last line of output); the full
    output (a traceback through hidden code) is in `detail` and in eval.log, never in a reply."""

    def __init__(self, summary: str, detail: str = ""):
        super().__init__(summary)
        self.detail = detail


# The worker runs the harness code of the parent process (a checkout or worktree may differ from
# the installed package); the package's parent folder is on sys.path only while `ai4ai` is
# imported, so nothing else of the project root (e.g. ai4ai_kernels/) is importable by name afterwards.
# After the result file is written the worker leaves at once: an interpreter that has imported torch
# and transformers takes ~2 s here to tear them down, for nothing (measured: exit 2.1 s, os._exit 0.1 s).
_BOOT = (
    "import os, sys; root = sys.argv.pop(1); sys.path.insert(0, root); import ai4ai.grading.evaluation as ev; "
    "sys.path.remove(root); ev.main(sys.argv[1:]); sys.stdout.flush(); sys.stderr.flush(); os._exit(0)"
)


@dataclass(frozen=True)
class EvalSpec:
    task: str
    repo: str  # pristine repo copy (never mounted in a sandbox)
    grader: str  # grader_hidden/<task>
    model: str  # module:function
    scale: str
    candidates: list  # checkpoint paths, oldest first
    direction: str
    transform: str
    metadata_keys: list
    device: str
    threads: int
    mode: str = "grade"  # grade | anchors (no-info and best) | proxy (validation only)


PARENT_ENV = "AI4AI_EVAL_PARENT"
PARENT_POLL_S = 0.2


def _exit_with_parent() -> None:
    """A worker does not outlive the harness that started it. Its parent's pid comes in the
    environment (PARENT_ENV); a thread checks every PARENT_POLL_S that it is still the parent and
    ends the process the moment it is not (the harness was killed: a grading stopped with SIGKILL, a
    Slurm job cancelled), so that no evaluation goes on burning a core for a run nobody reads. A
    poll, not the kernel's parent-death signal, which fires when the *thread* that started the
    process ends (the proxy starts workers from its server's threads)."""
    parent = int(os.environ.get(PARENT_ENV) or 0)
    if not parent:
        return
    if os.getppid() != parent:
        os._exit(3)

    def watch() -> None:
        while True:
            time.sleep(PARENT_POLL_S)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def _worker_env(threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(
        PYTHONPYCACHEPREFIX=str(PROJECT_ROOT / "outputs" / ".cache" / "eval-pycache"),
        OMP_NUM_THREADS=str(threads),
        MKL_NUM_THREADS=str(threads),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
    )
    env[PARENT_ENV] = str(os.getpid())  # the harness process the worker must not outlive
    return env


class Worker:
    """The evaluation worker process. It imports torch, the pristine copy's model module and the
    hidden grader first, then waits on its stdin for the spec with the candidates, so it can be
    started before they exist (gradings do not: beside a training its imports cost that training
    CPU time under its cap; see grading.seeds). What it is given ahead is the harness's alone (the pristine copy, the grader, the
    scale, the device): nothing a submission writes reaches it before `result`, and `result`
    refuses a spec that differs from the one it was started with in anything but the candidates.
    Its output goes to eval.log; a worker never given candidates is killed by `close`, and a worker
    whose harness dies ends with it (`_exit_with_parent`)."""

    def __init__(self, spec: EvalSpec, workdir: Path):
        self.head = replace(spec, candidates=[])
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.log = workdir / "eval.log"
        self._log = open(self.log, "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, str(PROJECT_ROOT.resolve()), "--ahead", json.dumps(self.head.__dict__)],
            env=_worker_env(spec.threads),
            cwd=str(workdir),
            stdin=subprocess.PIPE,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def result(self, spec: EvalSpec, timeout_s: float = 3600) -> dict:
        """Give the worker `spec` (this worker's, with its candidates) and wait for its verdict; a
        crash of the worker itself is a harness error (raised)."""
        if replace(spec, candidates=[]) != self.head:
            self.close()
            raise ValueError("evaluation spec differs from the one the worker was started with")
        spec_path, out_path = self.workdir / "eval_spec.json", self.workdir / "eval_result.json"
        spec_path.write_text(json.dumps(spec.__dict__, indent=1))
        out_path.unlink(missing_ok=True)
        try:
            self.proc.stdin.write(f"{spec_path}\t{out_path}\n".encode())
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass  # it ended before its candidates came: its exit status and log say why
        try:
            code = self.proc.wait(timeout=timeout_s)
        finally:
            self.close()
        if code != 0 or not out_path.exists():
            out = self.log.read_text(errors="replace").strip()
            last = out.splitlines()[-1][:300] if out else "no output"
            raise WorkerError(f"evaluation worker failed (exit {code}): {last}", out[-4000:])
        return json.loads(out_path.read_text())

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self._log.close()


def run_worker(spec: EvalSpec, workdir: Path, timeout_s: float = 3600, worker: Worker | None = None) -> dict:
    """Run the worker process (or give `spec` to `worker`, started ahead with it); a crash of the
    worker itself is a harness error (raised)."""
    return (worker or Worker(spec, workdir)).result(spec, timeout_s)


# --------------------------------------------------------------------------- worker side


def load_strict(model, path: Path, digest: dict | None = None):
    """Load a checkpoint into `model` (pristine code) or raise InvalidCheckpoint.

    `digest`, when given, receives `sha256`: a hash of the loaded tensors (name, dtype, shape, bytes,
    in key order), so replicates can be compared on what was evaluated, not on file bytes that a
    header's layout or padding could make differ."""
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
                raise InvalidCheckpoint(
                    f"{path.name}: keys differ from the model's parameters (extra {extra[:5]}, missing {missing[:5]})"
                )
            tensors = {k: f.get_tensor(k) for k in keys}
    except SafetensorError as e:
        raise InvalidCheckpoint(f"{path.name}: not a readable safetensors file ({e})") from None
    except InvalidCheckpoint:
        raise
    except Exception as e:  # noqa: BLE001 - whatever else the loader trips on is in the submission's bytes
        raise InvalidCheckpoint(f"{path.name}: not a readable safetensors file ({type(e).__name__})") from None
    h = hashlib.sha256()
    with torch.no_grad():
        for k, p in sorted(params.items()):
            t = tensors[k]
            if t.shape != p.shape or t.dtype != p.dtype:
                raise InvalidCheckpoint(
                    f"{path.name}: {k} is {t.dtype}{list(t.shape)}, expected {p.dtype}{list(p.shape)}"
                )
            if not torch.isfinite(t).all():
                raise InvalidCheckpoint(f"{path.name}: {k} has non-finite values")
            p.copy_(t)
            h.update(f"{k}|{t.dtype}|{list(t.shape)}|".encode())
            h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    if digest is not None:
        digest["sha256"] = h.hexdigest()
    return model.eval()


def read_metadata(path: Path, keys: list) -> dict:
    """The whitelisted keys of a checkpoint's metadata; {} when it has none.

    Metadata is the submission's: a file that is too large, nested too deep, not a JSON object,
    or a whitelisted key holding anything but a finite number or a short string raises
    InvalidCheckpoint (never a crash of the worker). Keys outside the whitelist are not read."""
    meta = path.with_suffix(".json")
    if not meta.exists():
        return {}
    if meta.stat().st_size > MAX_METADATA_BYTES:
        raise InvalidCheckpoint(f"{path.name}: malformed metadata (more than {MAX_METADATA_BYTES} bytes)")
    try:
        text = meta.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        raise InvalidCheckpoint(f"{path.name}: malformed metadata (not UTF-8 text)") from None
    if _json_depth(text) > MAX_METADATA_DEPTH:
        raise InvalidCheckpoint(f"{path.name}: malformed metadata (nested deeper than {MAX_METADATA_DEPTH})")
    try:  # no NaN or Infinity literals: a non-finite value is malformed, not a number
        d = json.loads(text, parse_constant=_refuse_constant)
    except (ValueError, RecursionError):
        raise InvalidCheckpoint(f"{path.name}: malformed metadata (not JSON)") from None
    if not isinstance(d, dict):
        raise InvalidCheckpoint(f"{path.name}: malformed metadata (not a JSON object)")
    out = {}
    for k in keys:
        if k not in d:
            continue
        v = d[k]
        ok = (
            (isinstance(v, int) and not isinstance(v, bool) and abs(v) < MAX_METADATA_INT)
            or (isinstance(v, float) and math.isfinite(v))
            or (isinstance(v, str) and len(v) <= MAX_METADATA_STR)
        )
        if not ok:
            raise InvalidCheckpoint(
                f"{path.name}: malformed metadata ({k} is not a finite number or a string "
                f"of at most {MAX_METADATA_STR} characters)"
            )
        out[k] = v
    return out


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text`, brackets inside strings not counted."""
    depth = deepest = 0
    in_str = esc = False
    for ch in text:
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


class _Judge:
    """The worker's grader and model, and the one rule for a grader's exception: the submission's
    fault (InvalidCheckpoint) unless the same evaluation of pristine weights fails too."""

    def __init__(self, spec: EvalSpec, grader, build, device):
        self.spec, self.grader, self._build, self._device = spec, grader, build, device
        self._controls: dict = {}

    def fresh(self):
        return self._build(self.spec.scale).to(self._device)

    def judged(self, path: Path, key: str, run, control):
        """run() evaluates the submission's weights; any exception it raises is the submission's
        fault (InvalidCheckpoint) unless control() (the same evaluation of pristine weights, the
        no-information model, without metadata) fails as well: then the grader is at fault, raised."""
        try:
            return run()
        except InvalidCheckpoint:
            raise
        except MemoryError:
            raise  # the machine's, not the weights': the model's size is pristine
        except Exception as e:  # noqa: BLE001 - what the grader computes from weights is the submission's
            if type(e).__name__ == "OutOfMemoryError":
                raise
            if key not in self._controls:
                try:
                    control(self.grader.uninformative(self.fresh()).eval(), {"scale": self.spec.scale, "metadata": {}})
                    self._controls[key] = None
                except Exception as c:  # noqa: BLE001
                    self._controls[key] = c
            if self._controls[key] is not None:
                raise RuntimeError(f"the grader fails on pristine weights too ({key})") from e
            raise InvalidCheckpoint(
                f"{path.name}: the grader raised {type(e).__name__} evaluating these weights ({key})"
            ) from None

    def metric(self, path: Path, split_name: str, split, cfg, digest=None) -> float:
        def evaluate(model, c):
            return float(self.grader.evaluate(model, split, c))

        def run():
            raw = evaluate(load_strict(self.fresh(), path, digest), cfg)
            if not math.isfinite(raw):
                raise InvalidCheckpoint(f"{path.name}: {split_name} metric is {raw}")
            return raw

        return self.judged(path, f"{split_name} split", run, evaluate)

    def test_metric(self, path: Path, test, cfg) -> dict:
        """The chosen candidate on the test split, with the standard error of its excess where the
        grader gives one."""
        grader = self.grader
        if not hasattr(grader, "evaluate_with_noise"):
            return {"test_metric": self.metric(path, "test", test, cfg)}

        def with_noise(model, c):
            raw, se = grader.evaluate_with_noise(model, test, c)
            return float(raw), float(se)

        def run():
            raw, se = with_noise(load_strict(self.fresh(), path), cfg)
            if not math.isfinite(raw):
                raise InvalidCheckpoint(f"{path.name}: test metric is {raw}")
            return raw, se

        raw, se = self.judged(path, "test split", run, with_noise)
        return {"test_metric": raw, "test_excess_se": se}


def _anchors(judge: _Judge) -> dict:
    """The no-information model's metric and the best attainable one, on test (and validation)."""
    grader = judge.grader
    out: dict = {"candidates": []}
    test = grader.split("test", None)
    out["no_info"] = grader.evaluate(grader.uninformative(judge.fresh()).eval(), test, None)
    out["best"] = grader.best_attainable(test, None) if hasattr(grader, "best_attainable") else None
    if "validation" in grader.SPLITS:
        val = grader.split("validation", None)
        out["validation_no_info"] = grader.evaluate(grader.uninformative(judge.fresh()).eval(), val, None)
        out["validation_best"] = grader.best_attainable(val, None) if hasattr(grader, "best_attainable") else None
    return out


def _proxy(judge: _Judge) -> dict:
    """The agent's proxy: the newest valid checkpoint on the visible validation split only."""
    spec = judge.spec
    out: dict = {"candidates": []}
    val = judge.grader.split("validation", None)
    for c in reversed(spec.candidates):
        path = Path(c)
        rec = {"name": path.name}
        try:
            cfg = {"scale": spec.scale, "metadata": read_metadata(path, spec.metadata_keys)}
            out["validation_metric"] = judge.metric(path, "validation", val, cfg)
            out["chosen"] = path.name
            return out
        except InvalidCheckpoint as e:
            rec.update(valid=False, reason=str(e))
            out["candidates"].append(rec)
    out["chosen"] = None
    return out


def _grade(judge: _Judge) -> dict:
    """Selection over every candidate, then the best valid one on the hidden test split."""
    spec, grader = judge.spec, judge.grader
    out: dict = {"candidates": []}
    selection = grader.split("selection", None)
    ranked = []
    for i, c in enumerate(spec.candidates):
        path = Path(c)
        m = CKPT_RE.match(path.name)
        rec = {"name": path.name, "step": int(m.group(1)) if m else None, "metadata": {}}
        try:
            rec["metadata"] = read_metadata(path, spec.metadata_keys)
            digest: dict = {}
            raw = judge.metric(path, "selection", selection, {"scale": spec.scale, "metadata": rec["metadata"]}, digest)
            rec.update(valid=True, selection_metric=raw, weights_sha256=digest["sha256"])
            ranked.append((phi(raw, spec.direction, spec.transform), i))
        except InvalidCheckpoint as e:
            rec.update(valid=False, reason=str(e), selection_metric=None)
        out["candidates"].append(rec)
    test = None
    # Best on the selection split first; a candidate the test evaluation cannot judge (the grader
    # raising on its weights, a non-finite metric) is invalid and the next best is taken.
    for _, i in sorted(ranked, key=lambda x: (-x[0], x[1])):
        rec, chosen = out["candidates"][i], Path(spec.candidates[i])
        cfg = {"scale": spec.scale, "metadata": rec["metadata"]}
        test = grader.split("test", None) if test is None else test
        try:
            out.update(judge.test_metric(chosen, test, cfg))
        except InvalidCheckpoint as e:
            rec.update(valid=False, reason=str(e))
            continue
        out["chosen"] = chosen.name
        out["weights_sha256"] = rec["weights_sha256"]
        if "validation" in grader.SPLITS:
            try:  # reported beside the score, never part of it: a failure here only leaves it empty
                out["validation_metric"] = judge.metric(chosen, "validation", grader.split("validation", None), cfg)
            except InvalidCheckpoint:
                out["validation_metric"] = None
        return out
    out["chosen"] = None
    return out


MODES = {"anchors": _anchors, "proxy": _proxy, "grade": _grade}


def _prepare(spec: EvalSpec) -> _Judge:
    """Everything a verdict needs but the candidates: torch, the pristine model's builder, the grader."""
    if spec.mode not in MODES:
        raise ValueError(f"evaluation mode {spec.mode!r}: use one of {sorted(MODES)}")
    import torch

    torch.set_num_threads(spec.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    sys.path.insert(0, spec.repo)
    mod_name, fn_name = spec.model.split(":")
    build = getattr(importlib.import_module(mod_name), fn_name)
    for name in list(sys.modules):  # the model must come from the pristine copy
        f = getattr(sys.modules[name], "__file__", None) or ""
        if name == mod_name and not f.startswith(spec.repo):
            raise RuntimeError(f"model module {name} imported from {f}, not the pristine copy")
    grader = load_grader(spec.task, Path(spec.grader))
    return _Judge(spec, grader, build, torch.device(spec.device))


def main(argv: list[str]) -> None:
    """`--ahead SPEC_JSON`: prepare for SPEC (its candidates empty), then read `SPEC_PATH<TAB>OUT_PATH`
    on stdin and judge that spec's candidates (nothing read: the harness had none to give, exit)."""
    if argv[0] != "--ahead":
        raise SystemExit("usage: --ahead SPEC_JSON (spec path and result path then on stdin)")
    _exit_with_parent()
    head = EvalSpec(**json.loads(argv[1]))
    judge = _prepare(head)
    line = sys.stdin.readline().strip()
    if not line:
        return
    spec_path, out_path = line.split("\t")
    spec = EvalSpec(**json.loads(Path(spec_path).read_text()))
    if replace(spec, candidates=[]) != head:
        raise RuntimeError("evaluation spec differs from the one the worker was started with")
    judge.spec = spec
    result = MODES[spec.mode](judge)
    Path(out_path).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
