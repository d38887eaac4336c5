"""Proxy evaluation: the validation rate of each checkpoint. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke [--reference]

For each validation prompt the policy answers greedily (at most SEQ_LEN tokens in all; ties go
to the lowest token id, EOS). An answer counts when it equals the reference answer, i.e. it
is right and meets the prompt's format constraint. The benchmark's score uses hidden prompts
the agent never sees; this split is for development only and is absent from the grader's
training run. --reference also scores the prepared policy.
"""
import argparse
from pathlib import Path

import torch
from safetensors.torch import load_file

from checkpoint import load_policy
from config import decode
from data import load_rows, prompt_lengths
from model import build_model, greedy_generate


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path), strict=False)
    return model.eval()


@torch.no_grad()
def validation_rate(model: torch.nn.Module, rows: torch.Tensor, batch: int = 2048) -> float:
    lens = prompt_lengths(rows)
    hits = 0
    for plen in lens.unique().tolist():
        sel = rows[lens == plen]
        for i in range(0, len(sel), batch):
            r = sel[i:i + batch]
            gen = greedy_generate(model, r[:, :plen])
            hits += sum(decode(g) == decode(t[plen:]) for g, t in zip(gen.tolist(), r.tolist()))
    return hits / len(rows)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    p.add_argument("--reference", action="store_true")
    args = p.parse_args()
    path = Path(args.path)
    ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
    val = load_rows("val")
    if args.reference:
        print(f"prepared policy  validation rate {validation_rate(load_policy(args.scale).eval(), val):.4f}")
    for ckpt in ckpts:
        print(f"{ckpt.name}  validation rate {validation_rate(load_checkpoint(str(ckpt), args.scale), val):.4f}")
