"""Hidden grader of the `reward_model` task: pairwise accuracy against the clean hidden rule.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), materialize(scale, dest), grading_data(scale, dest).

Graded on a fresh instance of the rule (rule.py): what the agent sees, the committed training pairs
and the validation split, follows rule.VISIBLE; a graded training run is served pairs labelled by
the instance drawn from the secret `rule` seed (grading_data, held by the meter), and the hidden
selection and test splits follow that instance too.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import yaml

from ai4ai.core.hidden import shrunk, train_split, write_splits

from . import rule

HERE = Path(__file__).resolve().parent
SPLITS = {"selection": 4_000, "test": 96_000, "validation": 4_000}  # pairs, clean labels, no ties
TRAIN_PAIRS = {"ci": 1_024, "smoke": 4_096, "quick": 65_536, "full": 4_194_304}  # labels from the raters
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py)
    TRAIN_PAIRS = {**TRAIN_PAIRS, "quick": 1_024, "full": 1_024}
    SPLITS = {"selection": 256, "test": 512, "validation": 256}  # the hidden splits too: evaluation in seconds
UNLABELLED = 32_768  # sequences for the base LM
SEQ = rule.SEQ_LEN


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def graded_rule() -> rule.Rule:
    """The rule instance the grader grades on (never the visible one)."""
    return rule.drawn(int(_secrets()["rule"]))


def validation_rows() -> np.ndarray:
    """The visible validation split as the repo's pair rows [N, 2 * SEQ + 2] (clean labels, no rater)."""
    return rule.pairs(SPLITS["validation"], _secrets()["validation"], raters=False)


def split(name: str, cfg=None) -> dict:
    """A hidden split regenerated from its secret seed: clean, untied pairs over shared responses.

    {"seqs": [S, SEQ] uint8, "a", "b": [N] indices into seqs, "label": [N] 1 if a is preferred,
    "group": [N] the group of responses a pair comes from (the unit of the standard error)}.
    The selection and test splits share responses within groups (each is scored once) and follow
    the graded instance; the validation split is the committed pair file (the visible instance),
    one group per pair.
    """
    if name == "validation":
        return from_rows(validation_rows())
    return rule.grouped(SPLITS[name], _secrets()[name], rule=graded_rule())


def from_rows(rows: np.ndarray) -> dict:
    """Pair rows [N, >= 2 * SEQ + 1] (a, b, label, ...) as a split of independent pairs."""
    n = len(rows)
    return {
        "seqs": np.concatenate([rows[:, :SEQ], rows[:, SEQ : 2 * SEQ]]),
        "a": np.arange(n),
        "b": np.arange(n, 2 * n),
        "label": rows[:, 2 * SEQ].copy(),
        "group": np.arange(n),
    }


@torch.no_grad()
def rewards(model: torch.nn.Module, tokens: np.ndarray) -> np.ndarray:
    """The model's reward of each sequence [N, SEQ] as float64 [N]."""
    x = torch.from_numpy(tokens.astype(np.int64))
    device = next(model.parameters()).device
    batch = 256 if device.type == "cpu" else 4096  # small batches are fastest on a CPU
    out = [model(x[i : i + batch].to(device)).double().cpu().numpy() for i in range(0, len(x), batch)]
    return np.concatenate(out).reshape(-1)


def credit(ra: np.ndarray, rb: np.ndarray, label: np.ndarray) -> np.ndarray:
    """Per pair: 1 if the preferred response gets the higher reward, 0.5 on a tie, 0 otherwise.

    Any non-finite reward zeroes every pair (the checkpoint scores 0)."""
    if not (np.isfinite(ra).all() and np.isfinite(rb).all()):
        return np.zeros(len(label))
    a_wins = np.where(ra > rb, 1.0, np.where(ra == rb, 0.5, 0.0))
    return np.where(label == 1, a_wins, 1.0 - a_wins)


def _credit(model: torch.nn.Module, data: dict) -> np.ndarray:
    model.eval()
    r = rewards(model, data["seqs"])
    if not np.isfinite(r).all():
        return np.zeros(len(data["label"]))
    return credit(r[data["a"]], r[data["b"]], data["label"])


def evaluate(model: torch.nn.Module, split: dict, cfg=None) -> float:
    """Pairwise accuracy against the clean rule (ties 0.5; non-finite rewards 0). Higher is better."""
    return float(_credit(model, split).mean())


def clustered_se(x: np.ndarray, group: np.ndarray) -> float:
    """Standard error of the mean of x when the units are groups (pairs of a group share responses)."""
    _, g = np.unique(group, return_inverse=True)
    sums, sizes = np.bincount(g, weights=x), np.bincount(g).astype(float)
    n_groups, m = len(sums), x.mean()
    if n_groups < 2:
        return 0.0
    return float(math.sqrt(n_groups / (n_groups - 1) * ((sums - m * sizes) ** 2).sum()) / len(x))


def evaluate_with_noise(model: torch.nn.Module, split: dict, cfg=None) -> tuple[float, float]:
    """(accuracy, standard error over groups of the per-pair shortfall from the rule, which scores 1)."""
    c = _credit(model, split)
    return float(c.mean()), clustered_se(1.0 - c, split["group"])


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: the head is zero, so every reward is 0 and every pair a tie (0.5)."""
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.zero_()
    return model


def best_attainable(split: dict, cfg=None) -> float:
    """The rule itself ranks every pair correctly (the hidden splits have no ties)."""
    return 1.0


def materialize(scale: str, dest: Path) -> dict:
    """Write the training split of `scale`, the validation split and the unlabelled sequences; return sha256s."""
    s = _secrets()
    return write_splits(
        dest,
        {
            **train_split(scale, rule.pairs(TRAIN_PAIRS[scale], s[f"train_{scale}"], raters=True)),
            "val.u8": validation_rows(),
            "unlabelled.u8": rule.unlabelled(UNLABELLED, s["unlabelled"]),
        },
    )


def grading_data(scale: str, dest: Path) -> dict:
    """The training pairs a graded run is served at `scale`: the same recipe as the committed ones
    (materialize), labelled by the graded instance of the rule and its raters; return sha256s."""
    return write_splits(
        dest,
        {
            **train_split(
                scale, rule.pairs(TRAIN_PAIRS[scale], _secrets()[f"train_{scale}"], raters=True, rule=graded_rule())
            )
        },
    )
