"""Proxy evaluation: exact match of greedy answers on the visible validation split. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke      # each checkpoint of a run
    python evaluate.py teacher --scale smoke          # the teacher itself (free: not metered)

The benchmark's score uses a hidden test split of the same task that the agent never sees;
the validation split here is for development only and is absent from the grader's training run.
"""
import argparse
from pathlib import Path

import torch
from safetensors.torch import load_file

from data import load_labelled
from model import build_model, greedy_generate


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path), strict=False)
    return model.eval()


def exact_match(model: torch.nn.Module, prompts: torch.Tensor, answers: torch.Tensor) -> float:
    """Share of prompts whose greedy completion equals the answer exactly (through <eos>)."""
    out = greedy_generate(model, prompts)
    return (out == answers).all(1).float().mean().item()


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    prompts, answers = load_labelled("val")
    if args.path == "teacher":
        from teacher import load_teacher_weights
        print(f"teacher  validation exact match {exact_match(load_teacher_weights(args.scale), prompts, answers):.4f}")
    else:
        path = Path(args.path)
        ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
        for ckpt in ckpts:
            em = exact_match(load_checkpoint(str(ckpt), args.scale), prompts, answers)
            print(f"{ckpt.name}  validation exact match {em:.4f}")
