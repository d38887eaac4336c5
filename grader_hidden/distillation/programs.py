"""The hidden task of `distillation`: list transformations named by three instruction codes.

A prompt is  <pad>.. BOS f g o x_1 .. x_L SEP  (left-padded to PROMPT_W) with L in
[MIN_LEN, MAX_LEN] digits. The answer is o(g(f(x))) followed by EOS, where f and g are each
one of: none, dedupe (keep one occurrence of each value), keep evens, keep odds, keep
high (>= 5), keep low (< 5); and o orders the result ascending or descending. This file lives only in grader_hidden/: the repo holds materialized prompts (and
the teacher's ground-truth training set), never the rule that labels them.
"""
from __future__ import annotations

import numpy as np

# token ids: must match repos_frozen/distillation/config.py
PAD, BOS, SEP, EOS = 0, 1, 2, 3
DIGIT0 = 4                       # digits 0..9 -> 4..13
STEPS = "NDEOHW"                 # none, dedupe, evens, odds, high, low
ORDERS = "AZ"                    # ascending, descending
OPS = {c: 14 + i for i, c in enumerate(STEPS + ORDERS)}
VOCAB = 14 + len(OPS)            # 22
MIN_LEN, MAX_LEN = 3, 7
PROMPT_W = MAX_LEN + 5           # BOS f g o items SEP
ANSWER_W = MAX_LEN + 1           # answer + EOS
N_DIGITS = 10


def apply_step(op: str, xs: list) -> list:
    if op == "D":
        seen, out = set(), []
        for x in xs:
            if x not in seen:
                seen.add(x)
                out.append(x)
        return out
    keep = {"E": lambda x: x % 2 == 0, "O": lambda x: x % 2 == 1,
            "H": lambda x: x >= 5, "W": lambda x: x < 5}.get(op)
    return [x for x in xs if keep(x)] if keep else list(xs)


def transform(f: str, g: str, o: str, xs: list) -> list:
    return sorted(apply_step(g, apply_step(f, xs)), reverse=(o == "Z"))


def sample(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n prompts [n, PROMPT_W] (PAD left: every prompt ends at the same position) and answers
    [n, ANSWER_W] (EOS then PAD right), uint8. Every answer holds at least one item: a draw
    whose answer would be empty is redrawn (program and list)."""
    rng = np.random.default_rng(seed)
    prompts = np.full((n, PROMPT_W), PAD, dtype=np.uint8)
    answers = np.full((n, ANSWER_W), PAD, dtype=np.uint8)
    for i in range(n):
        while True:
            a, b = STEPS[rng.integers(len(STEPS))], STEPS[rng.integers(len(STEPS))]
            c = ORDERS[rng.integers(len(ORDERS))]
            xs = [int(v) for v in rng.integers(0, N_DIGITS, size=rng.integers(MIN_LEN, MAX_LEN + 1))]
            ys = transform(a, b, c, xs)
            if ys:
                break
        p = [BOS, OPS[a], OPS[b], OPS[c]] + [DIGIT0 + x for x in xs] + [SEP]
        prompts[i, PROMPT_W - len(p):] = p
        ans = [DIGIT0 + y for y in ys] + [EOS]
        answers[i, :len(ans)] = ans
    return prompts, answers
