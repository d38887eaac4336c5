"""Proxy evaluation: pairwise accuracy of a checkpoint on the visible validation split. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke

The validation pairs carry correct labels (no rater noise) and no ties. A pair counts 1 when
the preferred response gets the higher reward, 0.5 on a tie, 0 otherwise; a non-finite reward
anywhere scores the checkpoint 0. The benchmark's score uses a hidden test split of the same
kind that the agent never sees; the validation split is for development only and is absent
from the grader's training run.
"""
import argparse
from pathlib import Path

import torch
from safetensors.torch import load_file

from data import load_pairs
from model import build_model


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path), strict=True)
    return model.eval()


@torch.no_grad()
def rewards(model: torch.nn.Module, tokens: torch.Tensor, batch: int = 128) -> torch.Tensor:
    return torch.cat([model(tokens[i:i + batch]).double() for i in range(0, len(tokens), batch)])


def pairwise_accuracy(model: torch.nn.Module, a: torch.Tensor, b: torch.Tensor, label: torch.Tensor) -> float:
    ra, rb = rewards(model, a), rewards(model, b)
    if not (torch.isfinite(ra).all() and torch.isfinite(rb).all()):
        return 0.0
    a_wins = torch.where(ra > rb, 1.0, torch.where(ra == rb, 0.5, 0.0)).double()
    return float(torch.where(label == 1, a_wins, 1.0 - a_wins).mean())


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    path = Path(args.path)
    ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
    a, b, label, _ = load_pairs("val")              # the validation split has no raters (clean labels)
    for ckpt in ckpts:
        acc = pairwise_accuracy(load_checkpoint(str(ckpt), args.scale), a, b, label)
        print(f"{ckpt.name}  validation pairwise accuracy {acc:.4f}")
