"""How long one training step of each language-model task's model takes at the GPU tiers on this
machine, and what share of the device's peak arithmetic that step uses.

    python benchmarks/full_step_time.py [--device cuda] [--scales quick,full] [--steps 40] [--warmup 10]
                                        [--peak-tflops F] [--out DIR]

README's "Full scale" table rests on estimates: a small GPT-2 at a small batch was assumed bound by
per-step dispatch in eager PyTorch (~2 ms + 1 ms per layer), not by FLOPs. This measures that step
with the real thing where it can be had without a full prepare: each repo's own `build_model(scale)`,
its train.py's batch shape, bf16 through accelerate's `Accelerator` as the GPU tiers' train.py, AdamW, random
token ids. It leaves out the data path (the meter's replies) and the loss's own arithmetic beyond a
mean of the outputs, so it is a lower bound on the shipped step; the estimate's step_ms is printed
beside it. Tasks whose step is not one LM forward/backward (agentic_rl, diffusion_rl,
graph_diffusion, pruning) are not measured here.

The share of the GPU: model FLOPs a step (6 x parameters x tokens with gradients, plus 2 x parameters x
tokens of a reference's forward) over the step's median time, against the device's dense bf16 peak
(PEAK_TFLOPS by device name, or --peak-tflops). With AI4AI_SHRINK set the repos build their shrunk
sizes: the same code on a CPU in seconds (benchmarks/gpu_first_run.sh's shrunk mode).

Prints one line per task and tier and writes full_step_time.json (under --out, else $OUT, else outputs/).
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

from ai4ai.core.task import GPU_SCALES, load_task  # noqa: E402

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


# dense bf16 tensor-core peak, TFLOP/s, by a substring of torch.cuda.get_device_name() (vendor sheets)
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "B200": 2250.0, "B300": 2250.0, "A100": 312.0}


def _estimate(task: str, scale: str) -> float | None:
    e = load_task(task).scale(scale).estimate
    return None if e is None else e.step_ms


def peak_tflops(name: str, given: float | None) -> float | None:
    if given is not None:
        return given
    return next((v for k, v in PEAK_TFLOPS.items() if k in name), None)


def model_flops(params: int, rows: int, seq: int, ref_rows: int) -> float:
    """Model FLOPs of one step: forward and backward over the batch, a frozen reference's forward."""
    return 6.0 * params * rows * seq + 2.0 * params * ref_rows * seq


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def bf16_accelerator(device: torch.device):
    """The Accelerator the GPU tiers' train.py makes (one per process: accelerate keeps its state)."""
    from accelerate import Accelerator

    return Accelerator(mixed_precision="bf16", cpu=device.type == "cpu")


def measure(task: str, device: torch.device, steps: int, warmup: int, scale: str, accelerator) -> dict:
    """`accelerator`: the process's one accelerate.Accelerator (bf16_accelerator), made by main; each
    call frees what the previous one prepared."""
    config, model_mod = _load_repo(task)
    rows, seq_name, ref_rows = SHAPES[task]
    seq = int(getattr(config, seq_name))
    vocab = int(config.VOCAB)
    torch.manual_seed(0)
    model = model_mod.build_model(scale).to(device).train()
    ref = model_mod.build_model(scale).to(device).eval() if ref_rows else None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    accelerator.free_memory()  # the previous task's model and optimizer
    model, opt = accelerator.prepare(model, opt)  # as train.py: bf16 forward, fp32 outputs
    x = torch.randint(0, vocab, (rows, seq), device=device)
    xr = torch.randint(0, vocab, (ref_rows, seq), device=device) if ref_rows else None

    def output(m, ids):
        out = m(ids) if task == "reward_model" else m(input_ids=ids)  # RewardModel.forward(tokens)
        out = getattr(out, "logits", out)
        return out if torch.is_tensor(out) else out[0]

    def step():
        with accelerator.autocast():
            if ref is not None:
                with torch.no_grad():
                    output(ref, xr)
            loss = output(model, x).float().mean()
        accelerator.backward(loss)
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
    median = statistics.median(times)
    flops = model_flops(n_params, rows, seq, ref_rows)
    return {
        "task": task,
        "scale": scale,
        "params": n_params,
        "rows": rows,
        "seq_len": seq,
        "ref_rows": ref_rows,
        "step_ms_median": median,
        "step_ms_min": min(times),
        "step_ms_p90": sorted(times)[math.ceil(0.9 * (len(times) - 1))],
        "estimate_step_ms": _estimate(task, scale),
        "model_flops_per_step": flops,
        "model_tflops_per_s": flops / (median / 1000) / 1e12,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tasks", default=",".join(SHAPES))
    p.add_argument("--scales", default="quick,full", help="GPU tiers to build each model at")
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's dense bf16 peak (else by name)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "outputs" / "full_step_time"))
    a = p.parse_args()
    unknown = [t for t in a.tasks.split(",") if t not in SHAPES]
    if unknown:
        p.error(f"not measured here: {unknown}; choose from {sorted(SHAPES)}")
    scales = a.scales.split(",")
    if bad := [s for s in scales if s not in GPU_SCALES]:
        p.error(f"not a GPU tier: {bad}; choose from {list(GPU_SCALES)}")
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    peak = peak_tflops(name, a.peak_tflops)
    print(
        f"device {name}, torch {torch.__version__}; {a.steps} timed steps after {a.warmup}; "
        f"peak {'unknown (--peak-tflops)' if peak is None else f'{peak:g} TFLOP/s dense bf16'}"
    )
    print(
        f"{'task':<14}{'tier':<7}{'params':>12}{'batch':>12}{'median ms':>11}{'min ms':>9}{'p90 ms':>9}"
        f"{'estimate ms':>13}{'TFLOP/s':>10}{'share':>8}"
    )
    rows = []
    accelerator = bf16_accelerator(device)
    for task in a.tasks.split(","):
        for scale in scales:
            r = measure(task, device, a.steps, a.warmup, scale, accelerator)
            r["gpu_share"] = None if peak is None else r["model_tflops_per_s"] / peak
            rows.append(r)
            batch = f"{r['rows']}x{r['seq_len']}" + (f"+{r['ref_rows']}" if r["ref_rows"] else "")
            share = "-" if r["gpu_share"] is None else f"{100 * r['gpu_share']:.2f}%"
            print(
                f"{task:<14}{scale:<7}{r['params']:>12,}{batch:>12}{r['step_ms_median']:>11.2f}{r['step_ms_min']:>9.2f}"
                f"{r['step_ms_p90']:>9.2f}{r['estimate_step_ms'] or float('nan'):>13.1f}"
                f"{r['model_tflops_per_s']:>10.3f}{share:>8}",
                flush=True,
            )
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "full_step_time.json").write_text(
        json.dumps(
            {
                "device": name,
                "torch": torch.__version__,
                "peak_tflops": peak,
                "shrunk": bool(os.environ.get("AI4AI_SHRINK")),
                "rows": rows,
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
