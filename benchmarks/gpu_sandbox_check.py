"""Does a training process in the grader's bubblewrap sandbox see the GPU, and only when asked?

    python benchmarks/gpu_sandbox_check.py [--out DIR]

Builds sandboxes the way the grader's training phase does (read-only kernels at
/opt/ai4ai/ai4ai_kernels, a writable /out, a private HOME with private Triton/inductor caches,
no network) and runs a probe in each:
  gpu=True   the NVIDIA device nodes are bound: CUDA must be available, 1 GiB must allocate,
             and a few steps of a small GPT-2 trained with ai4ai_kernels' fused linear CE
             under bf16 autocast (Triton compiling into the private cache) must lower the loss;
  gpu=False  no device node is bound: CUDA must not be available.
Prints one line per check and writes gpu_sandbox_check.json; exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ai4ai.sandbox.box import KERNELS_DIR, Mount, Sandbox, bwrap_available  # noqa: E402

PROBE = r"""
import json, os, sys
out = {"dev_nvidia": sorted(d for d in os.listdir("/dev") if d.startswith("nvidia"))}
import torch
out["cuda_available"] = torch.cuda.is_available()
if out["cuda_available"]:
    out["gpu"] = torch.cuda.get_device_name()
    x = torch.empty(2**28, dtype=torch.float32, device="cuda")  # 1 GiB
    x.fill_(1.0)
    out["allocated_gib"] = torch.cuda.memory_allocated() / 2**30
    del x
    import ai4ai_kernels
    from ai4ai_kernels import fused_linear_cross_entropy
    from transformers import GPT2Config, GPT2LMHeadModel
    out["kernels_from"] = os.path.dirname(ai4ai_kernels.__file__)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=8192, n_positions=128, n_embd=256, n_layer=2, n_head=4,
                                       bos_token_id=None, eos_token_id=None)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    idx = torch.randint(0, 8192, (16, 128), device="cuda")  # one batch, memorised: the loss must fall
    losses = []
    for step in range(20):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = model.transformer(input_ids=idx).last_hidden_state
            loss = fused_linear_cross_entropy(h[:, :-1], model.lm_head.weight, idx[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    out["loss_first_last"] = [losses[0], losses[-1]]
    out["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
    cache = os.environ.get("TRITON_CACHE_DIR", "")
    out["triton_cache"] = cache
    out["triton_cache_used"] = os.path.isdir(cache) and any(os.scandir(cache))
with open("/out/probe.json", "w") as f:
    json.dump(out, f)
print(json.dumps(out))
"""


def probe(gpu: bool, work: Path) -> dict:
    out, home = work / "out", work / "home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    mounts = [
        Mount("/out", out, True),
        Mount("/home/sandbox", home, True),
        Mount("/opt/ai4ai/ai4ai_kernels", KERNELS_DIR, False),
    ]
    # no address-space limit with a GPU: CUDA reserves far more virtual memory than it uses
    sb = Sandbox(backend="bwrap", mounts=mounts, network=False, gpu=gpu, max_memory_bytes=None)
    sb.env = sb.base_env("/home/sandbox")
    outcome = sb.run([sys.executable, "-c", PROBE], "/out", 300, work / "probe.log", grace_s=5)
    result = {
        "returncode": outcome.returncode,
        "timed_out": outcome.timed_out,
        "wall_s": round(outcome.wall_s, 1),
        "log_tail": (work / "probe.log").read_text(errors="replace")[-2000:],
    }
    if (out / "probe.json").exists():
        result.update(json.loads((out / "probe.json").read_text()))
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "outputs" / "gpu_sandbox_check"))
    a = p.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    checks: list[tuple[str, bool]] = []
    report: dict = {}
    if not bwrap_available():
        print("FAIL  bubblewrap is not installed or cannot run here: the grader would run unsandboxed (backend none)")
        return 1
    with tempfile.TemporaryDirectory(prefix="gpu_sandbox_") as tmp:
        on = report["gpu_true"] = probe(True, Path(tmp) / "on")
        off = report["gpu_false"] = probe(False, Path(tmp) / "off")
    checks += [
        ("gpu=True: the probe exits 0", on["returncode"] == 0),
        ("gpu=True: NVIDIA device nodes are bound", bool(on.get("dev_nvidia"))),
        ("gpu=True: torch sees CUDA", bool(on.get("cuda_available"))),
        ("gpu=True: 1 GiB of CUDA memory allocates", on.get("allocated_gib", 0) >= 1.0),
        ("gpu=True: the kernels come from the read-only bind", on.get("kernels_from") == "/opt/ai4ai/ai4ai_kernels"),
        (
            "gpu=True: fused-CE training under bf16 autocast lowers the loss",
            bool(on.get("loss_first_last")) and on["loss_first_last"][1] < on["loss_first_last"][0] - 1.0,
        ),  # nats, from ~9
        (
            "gpu=True: Triton compiled into the sandbox's private cache",
            on.get("triton_cache", "").startswith("/home/sandbox/") and bool(on.get("triton_cache_used")),
        ),
        ("gpu=False: the probe exits 0", off["returncode"] == 0),
        ("gpu=False: no NVIDIA device node, no CUDA", not off.get("dev_nvidia") and off.get("cuda_available") is False),
    ]
    for name, ok in checks:
        print(f"{'ok   ' if ok else 'FAIL '} {name}")
    failed = [name for name, ok in checks if not ok]
    if failed:
        for side in ("gpu_true", "gpu_false"):
            print(f"--- {side} probe log (tail)\n{report[side]['log_tail']}")
    report["checks"] = {name: ok for name, ok in checks}
    (a.out / "gpu_sandbox_check.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {a.out / 'gpu_sandbox_check.json'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
