"""Proxy evaluation: solve rate of a checkpoint on the public validation levels. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke

The benchmark's score is the same measurement on hidden levels (secret seeds) the agent never
sees: actions are sampled from softmax(logits) with noise fixed per (level, step), and a level
counts as solved if every box is on a target within the scale's step limit.
"""
import argparse
from pathlib import Path

import torch
from safetensors.torch import load_file

from config import VALIDATION_LEVELS, VALIDATION_SEED, get_scale
from env import generate_levels, solved_mask
from model import build_model


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path), strict=True)
    return model.eval()


def solve_rate(model: torch.nn.Module, scale: str) -> float:
    s = get_scale(scale)
    levels = generate_levels(VALIDATION_LEVELS, VALIDATION_SEED, s)
    return float(solved_mask(model, levels, s.max_steps, [VALIDATION_SEED, 1]).mean())


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    path = Path(args.path)
    ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
    for ckpt in ckpts:
        print(f"{ckpt.name}  validation solve rate {solve_rate(load_checkpoint(str(ckpt), args.scale), args.scale):.4f}")
