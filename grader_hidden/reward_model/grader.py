"""Hidden grader of the `reward_model` task: pairwise accuracy against the clean hidden rule.

Interface (see ai4ai/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), materialize(scale, dest).
"""
from __future__ import annotations

import hashlib
import math
from pathlib import Path

import numpy as np
import torch
import yaml

from . import rule

HERE = Path(__file__).resolve().parent
SPLITS = {"selection": 4_000, "test": 40_000, "validation": 4_000}     # pairs, clean labels, no ties
TRAIN_PAIRS = {"ci": 512, "smoke": 2_048, "full": 1_048_576}         # noisy labels
UNLABELLED = 32_768                                                    # sequences for the base LM
SEQ = rule.SEQ_LEN


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def split(name: str, cfg=None) -> np.ndarray:
    """A hidden split: pair rows [N, 2 * SEQ_LEN + 1] uint8 with clean labels, from its secret seed."""
    return rule.pairs(SPLITS[name], _secrets()[name], noise=0.0)


@torch.no_grad()
def rewards(model: torch.nn.Module, tokens: np.ndarray, batch: int = 2048) -> np.ndarray:
    """The model's reward of each sequence [N, SEQ_LEN] as float64 [N]."""
    x = torch.from_numpy(tokens.astype(np.int64))
    device = next(model.parameters()).device
    out = [model(x[i:i + batch].to(device)).double().cpu().numpy() for i in range(0, len(x), batch)]
    return np.concatenate(out).reshape(-1)


def credit(ra: np.ndarray, rb: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Per pair: 1 if the preferred response gets the higher reward, 0.5 on a tie, 0 otherwise.

    Any non-finite reward zeroes every pair (the checkpoint scores 0)."""
    if not (np.isfinite(ra).all() and np.isfinite(rb).all()):
        return np.zeros(len(label))
    a_wins = np.where(ra > rb, 1.0, np.where(ra == rb, 0.5, 0.0))
    return np.where(label == 1, a_wins, 1.0 - a_wins)


def _credit(model: torch.nn.Module, data: np.ndarray) -> np.ndarray:
    model.eval()
    return credit(rewards(model, data[:, :SEQ]), rewards(model, data[:, SEQ:2 * SEQ]), data[:, -1])


def evaluate(model: torch.nn.Module, split: np.ndarray, cfg=None) -> float:
    """Pairwise accuracy against the clean rule (ties 0.5; non-finite rewards 0). Higher is better."""
    return float(_credit(model, split).mean())


def evaluate_with_noise(model: torch.nn.Module, split: np.ndarray, cfg=None) -> tuple[float, float]:
    """(accuracy, standard error of the per-pair shortfall from the rule, which scores 1 on every pair)."""
    c = _credit(model, split)
    return float(c.mean()), float((1.0 - c).std(ddof=1) / math.sqrt(len(c)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: the head is zero, so every reward is 0 and every pair a tie (0.5)."""
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
    return model


def best_attainable(split: np.ndarray, cfg=None) -> float:
    """The rule itself ranks every pair correctly (the hidden splits have no ties)."""
    return 1.0


def materialize(scale: str, dest: Path) -> dict:
    """Write the training split of `scale`, the validation split and the unlabelled sequences; return sha256s."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    s = _secrets()
    files = {f"train_{scale}.u8": rule.pairs(TRAIN_PAIRS[scale], s[f"train_{scale}"], noise=rule.NOISE),
             "val.u8": split("validation"),
             "unlabelled.u8": rule.unlabelled(UNLABELLED, s["unlabelled"])}
    sums = {}
    for name, arr in files.items():
        raw = np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
        (dest / name).write_bytes(raw)
        sums[name] = hashlib.sha256(raw).hexdigest()
    return sums
