"""Proxy evaluation: perplexity of a checkpoint on the visible validation split. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke

The benchmark's score uses a hidden test split the agent never sees; the validation split
here is for development only and is absent from the grader's training run.
"""
import argparse
import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from data import load_sequences
from model import build_model, next_token_nll


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path), strict=False)
    return model.eval()


@torch.no_grad()
def perplexity(model: torch.nn.Module, tokens: torch.Tensor, batch: int = 256) -> float:
    total = sum(next_token_nll(model, tokens[i:i + batch]).sum().item()
                for i in range(0, len(tokens), batch))
    return math.exp(total / (tokens.shape[0] * (tokens.shape[1] - 1)))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    path = Path(args.path)
    ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
    val = load_sequences("val")
    for ckpt in ckpts:
        print(f"{ckpt.name}  validation perplexity {perplexity(load_checkpoint(str(ckpt), args.scale), val):.4f}")
