"""Proxy evaluation: the visible reward of a checkpoint's samples on public noise seeds. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke

Samples VALIDATION_SAMPLES images in batches of 256 from the public VALIDATION_SEED (the same
batches the harness's proxy uses; batch i is all for the prompt i mod 10) and reports the mean
visible reward, the mean pairwise distance of each batch against its diversity floor
(DIVERSITY_FRACTION x that of the real digits of its prompt in data/digits_a.u8), and the proxy
score (the reward, 0 for a batch below its floor). The benchmark's score uses a hidden scorer of
the same intent on secret noise seeds, batched the same way.
"""
import argparse
import hashlib
import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from config import N_PROMPTS, VALIDATION_SAMPLES, VALIDATION_SEED
from data import load_digits
from model import build_model, sample_chain, to_image
from reward import load_scorer, reward

BATCH = 256
DIVERSITY_FRACTION = 0.4


def batch_generator(seed: int, i: int) -> torch.Generator:
    """The noise of batch i of an evaluation split (the grader derives its secret batches the same way)."""
    return torch.Generator().manual_seed(
        int.from_bytes(hashlib.sha256(f"{seed}:batch{i}".encode()).digest()[:8], "little") & (2**63 - 1))


def batch_prompts(i: int, n: int) -> torch.Tensor:
    """The prompts of batch i of an evaluation split: all n images of the digit i mod N_PROMPTS."""
    return torch.full((n,), i % N_PROMPTS, dtype=torch.long)


def mean_pairwise(x: torch.Tensor) -> float:
    n = len(x)
    return float(torch.cdist(x.double(), x.double()).sum() / (n * (n - 1)))


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path))
    return model.eval()


@torch.no_grad()
def proxy(model: torch.nn.Module, seed: int = VALIDATION_SEED, n: int = VALIDATION_SAMPLES) -> dict:
    clf = load_scorer()
    x, y = load_digits()
    floors = [DIVERSITY_FRACTION * mean_pairwise(x[y == c]) for c in range(N_PROMPTS)]
    rewards, scores, margins = [], [], []
    for i in range(math.ceil(n / BATCH)):
        c = batch_prompts(i, min(BATCH, n - i * BATCH))
        img = to_image(sample_chain(model, c, batch_generator(seed, i))[-1])
        r = reward(clf, img, c)
        finite = torch.isfinite(img).all(-1)
        d = mean_pairwise(img[finite]) if finite.sum() > 1 else 0.0
        rewards.append(r)
        scores.append(r if d >= floors[i % N_PROMPTS] else torch.zeros_like(r))
        margins.append(d / floors[i % N_PROMPTS])
    return {"reward": torch.cat(rewards).mean().item(), "score": torch.cat(scores).mean().item(),
            "min_distance_over_floor": min(margins)}


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    path = Path(args.path)
    ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
    for ckpt in ckpts:
        m = proxy(load_checkpoint(str(ckpt), args.scale))
        print(f"{ckpt.name}  reward {m['reward']:.4f}  proxy score {m['score']:.4f}  "
              f"min batch distance / floor {m['min_distance_over_floor']:.2f} (below 1 scores 0)")
