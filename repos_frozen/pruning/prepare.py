"""Pretrain the dense model that every pruning run starts from. Protected; already run.

    python prepare.py --scale smoke      # writes artifacts/dense_small.safetensors (ci and smoke share it)
    python prepare.py --own-model PATH   # your own model (byom/, see README): byom/dense.safetensors, once

Deterministic: fixed seed, one thread, a fixed pass over data/pretrain_small.u8 (AdamW, 50 warmup
steps, cosine decay, gradient clipping at 1). The ci/smoke artifact is committed with its sha256
in artifacts/SHA256SUMS; every load checks it. On another machine the bytes may differ (float
reductions), which is why the committed file, not a rerun, is the reference.

With your own model the dense model is your model trained on the same corpus by the same loop from
its pretrained weights (a pass over data/pretrain_small.u8, OWN_STEPS steps at peak OWN_LR, fp32,
one thread, fixed seed): the same at every scale, written to byom/dense.safetensors.
"""
import argparse
import hashlib
import math
import time

import torch
from safetensors.torch import save_file

from config import BYOM, get_scale
from data import load_sequences
from model import REPO, build_model, dense_path

BATCH = 32
LR, WARMUP = 3e-3, 50
OWN_STEPS, OWN_LR = 500, 3e-4       # your own model: from pretrained weights, a gentler peak


def own_start(source: str) -> torch.nn.Module:
    """Your own model with its pretrained weights, fp32, in the repo's layout (OwnLM)."""
    from transformers import AutoModelForCausalLM
    model = build_model("ci")
    given = dict(AutoModelForCausalLM.from_pretrained(source, local_files_only=True, dtype=torch.float32)
                 .named_parameters())
    if set(given) != {k for k, _ in model.lm.named_parameters()}:
        raise SystemExit(f"{source}: its parameters differ from the model its config builds")
    with torch.no_grad():
        for k, p in model.lm.named_parameters():
            p.copy_(given[k])
    return model


def pretrain(scale: str, device: str = "cpu", own: str | None = None) -> dict:
    s = get_scale(scale)
    torch.manual_seed(0)
    data = load_sequences("pretrain_small" if s.dense == "dense_small" or own else "pretrain_full")
    model = (build_model(scale) if own is None else own_start(own)).to(device)
    lr_peak = LR if own is None else OWN_LR
    opt = torch.optim.AdamW(model.parameters(), lr=lr_peak, betas=(0.9, 0.95), weight_decay=0.1)
    steps = min(s.pretrain_steps if own is None else OWN_STEPS, len(data) // BATCH)
    t0 = time.time()
    for step in range(steps):
        lr = lr_peak * min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr
        x = data[step * BATCH:(step + 1) * BATCH].to(device)
        loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 100 == 0 or step + 1 == steps:
            print(f"step {step + 1}/{steps} loss {loss.item():.4f} elapsed {time.time() - t0:.1f}s", flush=True)
    return {k: v.detach().float().cpu().contiguous() for k, v in model.named_parameters()}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scale")
    p.add_argument("--device", default="cpu")   # cuda at full (python -m ai4ai.prepare)
    p.add_argument("--own-model", help="folder of your own model (byom/ must be set up by the harness)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if (args.scale is None) == (args.own_model is None):
        p.error("give --scale or --own-model")
    if args.own_model is not None and not (BYOM / "vocab.json").exists():
        p.error("--own-model needs byom/vocab.json: run the task with task.model_path=PATH (README)")
    weights = pretrain(args.scale or "ci", args.device, args.own_model)
    path = dense_path(args.scale or "ci")
    path.parent.mkdir(exist_ok=True)
    save_file(weights, str(path))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sums_path = path.parent / "SHA256SUMS"
    sums = dict(reversed(line.split()) for line in sums_path.read_text().splitlines()) if sums_path.exists() else {}
    sums[path.name] = digest
    sums_path.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
    print(f"wrote {path} sha256 {digest}")
