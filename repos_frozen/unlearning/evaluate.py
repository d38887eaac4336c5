"""Proxy evaluation on the visible validation split. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke

For each checkpoint: forget accuracy (every forget fact), retain accuracy on the validation
retain facts (held out from training, like the grader's), general-text perplexity on the
validation text against the prepared model's, and the proxy metric (the grader's formula).
The benchmark's score uses hidden retain facts and hidden text; this split is for development
only and is absent from the grader's training run.
"""
import argparse
import math
from pathlib import Path

import torch
from safetensors.torch import load_file

from config import VALUE_POS
from data import load_array, load_prepared
from model import build_model, text_nll, value_logits

PPL_BOUND = 1.5      # the grader's bound: perplexity above 1.5 x the prepared model's scores 0


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path), strict=False)
    return model.eval()


@torch.no_grad()
def accuracy(model: torch.nn.Module, facts: torch.Tensor) -> float:
    return (value_logits(model, facts).argmax(-1) == facts[:, VALUE_POS]).float().mean().item()


@torch.no_grad()
def perplexity(model: torch.nn.Module, text: torch.Tensor) -> float:
    return math.exp(text_nll(model, text).mean().item())


def metric(forget_acc: float, retain_acc: float, ppl: float, ref_ppl: float) -> float:
    """Harmonic mean of forget efficacy and retain accuracy; 0 past the perplexity bound."""
    if not (math.isfinite(ppl) and ppl <= PPL_BOUND * ref_ppl):
        return 0.0
    f, r = 1.0 - forget_acc, retain_acc
    return 0.0 if f + r <= 0 else 2 * f * r / (f + r)


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    path = Path(args.path)
    ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
    forget, retain, text = load_array("forget"), load_array("val_retain"), load_array("val_text")
    ref = load_prepared(build_model(args.scale), args.scale).eval()
    ref_ppl = perplexity(ref, text)
    print(f"prepared model: forget accuracy {accuracy(ref, forget):.4f} validation retain accuracy "
          f"{accuracy(ref, retain):.4f} perplexity {ref_ppl:.4f}")
    for ckpt in ckpts:
        m = load_checkpoint(str(ckpt), args.scale)
        fa, ra, ppl = accuracy(m, forget), accuracy(m, retain), perplexity(m, text)
        print(f"{ckpt.name}  forget accuracy {fa:.4f} retain accuracy {ra:.4f} perplexity {ppl:.4f} "
              f"metric {metric(fa, ra, ppl, ref_ppl):.4f}")
