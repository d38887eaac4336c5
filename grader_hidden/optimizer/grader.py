"""Hidden grader of the `optimizer` task: held-out perplexity against the exact source.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), best_attainable(split, cfg), materialize(scale, dest),
grading_data(scale, dest).

Graded on a fresh instance of the source family (common.hmm.build_source): what the agent sees, the
committed training splits and the validation split, is text of the visible source (secret
`source`); a graded training run is served text of another HMM of the family, drawn from the secret
`instance` seed (grading_data, held by the meter), and the hidden selection and test splits are its
text too. A split is {"tokens": [N, 128] uint8, "instance": "graded" or "visible"}: the Bayes
optimum of a text is its own source's (the 1.0 anchor, by the forward algorithm).

The source family is the shared library's sparse HMM (grader_hidden/common/hmm.py) at sequences of
SEQ_LEN symbols. Two instances share no parameters (each predicts the other's text worse than a
uniform guess), so nothing a patch memorises of the visible instance transfers; what the family has
in common (its structure and sizes) does.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import yaml

from ai4ai.core.hidden import shrunk, train_split, write_splits

from ..common import hmm, lm

HERE = Path(__file__).resolve().parent
SEQ_LEN = 128
SPLITS = {"selection": 1024, "test": 4096, "validation": 1024}  # sequences of 128 symbols
VALIDATION_SEQUENCES = SPLITS["validation"]
TRAIN_SEQUENCES = {"ci": 2_048, "smoke": 16_384, "quick": 65_536, "full": 4_194_304}
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py)
    TRAIN_SEQUENCES = {**TRAIN_SEQUENCES, "quick": 512, "full": 512}
    SPLITS = {"selection": 128, "test": 256, "validation": 128}
    VALIDATION_SEQUENCES = SPLITS["validation"]


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def _source(instance: str = "visible") -> hmm.HMM:
    """The visible source (the text the agent is given) or the graded instance of its family."""
    return hmm.build_source(_secrets()["source" if instance == "visible" else "instance"])


def split(name: str, cfg=None) -> dict:
    """A hidden split regenerated from its secret seed: {"tokens": [N, 128] uint8, "instance"}. The
    selection and test splits are text of the graded instance; the validation split (committed as
    data/val.u8) is the visible source's."""
    instance = "visible" if name == "validation" else "graded"
    return {"tokens": hmm.sample(_source(instance), SPLITS[name], _secrets()[name], SEQ_LEN), "instance": instance}


def _nll(model: torch.nn.Module, tokens: np.ndarray) -> np.ndarray:
    """Per-sequence mean -log p(x_t | x_<t), t = 1..T-1, as float64 [N], 64 sequences at a time."""
    return lm.nll(model, tokens, batch=64)


def evaluate(model: torch.nn.Module, split: dict, cfg=None) -> float:
    """Perplexity (raw metric, lower is better; the score uses phi = -log perplexity)."""
    return math.exp(float(_nll(model, split["tokens"]).mean()))


def evaluate_with_noise(model: torch.nn.Module, split: dict, cfg=None) -> tuple[float, float]:
    """(perplexity, standard error of the mean excess NLL over the Bayes predictor, in nats)."""
    nll = _nll(model, split["tokens"])
    excess = nll - hmm.conditional_nll(_source(split["instance"]), split["tokens"]).mean(1)
    return math.exp(float(nll.mean())), float(excess.std(ddof=1) / math.sqrt(len(excess)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero, so the logits are all 0 (uniform)."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def best_attainable(split: dict, cfg=None) -> float:
    """The text's own source's perplexity on it: the Bayes optimum."""
    return math.exp(float(hmm.conditional_nll(_source(split["instance"]), split["tokens"]).mean()))


def materialize(scale: str, dest: Path) -> dict:
    """Write the training split of `scale` (and the validation split) of the visible source into
    dest; return sha256s."""
    s, src = _secrets(), _source()
    return write_splits(
        dest,
        {
            **train_split(scale, hmm.sample(src, TRAIN_SEQUENCES[scale], s[f"train_{scale}"], SEQ_LEN)),
            "val.u8": hmm.sample(src, VALIDATION_SEQUENCES, s["validation"], SEQ_LEN),
        },
    )


def grading_data(scale: str, dest: Path) -> dict:
    """The training split a graded run is served at `scale`: as many sequences as the committed one
    (materialize), from the same seed, of the graded instance; return sha256s."""
    tokens = hmm.sample(_source("graded"), TRAIN_SEQUENCES[scale], _secrets()[f"train_{scale}"], SEQ_LEN)
    return write_splits(dest, train_split(scale, tokens))
