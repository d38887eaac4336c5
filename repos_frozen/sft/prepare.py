"""Prepare the base model: pretrain the GPT on worked solutions of short chains. Protected.

    python prepare.py --scale smoke        # writes artifacts/base_smoke.safetensors + SHA256SUMS

Deterministic (fixed seed, one thread, fixed order) from the committed data/pretrain.u8;
under a minute on one CPU thread at smoke. The ci and smoke bases are committed, so the
training code only loads them (model.load_base checks their sha256). The corpus holds 8,192
worked problems of 1 to 6 operators (Zipf operator frequencies); loss on the worked steps and
the answer. In 1,000 steps the base learns the format and how to follow a chain, and the facts
of the common operators; it solves about 2% of 6-operator problems.
"""
import argparse
import hashlib
import math
import time

import torch
from safetensors.torch import save_file

from config import PAD, STOI, get_scale
from data import load_sequences
from model import ARTIFACTS, base_path, build_model

LR, WARMUP, BATCH = 3e-3, 100, 32


def pretrain(scale: str, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(0)
    steps = get_scale(scale).pretrain_steps
    corpus = load_sequences("pretrain")
    model = build_model(scale).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.0)
    order = torch.Generator().manual_seed(0)
    eq = STOI["="]
    t0 = time.time()
    for step in range(steps):
        x = corpus[torch.randint(0, len(corpus), (BATCH,), generator=order)].to(device)
        lr = LR * min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr
        after = (x == eq).cumsum(1) > 0                                   # from the completion's first '=' on
        labels = x.masked_fill(~after | (x == PAD), -100)                  # loss on the worked steps and answer
        loss = model(input_ids=x, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 250 == 0 or step + 1 == steps:
            print(f"pretrain step {step + 1}/{steps} loss {loss.item():.4f} {time.time() - t0:.1f}s", flush=True)
    return model.cpu()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scale", required=True)
    p.add_argument("--device", default="cpu")   # cuda at full (python -m ai4ai.prepare)
    args = p.parse_args()
    torch.set_num_threads(1)
    model = pretrain(args.scale, args.device)
    ARTIFACTS.mkdir(exist_ok=True)
    path = base_path(args.scale)
    tmp = path.with_suffix(".tmp")
    save_file({k: v.detach().contiguous() for k, v in model.named_parameters()}, str(tmp))
    tmp.replace(path)
    sums_path = ARTIFACTS / "SHA256SUMS"
    sums = dict(reversed(ln.split()) for ln in sums_path.read_text().splitlines()) if sums_path.exists() else {}
    sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    sums_path.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
    print(f"wrote {path} ({sums[path.name][:16]})")
