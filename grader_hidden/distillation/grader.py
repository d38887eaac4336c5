"""Hidden grader of the `distillation` task: exact match of the student's greedy answers.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), materialize(scale, dest), grading_data(scale, dest).
metric.best is 1.0.

Graded on a fresh instance (programs.draw_instance): what the agent sees, the committed prompts, the
validation answers, the teacher's ground-truth set and the teacher prepared on it, follows the visible
rules; a graded run's meter serves a teacher that the repo's own prepare.py trained on the graded
instance's ground-truth set (grading_data, from the secret `instance` seed), and the hidden selection
and test prompts are answered by that instance. Rules read off the visible answers are the wrong rules.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import yaml

from ai4ai.core.hidden import shrunk, train_split, write_splits
from ai4ai.repo.models import cache_kwarg

from . import programs as P

HERE = Path(__file__).resolve().parent
SPLITS = {"selection": 4000, "test": 100_000, "validation": 2000}  # prompts (test: 100,000 since the
# retune put the shipped run at 0.88 exact match, where 50,000 prompts moved sigma by 0.0115)
TEACHER_TRAIN = 40_000  # labelled, for prepare.py only
TRAIN_PROMPTS = {"ci": 512, "smoke": 2_048, "quick": 1_280, "full": 131_072}  # prompts only (config.py budget_prompts)
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py)
    TRAIN_PROMPTS = {**TRAIN_PROMPTS, "quick": 128, "full": 128}
    # the hidden splits too: evaluation in seconds. Not the validation split: val.u8 is committed with its
    # checksum in the repo's data/SHA256SUMS, and prepare.py reads it from the cache at full
    SPLITS = {**SPLITS, "selection": 128, "test": 256}


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def instance(which: str = "graded") -> P.Instance:
    """The visible instance (the agent's files and teacher) or the graded one (a fresh instance)."""
    return P.VISIBLE if which == "visible" else P.draw_instance(_secrets()["instance"])


def split(name: str, cfg=None) -> tuple[np.ndarray, np.ndarray]:
    """A hidden split: (prompts [N, PROMPT_W], answers [N, ANSWER_W]) uint8, from its secret seed. The
    selection and test prompts are answered by the graded instance; the validation split (committed
    as data/val.u8) by the visible one."""
    return P.sample(SPLITS[name], _secrets()[name], instance("visible" if name == "validation" else "graded"))


@torch.no_grad()
def greedy(model: torch.nn.Module, prompts: np.ndarray, batch: int = 1000) -> np.ndarray:
    """Greedy completions [N, ANSWER_W] (int64; -1 marks an item that met a non-finite logit).

    Decoding stops at <eos>, after which the completion is <pad>. A non-finite logit poisons
    the item (it is never correct).
    """
    device = next(model.parameters()).device
    x_all = torch.from_numpy(prompts.astype(np.int64))
    out = torch.full((len(x_all), P.ANSWER_W), P.PAD, dtype=torch.long)
    cache = cache_kwarg()
    for i in range(0, len(x_all), batch):
        res = model(input_ids=x_all[i : i + batch].to(device), use_cache=True)
        n = res.logits.shape[0]
        done = torch.zeros(n, dtype=torch.bool, device=device)
        bad = torch.zeros(n, dtype=torch.bool, device=device)
        for t in range(P.ANSWER_W):
            logits = res.logits[:, -1].double()
            bad |= ~torch.isfinite(logits).all(-1) & ~done
            nxt = torch.nan_to_num(logits, nan=0.0, posinf=0.0, neginf=0.0).argmax(-1)
            nxt = torch.where(done, torch.full_like(nxt, P.PAD), nxt)
            out[i : i + n, t] = nxt.cpu()
            done |= nxt == P.EOS
            if bool(done.all()) or t == P.ANSWER_W - 1:
                break
            res = model(input_ids=nxt[:, None], use_cache=True, **{cache: getattr(res, cache)})
        out[i : i + n][bad.cpu(), 0] = -1
    return out.numpy()


def score_completions(answers: np.ndarray, completions: np.ndarray) -> np.ndarray:
    """Per-prompt 0/1: completion [N, ANSWER_W] equals the true answer through <eos> (then <pad>)."""
    answers, completions = np.asarray(answers, dtype=np.int64), np.asarray(completions, dtype=np.int64)
    if completions.shape != answers.shape:
        raise ValueError(f"completions {completions.shape} do not match answers {answers.shape}")
    return (completions == answers).all(1).astype(np.float64)


def correct(model: torch.nn.Module, data: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Per-prompt 0/1: the model's greedy completion equals the true answer through <eos>."""
    prompts, answers = data
    return score_completions(answers, greedy(model, prompts))


def evaluate(model: torch.nn.Module, split, cfg=None) -> float:
    """Exact match in [0, 1] (raw metric, higher is better)."""
    return float(correct(model, split).mean())


def evaluate_with_noise(model: torch.nn.Module, split, cfg=None) -> tuple[float, float]:
    """(exact match, standard error of the per-item excess over a perfect predictor)."""
    c = correct(model, split)
    return float(c.mean()), float((1 - c).std(ddof=1) / math.sqrt(len(c)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero, so the logits are all 0 (argmax <pad>, never <eos>)."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def best_attainable(split, cfg=None) -> float:
    return 1.0


def _files(scale: str, inst: P.Instance) -> dict:
    s = _secrets()
    return {
        **train_split(scale, P.sample(TRAIN_PROMPTS[scale], s[f"train_{scale}"], inst)[0]),
        "val.u8": np.concatenate(P.sample(SPLITS["validation"], s["validation"], inst), axis=1),
        "teacher_train.u8": np.concatenate(P.sample(TEACHER_TRAIN, s["teacher_train"], inst), axis=1),
    }


def materialize(scale: str, dest: Path) -> dict:
    """Write train_<scale>.u8 (prompts only), val.u8 and teacher_train.u8 (labelled) of the visible
    instance into dest."""
    return write_splits(dest, _files(scale, instance("visible")))


def grading_data(scale: str, dest: Path) -> dict:
    """The same files of the graded instance, from the same seeds: the meter serves its training
    prompts, and the repo's own prepare step trains the graded run's teacher on its ground-truth set
    (data.grading_artifacts) and reports that teacher's exact match on its val.u8."""
    return write_splits(dest, _files(scale, instance("graded")))
