"""Hidden grader of the `optimizer` task: held-out perplexity against the exact source.

Interface (see ai4ai/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), best_attainable(split, cfg), materialize(scale, dest).
"""
from __future__ import annotations

import os
import hashlib
import math
from pathlib import Path

import numpy as np
import torch
import yaml

from . import source

HERE = Path(__file__).resolve().parent
SPLITS = {"selection": 1024, "test": 4096, "validation": 1024}   # sequences of 128 symbols
VALIDATION_SEQUENCES = SPLITS["validation"]
TRAIN_SEQUENCES = {"ci": 2_048, "smoke": 16_384, "full": 4_194_304}
if os.environ.get("AI4AI_SHRINK"):      # full at CPU sizes (tests/test_full_shrunk.py)
    TRAIN_SEQUENCES = {**TRAIN_SEQUENCES, "full": 512}
    SPLITS = {"selection": 128, "test": 256, "validation": 128}
    VALIDATION_SEQUENCES = SPLITS["validation"]


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def _source() -> source.HMM:
    return source.build_source(_secrets()["source"])


def split(name: str, cfg=None) -> np.ndarray:
    """A hidden split ([N, 128] uint8), regenerated from its secret seed."""
    return source.sample(_source(), SPLITS[name], _secrets()[name])


@torch.no_grad()
def _nll(model: torch.nn.Module, tokens: np.ndarray, batch: int = 64) -> np.ndarray:
    """Per-sequence mean -log p(x_t | x_<t), t = 1..T-1, as float64 [N]."""
    x = torch.from_numpy(tokens.astype(np.int64))
    device = next(model.parameters()).device
    out = []
    for i in range(0, len(x), batch):
        b = x[i:i + batch].to(device)
        logits = model(input_ids=b).logits[:, :-1].double()
        logp = torch.log_softmax(logits, dim=-1).gather(-1, b[:, 1:, None]).squeeze(-1)
        out.append((-logp).mean(1).cpu().numpy())
    return np.concatenate(out)


def evaluate(model: torch.nn.Module, split: np.ndarray, cfg=None) -> float:
    """Perplexity (raw metric, lower is better; the score uses phi = -log perplexity)."""
    return math.exp(float(_nll(model, split).mean()))


def evaluate_with_noise(model: torch.nn.Module, split: np.ndarray, cfg=None) -> tuple[float, float]:
    """(perplexity, standard error of the mean excess NLL over the Bayes predictor, in nats)."""
    nll = _nll(model, split)
    excess = nll - source.conditional_nll(_source(), split).mean(1)
    return math.exp(float(nll.mean())), float(excess.std(ddof=1) / math.sqrt(len(excess)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero, so the logits are all 0 (uniform)."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def best_attainable(split: np.ndarray, cfg=None) -> float:
    """The source's own perplexity on the same text: the Bayes optimum."""
    return math.exp(float(source.conditional_nll(_source(), split).mean()))


def materialize(scale: str, dest: Path) -> dict:
    """Write the training split of `scale` (and the validation split) into dest; return sha256s."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    s, hmm = _secrets(), _source()
    files = {f"train_{scale}.u8": source.sample(hmm, TRAIN_SEQUENCES[scale], s[f"train_{scale}"]),
             "val.u8": source.sample(hmm, VALIDATION_SEQUENCES, s["validation"])}
    sums = {}
    for name, arr in files.items():
        raw = arr.tobytes()
        (dest / name).write_bytes(raw)
        sums[name] = hashlib.sha256(raw).hexdigest()
    return sums
