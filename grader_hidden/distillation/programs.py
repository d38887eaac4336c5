"""The hidden task of `distillation`: list transformations named by three instruction codes.

A prompt is  <pad>.. BOS f g o x_1 .. x_L SEP  (left-padded to PROMPT_W) with L in
[MIN_LEN, MAX_LEN] digits. The answer is o(g(f(x))) followed by EOS. What each code means is an
*instance* of the task:
- the visible instance (what the agent sees: the committed prompts, the validation answers and the
  teacher trained on them): f and g are each one of none, dedupe (keep one occurrence of each value),
  keep evens, keep odds, keep high (>= 5), keep low (< 5); o orders the result ascending or descending;
- a drawn instance (`draw_instance`, the graded one from a secret seed): the six step codes take the
  roles none, dedupe, three filters and a map in a drawn order; each filter keeps a drawn set of five
  digits, the map rewrites every item by a drawn derangement of the digits; o sorts by a drawn order
  of the ten digits (ascending or descending). A map is a kind of step the visible instance does not
  show, so an identifier of the graded instance written from the visible family's shape (filters,
  dedupe, an order) meets a step it cannot express (tests/redteam/test_rules_in_patch.py measures one).
  The teacher that prepare.py trains on this instance answers 0.88 of the hidden selection prompts
  right (0.68 of those that use the map), where the family without a map gave 0.97. A stride (every
  other item) was tried as well and left out: with it the teacher answered 0.72 (0.31 of the prompts
  that use the stride), so the task would have measured a weak teacher.
This file lives only in grader_hidden/: the repo holds materialized prompts (and the teacher's
ground-truth training set), never the rule that labels them.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np

# token ids: must match repos_frozen/distillation/config.py
PAD, BOS, SEP, EOS = 0, 1, 2, 3
DIGIT0 = 4  # digits 0..9 -> 4..13
STEPS = "NDEOHW"  # none, dedupe, evens, odds, high, low
ORDERS = "AZ"  # ascending, descending
OPS = {c: 14 + i for i, c in enumerate(STEPS + ORDERS)}
VOCAB = 14 + len(OPS)  # 22
MIN_LEN, MAX_LEN = 3, 7
PROMPT_W = MAX_LEN + 5  # BOS f g o items SEP
ANSWER_W = MAX_LEN + 1  # answer + EOS
N_DIGITS = 10


@dataclass(frozen=True)
class Map:
    """A step that rewrites every item x as to[x]."""

    to: tuple


@dataclass(frozen=True)
class Instance:
    """What the codes mean. steps: step code -> "none" | "dedupe" | the frozenset of digits a filter
    keeps | Map; rank[d]: digit d's place in the order that A sorts by (ascending) and Z reverses."""

    steps: dict
    rank: tuple


VISIBLE = Instance(
    steps={
        "N": "none",
        "D": "dedupe",
        "E": frozenset(range(0, 10, 2)),
        "O": frozenset(range(1, 10, 2)),
        "H": frozenset(range(5, 10)),
        "W": frozenset(range(5)),
    },
    rank=tuple(range(N_DIGITS)),
)


def draw_instance(seed: int) -> Instance:
    """A fresh instance of the family: the step codes' roles in a drawn order (none, dedupe, three
    filters each keeping a different drawn half of the digits, a map by a drawn derangement of the
    digits), and a drawn order of the digits."""
    rng = np.random.default_rng(seed)
    codes = [STEPS[i] for i in rng.permutation(len(STEPS))]
    halves = list(combinations(range(N_DIGITS), N_DIGITS // 2))
    kept = [frozenset(halves[i]) for i in rng.choice(len(halves), size=3, replace=False)]
    while True:
        to = tuple(int(v) for v in rng.permutation(N_DIGITS))
        if all(to[d] != d for d in range(N_DIGITS)):
            break
    roles = ["none", "dedupe", *kept, Map(to)]
    return Instance(steps=dict(zip(codes, roles)), rank=tuple(int(r) for r in np.argsort(rng.permutation(N_DIGITS))))


def apply_step(op: str, xs: list, inst: Instance = VISIBLE) -> list:
    role = inst.steps[op]
    if role == "dedupe":
        return list(dict.fromkeys(xs))
    if isinstance(role, Map):
        return [role.to[x] for x in xs]
    return list(xs) if role == "none" else [x for x in xs if x in role]


def transform(f: str, g: str, o: str, xs: list, inst: Instance = VISIBLE) -> list:
    return sorted(apply_step(g, apply_step(f, xs, inst), inst), key=inst.rank.__getitem__, reverse=(o == "Z"))


def sample(n: int, seed: int, inst: Instance = VISIBLE) -> tuple[np.ndarray, np.ndarray]:
    """n prompts [n, PROMPT_W] (PAD left: every prompt ends at the same position) and answers
    [n, ANSWER_W] (EOS then PAD right), uint8, answered by `inst`. Every answer holds at least one
    item: a draw whose answer would be empty is redrawn (program and list)."""
    rng = np.random.default_rng(seed)
    prompts = np.full((n, PROMPT_W), PAD, dtype=np.uint8)
    answers = np.full((n, ANSWER_W), PAD, dtype=np.uint8)
    for i in range(n):
        while True:
            a, b = STEPS[rng.integers(len(STEPS))], STEPS[rng.integers(len(STEPS))]
            c = ORDERS[rng.integers(len(ORDERS))]
            xs = [int(v) for v in rng.integers(0, N_DIGITS, size=rng.integers(MIN_LEN, MAX_LEN + 1))]
            ys = transform(a, b, c, xs, inst)
            if ys:
                break
        p = [BOS, OPS[a], OPS[b], OPS[c]] + [DIGIT0 + x for x in xs] + [SEP]
        prompts[i, PROMPT_W - len(p) :] = p
        ans = [DIGIT0 + y for y in ys] + [EOS]
        answers[i, : len(ans)] = ans
    return prompts, answers
