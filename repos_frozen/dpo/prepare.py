"""Prepare the policy that DPO starts from (and keeps as its frozen reference). Protected.

    python prepare.py --scale {ci,smoke}
    python prepare.py --own-model PATH     # your own model (byom/, see README)

Supervised fine-tuning of a fresh GPT-2 on data/sft.u8: demonstrations that answer right only
part of the time and follow the format constraint only part of the time, so the prepared
policy is mediocre and has room to improve. Deterministic (fixed seed, one thread, fixed
order); writes artifacts/policy_<scale>.safetensors and its line in artifacts/SHA256SUMS.
The committed ci and smoke artifacts were made with this script; training code only loads
them (checkpoint.load_policy), checking the sha256.

With your own model the same SFT starts from its pretrained weights instead of a fresh GPT-2, for
OWN_STEPS steps at a peak learning rate of OWN_LR (a pretrained model takes a lower one), and
writes byom/policy.safetensors, one policy for every scale.
"""
import argparse
import os
import hashlib
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from checkpoint import policy_path
from config import TOKEN_IDS
from data import load_rows, prompt_lengths
from model import answer_mask, build_model, token_logps

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SEED = 1234
STEPS = {"ci": 1000, "smoke": 1000, "quick": 2000, "full": 20000}
if os.environ.get("AI4AI_SHRINK"):      # quick and full at CPU sizes (config.SHRUNK; tests only)
    STEPS = {**STEPS, "quick": 500, "full": 500}
BATCH = 64
LR = 3e-3
OWN_STEPS, OWN_LR = 1000, 3e-4


def own_weights(model: torch.nn.Module, source: str) -> torch.nn.Module:
    """Your own model's pretrained weights (fp32) in the model the repo builds from its config."""
    from transformers import AutoModelForCausalLM
    weights = dict(AutoModelForCausalLM.from_pretrained(source, local_files_only=True,
                                                        dtype=torch.float32).named_parameters())
    if set(weights) != {k for k, _ in model.named_parameters()}:
        raise SystemExit(f"{source}: its parameters differ from the model its config builds")
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(weights[k])
    return model


def sft(scale: str, steps: int, log_every: int = 100, source: str | None = None, lr: float = LR,
        device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(SEED)
    rows = load_rows("sft")
    lens = prompt_lengths(rows)
    model = (build_model(scale) if source is None else own_weights(build_model(scale), source)).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=0.0)
    g = torch.Generator().manual_seed(SEED)
    perm = torch.cat([torch.randperm(len(rows), generator=g) for _ in range(steps * BATCH // len(rows) + 1)])
    t0 = time.time()
    for step in range(steps):
        idx = perm[step * BATCH:(step + 1) * BATCH]
        x, pl = rows[idx].to(device), lens[idx].to(device)
        mask = answer_mask(x, pl).float()
        for group in opt.param_groups:       # linear warmup, cosine decay
            w = min(1.0, (step + 1) / 50)
            group["lr"] = lr * w * 0.5 * (1 + torch.cos(torch.tensor(step / steps * torch.pi)).item())
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
    p.add_argument("--scale")
    p.add_argument("--device", default="cpu")   # cuda at full (python -m ai4ai.prepare)
    p.add_argument("--own-model", help="folder of your own model (byom/ must be set up by the harness)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if (args.scale is None) == (args.own_model is None):
        p.error("give --scale or --own-model")
    if args.own_model is not None and TOKEN_IDS is None:
        p.error("--own-model needs byom/vocab.json: run the task with task.model_path=PATH (README)")
    if args.own_model is None:
        model = sft(args.scale, STEPS[args.scale], device=args.device)
    else:
        model = sft("full", OWN_STEPS, source=args.own_model, lr=OWN_LR, device=args.device)
    path = policy_path(args.scale)
    path.parent.mkdir(exist_ok=True)
    save_file({k: v.detach().float().cpu().contiguous() for k, v in model.named_parameters()}, str(path))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    sums_path = path.parent / "SHA256SUMS"
    lines = [ln for ln in (sums_path.read_text().splitlines() if sums_path.exists() else [])
             if not ln.endswith(f"  {path.name}")]
    sums_path.write_text("".join(f"{ln}\n" for ln in sorted(lines + [f"{digest}  {path.name}"],
                                                             key=lambda s: s.split()[1])))
    print(f"wrote {path} sha256 {digest}")
