"""How long one training step of each language-model task's `full` model takes on this machine.

    python benchmarks/full_step_time.py [--device cuda] [--steps 40] [--warmup 10] [--out DIR]

README's "Full scale" table rests on estimates: a small GPT-2 at a small batch was assumed bound by
per-step dispatch in eager PyTorch (~2 ms + 1 ms per layer), not by FLOPs. This measures that step
with the real thing where it can be had without a full prepare: each repo's own `build_model("full")`,
its train.py's batch shape, bf16 autocast as `full` trains (model.train_autocast), AdamW, random
token ids. It leaves out the data path (the meter's replies) and the loss's own arithmetic beyond a
mean of the outputs, so it is a lower bound on the shipped step; the estimate's step_ms is printed
beside it. Tasks whose step is not one LM forward/backward (agentic_rl, diffusion_rl,
graph_diffusion, pruning) are not measured here.

Prints one line per task and writes full_step_time.json (under --out, else $OUT, else outputs/).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# this folder's kernels.py would shadow the PyPI package `kernels` that transformers imports
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from ai4ai.core.task import load_task  # noqa: E402

# per task: (sequences in a forward with gradients, sequence length constant in config.py,
#            sequences in forwards without gradients), from each train.py's batch at `full`
SHAPES = {
    "optimizer": (32, "SEQ_LEN", 0),  # BATCH_SIZE 32 sequences of 128
    "sft": (4, "SEQ_LEN", 0),  # BATCH_SIZE 4 worked solutions of 64
    "distillation": (64, "SEQ_LEN", 0),  # BATCH_SIZE 64 teacher outputs
    "reward_model": (64, "SEQ_LEN", 0),  # 32 pairs: chosen and rejected in one forward
    "dpo": (128, "SEQ_LEN", 128),  # 64 pairs through the policy, and through the reference
    "unlearning": (32, "SEQ_LEN", 0),  # 32 forget facts a step
}


def _load_repo(task: str):
    """The repo's config and model modules, imported afresh (every repo names them the same)."""
    repo = ROOT / "repos_frozen" / task
    for name in [m for m in sys.modules if m in ("config", "model", "checkpoint", "tokenizer")]:
        del sys.modules[name]
    sys.path.insert(0, str(repo))
    try:
        return importlib.import_module("config"), importlib.import_module("model")
    finally:
        sys.path.remove(str(repo))


def _estimate(task: str) -> float | None:
    e = load_task(task).scale("full").estimate
    return None if e is None else e.step_ms


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(task: str, device: torch.device, steps: int, warmup: int) -> dict:
    config, model_mod = _load_repo(task)
    rows, seq_name, ref_rows = SHAPES[task]
    seq = int(getattr(config, seq_name))
    vocab = int(config.VOCAB)
    torch.manual_seed(0)
    model = model_mod.build_model("full").to(device).train()
    ref = model_mod.build_model("full").to(device).eval() if ref_rows else None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(0, vocab, (rows, seq), device=device)
    xr = torch.randint(0, vocab, (ref_rows, seq), device=device) if ref_rows else None
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)

    def output(m, ids):
        out = m(ids) if task == "reward_model" else m(input_ids=ids)  # RewardModel.forward(tokens)
        out = getattr(out, "logits", out)
        return out if torch.is_tensor(out) else out[0]

    def step():
        with autocast:
            if ref is not None:
                with torch.no_grad():
                    output(ref, xr)
            loss = output(model, x).float().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    _sync(device)
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append((time.perf_counter() - t0) * 1000)
    n_params = sum(p.numel() for p in model.parameters())
    return {
        "task": task,
        "params": n_params,
        "rows": rows,
        "seq_len": seq,
        "ref_rows": ref_rows,
        "step_ms_median": statistics.median(times),
        "step_ms_min": min(times),
        "step_ms_p90": sorted(times)[math.ceil(0.9 * (len(times) - 1))],
        "estimate_step_ms": _estimate(task),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tasks", default=",".join(SHAPES))
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "outputs" / "full_step_time"))
    a = p.parse_args()
    unknown = [t for t in a.tasks.split(",") if t not in SHAPES]
    if unknown:
        p.error(f"not measured here: {unknown}; choose from {sorted(SHAPES)}")
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    print(f"device {name}, torch {torch.__version__}; {a.steps} timed steps after {a.warmup}")
    print(f"{'task':<14}{'params':>12}{'batch':>12}{'median ms':>11}{'min ms':>9}{'p90 ms':>9}{'estimate ms':>13}")
    rows = []
    for task in a.tasks.split(","):
        r = measure(task, device, a.steps, a.warmup)
        rows.append(r)
        batch = f"{r['rows']}x{r['seq_len']}" + (f"+{r['ref_rows']}" if r["ref_rows"] else "")
        print(
            f"{task:<14}{r['params']:>12,}{batch:>12}{r['step_ms_median']:>11.2f}{r['step_ms_min']:>9.2f}"
            f"{r['step_ms_p90']:>9.2f}{r['estimate_step_ms'] or float('nan'):>13.1f}",
            flush=True,
        )
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "full_step_time.json").write_text(
        json.dumps({"device": name, "torch": torch.__version__, "rows": rows}, indent=1)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
