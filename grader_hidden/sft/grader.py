"""Hidden grader of the `sft` task: exact match of greedy final answers on hidden problems.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), materialize(scale, dest), grading_data(scale, dest).
metric.best is 1.0.

Graded on a fresh instance (another operator table): what the agent sees, the committed splits, the
pretraining corpus and the base model made from it, is the visible table's (secret `table`); a graded
run starts from a base the repo's own prepare.py pretrained on the graded table's corpus and is served
that table's training split (grading_data, from the secret `instance` seed), and the hidden selection
and test problems are its problems. 936 facts fit in a patch; the graded table's are nowhere in it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml

from ai4ai.core.hidden import shrunk, train_split, write_splits
from ai4ai.repo.models import cache_kwarg, token_maps

from . import problems as P

HERE = Path(__file__).resolve().parent
# problems. The test split is sized for check_task's sampling-noise check (0.9 x its standard error
# over phi1 - phib <= 0.01): 10,000 gave 0.0144 at smoke (se 0.00467 on the batch-4 baseline 0.708);
# the noise goes as 1/sqrt(n), so 20,736 would just pass and 32,000 should give ~0.0080. A greedy
# pass over it takes ~30 s on one CPU thread at ci/smoke.
SPLITS = {"selection": 1024, "test": 32000, "validation": 1024}
TRAIN_EXAMPLES = {"ci": 4_096, "smoke": 16_384, "quick": 65_536, "full": 4_194_304}
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py)
    TRAIN_EXAMPLES = {**TRAIN_EXAMPLES, "quick": 512, "full": 512}
    SPLITS = {"selection": 128, "test": 256, "validation": 128}  # the hidden splits too: evaluation in seconds
PRETRAIN_ROWS = 8_192
BATCH = 1024


@dataclass(frozen=True)
class Split:
    rows: np.ndarray  # [N, SEQ_LEN] uint8: <bos> prompt completion <eos> <pad>...
    prompt_len: np.ndarray  # [N]: tokens up to and including ':'
    answers: list  # the right final value of each problem, as text


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def _table(instance: str = "visible") -> np.ndarray:
    """The visible operator table (the agent's splits) or the graded one (a fresh instance)."""
    return P.operator_table(_secrets()["table" if instance == "visible" else "instance"])


def split(name: str, cfg=None) -> Split:
    """A split of problems, regenerated from its secret seed: the selection and test problems are the
    graded table's; the validation split (committed as data/val.u8) is the visible table's."""
    rows, plen, answers = P.problems(
        _table("visible" if name == "validation" else "graded"), SPLITS[name], _secrets()[name]
    )
    return Split(rows, plen, answers)


@torch.no_grad()
def generate(model: torch.nn.Module, data: Split) -> list[str | None]:
    """Greedy completion of every prompt (until <eos> or SEQ_LEN), as text; None where a logit
    was not finite. Prompts of equal length are batched together, so no padding is needed."""
    device = next(model.parameters()).device
    to_model, to_task = token_maps(model, device)
    cache = cache_kwarg()
    out: list[str | None] = [None] * len(data.rows)
    for L in sorted(set(data.prompt_len.tolist())):
        rows = np.nonzero(data.prompt_len == L)[0]
        for i in range(0, len(rows), BATCH):
            idx = rows[i : i + BATCH]
            x = to_model(torch.from_numpy(data.rows[idx, :L].astype(np.int64)).to(device))
            res = model(input_ids=x, use_cache=True)
            toks, finite, ended = [], torch.ones(len(idx), dtype=torch.bool, device=device), None
            for t in range(P.SEQ_LEN - L):
                logits = res.logits[:, -1].float()
                finite &= torch.isfinite(logits).all(-1)
                nxt = torch.nan_to_num(logits, nan=0.0).argmax(-1, keepdim=True)
                toks.append(to_task(nxt))
                ended = (toks[-1][:, 0] == P.EOS) if ended is None else ended | (toks[-1][:, 0] == P.EOS)
                if t + 1 == P.SEQ_LEN - L or bool(ended.all()):
                    break
                res = model(input_ids=nxt, use_cache=True, **{cache: getattr(res, cache)})
            gen = torch.cat(toks, 1).cpu().numpy()
            ok = finite.cpu().numpy()
            for j, r, f in zip(idx, gen, ok):
                out[j] = P.decode(r) if f else None
    return out


def final_answer(completion: str | None) -> str | None:
    """The value after the last '>' of a completion, or None when it has none."""
    if not completion or ">" not in completion:
        return None
    return completion[completion.rfind(">") + 1 :]


def correct(model: torch.nn.Module, data: Split) -> np.ndarray:
    """[N] float64: 1 where the greedy final answer is exactly right (unparseable = wrong)."""
    return np.array([float(final_answer(c) == a) for c, a in zip(generate(model, data), data.answers)])


def evaluate(model: torch.nn.Module, split: Split, cfg=None) -> float:
    """Exact match of greedy final answers (raw metric, higher is better, best 1.0)."""
    return float(correct(model, split).mean())


def evaluate_with_noise(model: torch.nn.Module, split: Split, cfg=None) -> tuple[float, float]:
    """(exact match, standard error of the per-problem excess over the perfect solver)."""
    c = correct(model, split)
    return float(c.mean()), float((1.0 - c).std(ddof=1) / math.sqrt(len(c)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero, so every logit is 0 (it writes <pad>)."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def materialize(scale: str, dest: Path) -> dict:
    """Write the training split of `scale`, the validation split and the pretraining corpus, of the
    visible table."""
    s, table = _secrets(), _table()
    return write_splits(
        dest,
        {
            **train_split(scale, P.problems(table, TRAIN_EXAMPLES[scale], s[f"train_{scale}"])[0]),
            "val.u8": P.problems(table, SPLITS["validation"], s["validation"])[0],
            "pretrain.u8": P.warmup(table, PRETRAIN_ROWS, s["pretrain"]),
        },
    )


def grading_data(scale: str, dest: Path) -> dict:
    """What a graded run at `scale` is given, of the graded table, from the same seeds as the visible
    files: the training split (served by the meter) and the pretraining corpus, from which the repo's
    own prepare step makes the graded run's base model (data.grading_artifacts)."""
    s, table = _secrets(), _table("graded")
    return write_splits(
        dest,
        {
            **train_split(scale, P.problems(table, TRAIN_EXAMPLES[scale], s[f"train_{scale}"])[0]),
            "pretrain.u8": P.warmup(table, PRETRAIN_ROWS, s["pretrain"]),
        },
    )
