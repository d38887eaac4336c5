"""Prepare the policy that DPO starts from (and keeps as its frozen reference). Protected.

    python prepare.py --scale {ci,smoke}

Supervised fine-tuning of a fresh GPT-2 on data/sft.u8: demonstrations that answer right only
part of the time and follow the format constraint only part of the time, so the prepared
policy is mediocre and has room to improve. Deterministic (fixed seed, one thread, fixed
order); writes artifacts/policy_<scale>.safetensors and its line in artifacts/SHA256SUMS.
The committed ci and smoke artifacts were made with this script; training code only loads
them (checkpoint.load_policy), checking the sha256.
"""
import argparse
import os
import hashlib
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from data import load_rows, prompt_lengths
from model import answer_mask, build_model, token_logps

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SEED = 1234
STEPS = {"ci": 1000, "smoke": 1000, "full": 20000}
if os.environ.get("AI4AI_SHRINK"):      # full at CPU sizes (config.SHRUNK_FULL; tests only)
    STEPS = {**STEPS, "full": 20}
BATCH = 64
LR = 3e-3


def sft(scale: str, steps: int, log_every: int = 100, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(SEED)
    rows = load_rows("sft")
    lens = prompt_lengths(rows)
    model = build_model(scale).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(SEED)
    perm = torch.cat([torch.randperm(len(rows), generator=g) for _ in range(steps * BATCH // len(rows) + 1)])
    t0 = time.time()
    for step in range(steps):
        idx = perm[step * BATCH:(step + 1) * BATCH]
        x, pl = rows[idx].to(device), lens[idx].to(device)
        mask = answer_mask(x, pl).float()
        for group in opt.param_groups:       # linear warmup, cosine decay
            w = min(1.0, (step + 1) / 50)
            group["lr"] = LR * w * 0.5 * (1 + torch.cos(torch.tensor(step / steps * torch.pi)).item())
        loss = -(token_logps(model, x) * mask).sum() / mask.sum()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % log_every == 0:
            print(f"sft step {step + 1}/{steps} loss {loss.item():.4f} elapsed {time.time() - t0:.1f}s", flush=True)
    return model.cpu().eval()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scale", required=True)
    p.add_argument("--device", default="cpu")   # cuda at full (python -m ai4ai.prepare)
    args = p.parse_args()
    torch.set_num_threads(1)
    model = sft(args.scale, STEPS[args.scale], device=args.device)
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"policy_{args.scale}.safetensors"
    save_file({k: v.detach().float().contiguous() for k, v in model.named_parameters()}, str(path))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sums_path = ARTIFACTS / "SHA256SUMS"
    lines = [ln for ln in (sums_path.read_text().splitlines() if sums_path.exists() else [])
             if not ln.endswith(f"  {path.name}")]
    sums_path.write_text("".join(f"{ln}\n" for ln in sorted(lines + [f"{digest}  {path.name}"],
                                                             key=lambda s: s.split()[1])))
    print(f"wrote {path} sha256 {digest}")
