"""The hidden preference rule and the generator of prompts, responses and pairs. Never visible.

A sequence is `prompt | response $` over the letters a-h, right-padded to SEQ_LEN:
token 0 pad, 1 '|', 2 '$', 3.. the letters. The prompt has 3 letters p0 p1 p2, the
response 8-16 letters. The rule scores a response to its prompt with interacting features:

    A  the prompt's first letter p0 occurs in the first half of the response (keyword x position)
    B  the prompt's second letter p1 occurs an even number of times in the response (parity)
    C  the first four letters of the response are in non-decreasing order (sortedness)
    D  the response length lies in a band that the prompt's third letter picks (8-11 if p2 is
       a-d, 13-16 if e-h) (length band x prompt)

    score = 2A + C + D + 2CD + (A xor B)      (integers 0..7)

A pair is two responses to one prompt; half are independent draws, half a small edit of the
first (1-2 letters changed, or the length changed), so single features decide many pairs.
Training labels flip with probability NOISE; hidden splits carry the clean label and no ties.
"""
from __future__ import annotations

import numpy as np

PAD, SEP, END, FIRST = 0, 1, 2, 3
N_LETTERS = 8
PROMPT_LEN = 3
MIN_LEN, MAX_LEN = 8, 16
SEQ_LEN = 24            # 3 + 1 + 16 + 1 = 21 used at most
NOISE = 0.25            # share of training labels flipped


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(int(seed)))


def _responses(rng: np.random.Generator, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Random responses ([N, MAX_LEN] letter indices 0..7, lengths [N]) that make each feature common."""
    n = len(prompts)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, size=n)
    r = rng.integers(0, N_LETTERS, size=(n, MAX_LEN))
    sort = rng.random(n) < 0.45                              # C true about half the time
    r[sort, :4] = np.sort(r[sort, :4], axis=1)
    return r, lengths


def _edit(rng: np.random.Generator, r: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A small edit of each response: 1-2 letters replaced, or the length changed."""
    r, lengths = r.copy(), lengths.copy()
    n = len(r)
    kind = rng.integers(0, 3, size=n)                        # 0: one letter, 1: two letters, 2: length
    for k in (1, 2):
        sel = kind < k + 1 if k == 1 else kind == 1
        pos = (rng.random(n) * lengths).astype(int)
        r[sel, pos[sel]] = rng.integers(0, N_LETTERS, size=sel.sum())
    sel = kind == 2
    lengths[sel] = rng.integers(MIN_LEN, MAX_LEN + 1, size=sel.sum())
    return r, lengths


def score(prompts: np.ndarray, r: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The rule's integer score of each response to its prompt."""
    n = len(r)
    pos = np.arange(MAX_LEN)[None, :]
    inside = pos < lengths[:, None]
    p0, p1, p2 = prompts[:, 0:1], prompts[:, 1:2], prompts[:, 2]
    a = ((r == p0) & (pos < (lengths // 2)[:, None])).any(1)
    b = (((r == p1) & inside).sum(1) % 2) == 0
    c = (np.diff(r[:, :4], axis=1) >= 0).all(1)
    low = p2 < N_LETTERS // 2
    d = np.where(low, (lengths >= 8) & (lengths <= 11), (lengths >= 13) & (lengths <= 16))
    a, b, c, d = (x.astype(np.int64) for x in (a, b, c, d))
    assert len(a) == n
    return 2 * a + c + d + 2 * c * d + (a ^ b)


def encode(prompts: np.ndarray, r: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Token rows [N, SEQ_LEN] uint8: prompt | response $ pad..."""
    n = len(r)
    out = np.zeros((n, SEQ_LEN), dtype=np.uint8)
    out[:, :PROMPT_LEN] = prompts + FIRST
    out[:, PROMPT_LEN] = SEP
    start = PROMPT_LEN + 1
    pos = np.arange(MAX_LEN)[None, :]
    body = np.where(pos < lengths[:, None], r + FIRST, PAD)
    out[:, start:start + MAX_LEN] = body
    out[np.arange(n), start + lengths] = END
    return out


def decode(row: np.ndarray) -> str:
    chars = {PAD: "", SEP: "|", END: "$"}
    return "".join(chars.get(int(t), chr(ord("a") + int(t) - FIRST)) for t in row)


def pairs(n: int, seed: int, noise: float) -> np.ndarray:
    """n pairs without rule ties: rows [a tokens | b tokens | label] uint8, label 1 if a is preferred.

    Labels are the rule's, flipped with probability `noise` (0 for the hidden splits).
    """
    rng = _rng(seed)
    rows, have = [], 0
    while have < n:
        m = 2 * (n - have) + 64
        prompts = rng.integers(0, N_LETTERS, size=(m, PROMPT_LEN))
        ra, la = _responses(rng, prompts)
        rb, lb = _responses(rng, prompts)
        edited = rng.random(m) < 0.5
        re, le = _edit(rng, ra, la)
        rb[edited], lb[edited] = re[edited], le[edited]
        sa, sb = score(prompts, ra, la), score(prompts, rb, lb)
        keep = sa != sb
        label = (sa > sb).astype(np.uint8)
        flip = rng.random(m) < noise
        label = np.where(flip, 1 - label, label).astype(np.uint8)
        block = np.concatenate([encode(prompts, ra, la), encode(prompts, rb, lb), label[:, None]], axis=1)
        rows.append(block[keep])
        have += int(keep.sum())
    return np.concatenate(rows)[:n]


def unlabelled(n: int, seed: int) -> np.ndarray:
    """n single sequences (prompt | response $) for the base LM's pretraining, no labels: [N, SEQ_LEN]."""
    rng = _rng(seed)
    prompts = rng.integers(0, N_LETTERS, size=(n, PROMPT_LEN))
    r, lengths = _responses(rng, prompts)
    return encode(prompts, r, lengths)


def rule_scores(tokens: np.ndarray) -> np.ndarray:
    """The rule's score of encoded sequences [N, SEQ_LEN] (for tests and the perfect reward)."""
    t = tokens.astype(np.int64)
    prompts = t[:, :PROMPT_LEN] - FIRST
    body = t[:, PROMPT_LEN + 1:PROMPT_LEN + 1 + MAX_LEN]
    lengths = np.argmax(t[:, PROMPT_LEN + 1:] == END, axis=1)
    r = np.where(body >= FIRST, body - FIRST, 0)
    return score(prompts, r, lengths)
