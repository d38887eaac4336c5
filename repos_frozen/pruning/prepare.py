"""Pretrain the dense model that every pruning run starts from. Protected; already run.

    python prepare.py --scale smoke      # writes artifacts/dense_small.safetensors (ci and smoke share it)

Deterministic: fixed seed, one thread, a fixed pass over data/pretrain_small.u8 (AdamW, 50 warmup
steps, cosine decay, gradient clipping at 1). The ci/smoke artifact is committed with its sha256
in artifacts/SHA256SUMS; every load checks it. On another machine the bytes may differ (float
reductions), which is why the committed file, not a rerun, is the reference.
"""
import argparse
import hashlib
import math
import time

import torch
from safetensors.torch import save_file

from config import get_scale
from data import load_sequences
from model import REPO, build_model, dense_path

BATCH = 32
LR, WARMUP = 3e-3, 50


def pretrain(scale: str, device: str = "cpu") -> dict:
    s = get_scale(scale)
    torch.manual_seed(0)
    data = load_sequences("pretrain_small" if s.dense == "dense_small" else "pretrain_full")
    model = build_model(scale).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    steps = min(s.pretrain_steps, len(data) // BATCH)
    t0 = time.time()
    for step in range(steps):
        lr = LR * min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / steps))
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
    p.add_argument("--scale", required=True)
    p.add_argument("--device", default="cpu")   # cuda at full (python -m ai4ai.prepare)
    args = p.parse_args()
    torch.set_num_threads(1)
    weights = pretrain(args.scale, args.device)
    path = dense_path(args.scale)
    path.parent.mkdir(exist_ok=True)
    save_file(weights, str(path))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sums_path = REPO / "artifacts" / "SHA256SUMS"
    sums = dict(reversed(line.split()) for line in sums_path.read_text().splitlines()) if sums_path.exists() else {}
    sums[path.name] = digest
    sums_path.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
    print(f"wrote {path} sha256 {digest}")
