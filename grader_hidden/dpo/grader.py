"""Hidden grader of the `dpo` task: the rate of greedy answers that meet the format AND are right.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), best_attainable(split, cfg), materialize(scale, dest).

Generation: greedy, batched by prompt length, at most SEQ_LEN tokens in all; ties go to the
lowest token id (torch.argmax returns the first maximum), which is EOS. So the uninformative
model (all weights zero -> all logits equal) answers the empty string and fails every prompt:
the 0 anchor is exactly 0.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import yaml

from ai4ai.core.hidden import shrunk, train_split, write_splits
from ai4ai.repo.models import cache_kwarg, token_maps

from . import tasks

HERE = Path(__file__).resolve().parent
SPLITS = {"selection": 1500, "test": 6000, "validation": 2000}  # prompts
TRAIN_PAIRS = {"ci": 2_048, "smoke": 16_384, "quick": 98_304, "full": 4_194_304}
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py)
    TRAIN_PAIRS = {**TRAIN_PAIRS, "quick": 256, "full": 256}
    SPLITS = {"selection": 128, "test": 256, "validation": 128}  # the hidden splits too: evaluation in seconds
SFT_DEMOS = 40_000  # prepare-only demonstrations

# The repo's vocabulary (config.py), repeated here so the grader needs no repo code.
CHARS = " |>!.[]#*-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
EOS = 0
SEQ_LEN = 32
_ID = {c: i + 1 for i, c in enumerate(CHARS)}


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def encode(text: str) -> list[int]:
    return [_ID[c] for c in text]


def decode(ids) -> str:
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        out.append(CHARS[i - 1] if 1 <= i <= len(CHARS) else "\x00")
    return "".join(out)


def prompts(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [tasks.sample_prompt(rng) for _ in range(n)]


def split(name: str, cfg=None) -> list[dict]:
    """A hidden split: a list of prompts, regenerated from its secret seed."""
    return prompts(SPLITS[name], _secrets()[name])


# --------------------------------------------------------------------------- generation, scoring


@torch.no_grad()
def generate(model: torch.nn.Module, texts: list[str], batch: int = 2048) -> list[str]:
    """Greedy answers (strings up to the first EOS) for prompt strings, in order."""
    model.eval()
    device = next(model.parameters()).device
    by_len: dict = {}
    for i, t in enumerate(texts):
        by_len.setdefault(len(t), []).append(i)
    outs = [""] * len(texts)
    for plen in sorted(by_len):
        idx = by_len[plen]
        for s in range(0, len(idx), batch):
            chunk = idx[s : s + batch]
            x = torch.tensor([encode(texts[i]) for i in chunk], dtype=torch.long, device=device)
            gen = _greedy(model, x, *token_maps(model, device))
            for i, row in zip(chunk, gen.cpu().tolist()):
                outs[i] = decode(row)
    return outs


def _greedy(model, prompts: torch.Tensor, to_model=lambda t: t, to_task=lambda t: t) -> torch.Tensor:
    """Greedy continuation of equal-length prompts [B, P]: [B, SEQ_LEN - P], EOS after the first EOS.
    Task token ids in and out; to_model/to_task translate for a model with a vocabulary of its own
    (task.model_path, ai4ai.repo.models.token_maps)."""
    B, P = prompts.shape
    steps = SEQ_LEN - P
    out = torch.zeros(B, steps, dtype=torch.long, device=prompts.device)
    done = torch.zeros(B, dtype=torch.bool, device=prompts.device)
    cache = cache_kwarg()
    res = model(input_ids=to_model(prompts), use_cache=True)
    for t in range(steps):
        logits = res.logits[:, -1].double()
        logits = torch.nan_to_num(logits, nan=-math.inf)
        nxt = logits.argmax(-1)  # ties: lowest id (EOS first)
        nxt = torch.where(done, to_model(torch.zeros_like(nxt)), nxt)
        out[:, t] = to_task(nxt)
        done |= out[:, t] == EOS
        if bool(done.all()) or t == steps - 1:
            break
        res = model(input_ids=nxt[:, None], use_cache=True, **{cache: getattr(res, cache)})
    return out


def score_outputs(items: list[dict], outs: list[str]) -> np.ndarray:
    """1.0 where the output meets the constraint and answers correctly, else 0.0."""
    return np.array([float(all(tasks.verify(p, o))) for p, o in zip(items, outs)])


def _correct(model, items) -> np.ndarray:
    return score_outputs(items, generate(model, [tasks.prompt_text(p) for p in items]))


def evaluate(model: torch.nn.Module, split: list[dict], cfg=None) -> float:
    """Share of prompts whose greedy answer meets the constraint and is right (higher is better)."""
    return float(_correct(model, split).mean())


def evaluate_with_noise(model: torch.nn.Module, split: list[dict], cfg=None) -> tuple[float, float]:
    """(rate, standard error of the per-prompt shortfall 1 - correct, against the perfect answerer)."""
    c = _correct(model, split)
    return float(c.mean()), float((1 - c).std(ddof=1) / math.sqrt(len(c)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero, so every next-token distribution is uniform."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def best_attainable(split=None, cfg=None) -> float:
    return 1.0


# --------------------------------------------------------------------------- materialized files


def _row(text: str) -> list[int]:
    ids = encode(text) + [EOS]
    assert len(ids) <= SEQ_LEN, text
    return ids + [EOS] * (SEQ_LEN - len(ids))


def pairs_array(n: int, seed: int) -> np.ndarray:
    """[n, 2, SEQ_LEN] uint8: chosen and rejected sequences (prompt + answer + EOS, PAD after).

    Chosen: the canonical answer (right, compliant). Rejected, half each: the right answer with
    the format broken (mostly the constraint ignored), or the format met around a plausible
    wrong answer (a digit changed, off by one or ten, another operand, letters swapped)."""
    rng = np.random.default_rng(seed)
    out = np.zeros((n, 2, SEQ_LEN), dtype=np.uint8)
    for i in range(n):
        p = tasks.sample_prompt(rng)
        c, r = tasks.pair(p, rng)
        pt = tasks.prompt_text(p)
        out[i, 0], out[i, 1] = _row(pt + c), _row(pt + r)
    return out


def demos_array(n: int, seed: int, dirs: dict) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.zeros((n, SEQ_LEN), dtype=np.uint8)
    for i in range(n):
        p = tasks.sample_prompt(rng)
        out[i] = _row(tasks.prompt_text(p) + tasks.demo(p, rng, dirs))
    return out


def validation_array() -> np.ndarray:
    """[N, SEQ_LEN] uint8: validation prompts with their canonical answers (the repo's proxy)."""
    return np.array([_row(tasks.prompt_text(p) + tasks.target(p)) for p in split("validation")], dtype=np.uint8)


def materialize(scale: str, dest: Path, with_sft: bool = False) -> dict:
    """Write the training pairs of `scale` and the validation split (and, for the repo, the
    prepare-only demonstrations) into dest; return their sha256s."""
    s = _secrets()
    files = {**train_split(scale, pairs_array(TRAIN_PAIRS[scale], s[f"train_{scale}"])), "val.u8": validation_array()}
    if with_sft:
        files["sft.u8"] = demos_array(SFT_DEMOS, s["sft"], tasks.directions(s["tasks"]))
    return write_splits(dest, files)
