"""Proxy evaluation: validity and perplexity of a checkpoint on the visible validation split. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke

A checkpoint is valid only if at most (1 - SPARSITY) of the weights of the prunable tensors,
counted together, are nonzero, every weight of those tensors is either zero or the dense model's
value bit for bit, and every other parameter equals the dense model's bit for bit (the grader
checks the same; an invalid checkpoint scores 0). The benchmark's score uses a
hidden test split the agent never sees; the validation split here is for development only and
is absent from the grader's pruning run.
"""
import argparse
import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from config import SPARSITY
from data import load_sequences
from model import build_model, dense_state, next_token_nll, prunable_parameters


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path), strict=False)
    return model.eval()


@torch.no_grad()
def check_pruned(model: torch.nn.Module, scale: str) -> list:
    """Why `model` is not a valid pruning of the dense model of `scale` (empty list: valid)."""
    dense = dense_state(scale)
    prunable = set(prunable_parameters(model))
    problems, nonzero, total = [], 0, 0
    for name, p in model.named_parameters():
        t = p.detach().float().cpu()
        if name in prunable:
            nonzero += int(torch.count_nonzero(t))
            total += t.numel()
            if ((t != 0) & (t.view(torch.int32) != dense[name].view(torch.int32))).any():
                problems.append(f"{name}: kept weights differ from the dense model's")
        elif not torch.equal(t.view(torch.int32), dense[name].view(torch.int32)):
            problems.append(f"{name} is not prunable and differs from the dense model")
    allowed = math.floor((1.0 - SPARSITY) * total)
    if nonzero > allowed:
        problems.append(f"{nonzero} nonzero prunable weights, at most {allowed} allowed "
                        f"(sparsity {1 - nonzero / total:.4f} < {SPARSITY})")
    return problems


@torch.no_grad()
def perplexity(model: torch.nn.Module, tokens: torch.Tensor, batch: int = 128) -> float:
    total = sum(next_token_nll(model, tokens[i:i + batch]).double().sum().item()
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
        model = load_checkpoint(str(ckpt), args.scale)
        problems = check_pruned(model, args.scale)
        status = "valid" if not problems else "INVALID: " + "; ".join(problems)
        print(f"{ckpt.name}  validation perplexity {perplexity(model, val):.4f}  ({status})")
