"""The hidden generator of chained-operator problems with worked solutions (never in a sandbox).

Must agree with repos_frozen/sft/config.py (vocabulary, format); tests check that it does.
"""

from __future__ import annotations

import numpy as np

PAD, BOS, EOS = 0, 1, 2
VALUES = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
OPERATORS = "abcdefghijklmnopqrstuvwxyz"
CHARS = VALUES + OPERATORS + "=;:>"
STOI = {c: i + 3 for i, c in enumerate(CHARS)}
ITOS = {i + 3: c for i, c in enumerate(CHARS)}
SEQ_LEN = 64
K_MIN, K_MAX = 6, 6  # operators per problem
M, N_OPS = len(VALUES), len(OPERATORS)
# operator frequencies follow a Zipf law of exponent ZIPF (operator `a` is the most common, `z`
# the rarest), in problems and in the pretraining facts alike: 36 x 26 = 936 facts, the rarest
# (`z`, 0.34% of operators) seen about 9 times each in a smoke run's training split, so
# learning them from few examples is the bottleneck. With exponent 1 the rarest facts were seen
# ~40 times and a warmup + cosine schedule alone learned nearly all of them (exact match 0.96,
# sigma 0.87 at smoke: a toy by check_task's 0.8 line); prototype at smoke, one seed, shipped
# vs that schedule: exponent 1.0 0.703 vs 0.982, 1.5 0.686 vs 0.852, 2.0 0.670 vs 0.825
ZIPF = 1.5
OP_PROBS = 1.0 / np.arange(1, N_OPS + 1) ** ZIPF
OP_PROBS /= OP_PROBS.sum()


def encode(text: str) -> list[int]:
    return [STOI[c] for c in text]


def decode(ids) -> str:
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        out.append(ITOS.get(i, "_"))
    return "".join(out)


def operator_table(seed: int) -> np.ndarray:
    """[N_OPS, M]: operator o maps value x to table[o, x] (each row a permutation)."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.permutation(M) for _ in range(N_OPS)])


def step_text(table: np.ndarray, x: int, o: int) -> str:
    return f"{VALUES[x]}{OPERATORS[o]}={VALUES[table[o, x]]};"


def problem(table: np.ndarray, rng: np.random.Generator, k_min: int = K_MIN) -> tuple[str, str, str]:
    """(prompt, completion, answer): e.g. ('5hjab:', '5h=4;4j=2;2a=2;2b=5;>5', '5')."""
    k = int(rng.integers(k_min, K_MAX + 1))
    x = int(rng.integers(0, M))
    ops = [int(o) for o in rng.choice(N_OPS, size=k, p=OP_PROBS)]
    prompt = VALUES[x] + "".join(OPERATORS[o] for o in ops) + ":"
    steps = ""
    for o in ops:
        steps += step_text(table, x, o)
        x = int(table[o, x])
    return prompt, steps + ">" + VALUES[x], VALUES[x]


def problems(table: np.ndarray, n: int, seed: int) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """n problems -> (full rows [n, SEQ_LEN] uint8, prompt lengths [n] (incl. <bos>), answers)."""
    rng = np.random.default_rng(seed)
    rows = np.full((n, SEQ_LEN), PAD, np.uint8)
    plen = np.zeros(n, np.int64)
    answers = []
    for i in range(n):
        prompt, completion, answer = problem(table, rng)
        ids = [BOS] + encode(prompt + completion) + [EOS]
        rows[i, : len(ids)] = ids
        plen[i] = 1 + len(prompt)
        answers.append(answer)
    return rows, plen, answers


def warmup(table: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Pretraining corpus: n worked problems of 1 to 6 operators, in the fine-tuning format.

    The base model learns the format and how to follow a chain from it, so fine-tuning starts
    from a model that already works chains out and only lacks facts: no seed-dependent moment at
    which the format "clicks" (which made exact match after fine-tuning swing with the seed)."""
    rng = np.random.default_rng(seed)
    rows = np.full((n, SEQ_LEN), PAD, np.uint8)
    for i in range(n):
        prompt, completion, _ = problem(table, rng, k_min=1)
        ids = [BOS] + encode(prompt + completion) + [EOS]
        rows[i, : len(ids)] = ids
    return rows
