"""Prepare the artifacts: the base diffusion model of a scale and the reward's classifier. Protected.

    python prepare.py --scale smoke       # writes artifacts/ddpm_smoke.safetensors (+ scorer)

Deterministic on the CPU from data/digits_a.u8 and fixed seeds, single thread (<= ~90 s per
scale). The artifacts of ci and smoke are committed with their sha256 in artifacts/SHA256SUMS,
which every load checks; rerunning this on another machine may not reproduce them bit for bit.
"""
import argparse
import hashlib
import math
import os

import torch
from safetensors.torch import save

from config import N_STEPS, get_scale
from data import ARTIFACTS, load_digits
from model import SCHEDULE, build_model
from reward import JUNK, Classifier, make_junk

SCORER_SEED, DDPM_SEED = 7, 11


def train_scorer(x: torch.Tensor, y: torch.Tensor) -> Classifier:
    """MLP classifier of digits and junk, full batch, light pixel-noise augmentation."""
    g = torch.Generator().manual_seed(SCORER_SEED)
    torch.manual_seed(SCORER_SEED)
    clf = Classifier()
    opt = torch.optim.AdamW(clf.parameters(), lr=3e-3, weight_decay=1e-2)
    for _ in range(800):
        xb = (x + 0.1 * torch.randn(x.shape, generator=g)).clamp(-1, 1)
        xj = make_junk(x, len(x) // 2, g)
        loss = torch.nn.functional.cross_entropy(clf(torch.cat([xb, xj])),
                                                 torch.cat([y, torch.full((len(xj),), JUNK)]))
        opt.zero_grad()
        loss.backward()
        opt.step()
    acc = (clf(x).argmax(-1) == y).float().mean().item()
    print(f"scorer: train accuracy {acc:.3f}, loss {loss.item():.4f}")
    return clf


def train_ddpm(scale: str, x: torch.Tensor, y: torch.Tensor) -> torch.nn.Module:
    """Epsilon-prediction DDPM on the images conditioned on their labels (the prompts), uniform step
    sampling, AdamW with cosine decay."""
    s = get_scale(scale)
    torch.manual_seed(DDPM_SEED)
    g = torch.Generator().manual_seed(DDPM_SEED)
    model = build_model(scale)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
    abar = SCHEDULE["abar"].float()
    for step in range(s.prepare_steps):
        for group in opt.param_groups:
            group["lr"] = 2e-3 * 0.5 * (1 + math.cos(math.pi * step / s.prepare_steps))
        idx = torch.randint(0, len(x), (128,), generator=g)
        k = torch.randint(0, N_STEPS, (128,), generator=g)
        eps = torch.randn(128, x.shape[1], generator=g)
        ab = abar[k][:, None]
        xt = ab.sqrt() * x[idx] + (1 - ab).sqrt() * eps
        loss = ((model(xt, k, y[idx]) - eps) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if (step + 1) % 500 == 0:
            print(f"ddpm {scale}: step {step + 1}/{s.prepare_steps} loss {loss.item():.4f}", flush=True)
    return model


def write(name: str, module: torch.nn.Module) -> None:
    raw = save({k: v.detach().float().contiguous() for k, v in module.named_parameters()})
    (ARTIFACTS / name).write_bytes(raw)
    sums_path = ARTIFACTS / "SHA256SUMS"
    sums = dict(line.split()[::-1] for line in sums_path.read_text().splitlines()) if sums_path.exists() else {}
    sums[name] = hashlib.sha256(raw).hexdigest()
    sums_path.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
    print(f"wrote artifacts/{name} ({sums[name][:12]})")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scale", required=True)
    p.add_argument("--skip-scorer", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    ARTIFACTS.mkdir(exist_ok=True)
    x, y = load_digits()
    if not args.skip_scorer:
        write("scorer.safetensors", train_scorer(x, y))
    write(f"ddpm_{args.scale}.safetensors", train_ddpm(args.scale, x, y))
