"""The hidden preference rule, the raters, and the generator of prompts, responses and pairs. Never visible.

A sequence is `prompt | response $` over the letters a-h, right-padded to SEQ_LEN:
token 0 pad, 1 '|', 2 '$', 3.. the letters. The prompt has 3 letters p0 p1 p2, the
response 8-16 letters. The rule scores a response to its prompt with interacting features:

    A  the response's last letter ranks above the prompt's first letter p0 (prompt x position)
    B  the response's first letter ranks below the prompt's second letter p1 (prompt x position)
    C  the first four letters of the response are in non-decreasing order (sortedness)
    D  the response length lies in a band that the prompt's third letter picks (8-11 if p2 is
       a-d, 13-16 if e-h) (length band x prompt)

    score = 2A + C + D + 2CD + (A xor B)      (integers 0..7)

A pair is two responses to one prompt; half are independent draws, half a small edit of the
first (1-2 letters changed, or the length changed), so single features decide many pairs.

Training labels come from eight raters, one per pair, drawn uniformly; rater k reports the
rule's preference flipped with probability FLIP[k]. Six raters are careless now and then (10%);
two read the interface the wrong way round and report the opposite most of the time (80%).
Overall 27.5% of the labels are wrong; a learner that ignores who rated a pair sees symmetric
noise, one that models the raters can recover most of the signal. The validation split carries
clean labels and rater NO_RATER; the hidden selection and test splits (grouped()) carry clean
labels over groups of shared responses. No split has rule ties.

Two instances of the rule. The one above (VISIBLE) labels everything the agent sees: the committed
training pairs and the validation split. The grader grades on another instance of the same family
(`drawn(seed)` from a secret seed, see `Rule`): which prompt letter and which end of the response
features A and B compare, in which direction, which prompt letter picks D's band and which band,
and which two raters are the contrary ones. The training pairs the meter serves in a graded run and
the hidden selection and test splits all follow that instance, so a rule read off the visible data
and written into train.py ranks the grader's pairs by the wrong features; what a training algorithm
learns from the pairs it is served transfers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

PAD, SEP, END, FIRST = 0, 1, 2, 3
N_LETTERS = 8
PROMPT_LEN = 3
MIN_LEN, MAX_LEN = 8, 16
SEQ_LEN = 24  # 3 + 1 + 16 + 1 = 21 used at most
FLIP = (0.1, 0.1, 0.8, 0.1, 0.1, 0.8, 0.1, 0.1)  # per rater: the chance that its label is flipped
NOISE = sum(FLIP) / len(FLIP)  # share of training labels flipped (0.275)
NO_RATER = 255  # the rater byte of clean (hidden and validation) pairs


def _rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(int(seed)))


def _responses(rng: np.random.Generator, prompts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Random responses ([N, MAX_LEN] letter indices 0..7, lengths [N]) that make each feature common."""
    n = len(prompts)
    lengths = rng.integers(MIN_LEN, MAX_LEN + 1, size=n)
    r = rng.integers(0, N_LETTERS, size=(n, MAX_LEN))
    sort = rng.random(n) < 0.45  # C true about half the time
    r[sort, :4] = np.sort(r[sort, :4], axis=1)
    return r, lengths


def _edit(rng: np.random.Generator, r: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A small edit of each response: 1-2 letters replaced, or the length changed."""
    r, lengths = r.copy(), lengths.copy()
    n = len(r)
    kind = rng.integers(0, 3, size=n)  # 0: one letter, 1: two letters, 2: length
    for k in (1, 2):
        sel = kind < k + 1 if k == 1 else kind == 1
        pos = (rng.random(n) * lengths).astype(int)
        r[sel, pos[sel]] = rng.integers(0, N_LETTERS, size=sel.sum())
    sel = kind == 2
    lengths[sel] = rng.integers(MIN_LEN, MAX_LEN + 1, size=sel.sum())
    return r, lengths


@dataclass(frozen=True)
class Rule:
    """One instance of the rule family (see the module docstring). A feature that compares a response
    letter with a prompt letter names the response's end (`first` or `last` letter), the prompt
    position (0-2) and the direction (`above`: the response letter ranks above the prompt's)."""

    a_end: str = "last"
    a_pos: int = 0
    a_above: bool = True
    b_end: str = "first"
    b_pos: int = 1
    b_above: bool = False
    d_pos: int = 2  # the prompt letter that picks D's length band
    d_low_short: bool = True  # prompt letter a-d picks 8-11 (else 13-16)
    flip: tuple = FLIP  # per rater: the chance that its label is flipped


VISIBLE = Rule()


def drawn(seed: int) -> Rule:
    """An instance of the family from `seed`: features A and B on different letters, at least two of
    A's end, position and direction unlike the visible rule's, another band rule for D and other
    contrary raters. Over 300 draws the visible rule then ranks a drawn instance's clean pairs right
    39-72% of the time (median 61%; the shipped algorithm learns its instance to about 85%)."""
    rng = _rng(seed)
    v = VISIBLE
    while True:
        a_end, b_end = (("first", "last")[int(i)] for i in rng.integers(0, 2, size=2))
        a_pos, b_pos, d_pos = (int(i) for i in rng.integers(0, PROMPT_LEN, size=3))
        a_above, b_above, d_low_short = (bool(x) for x in rng.integers(0, 2, size=3))
        flip = tuple(float(f) for f in np.asarray(FLIP)[rng.permutation(len(FLIP))])
        if (a_end, a_pos) == (b_end, b_pos) or flip == v.flip or (d_pos, d_low_short) == (v.d_pos, v.d_low_short):
            continue
        if (a_end != v.a_end) + (a_pos != v.a_pos) + (a_above != v.a_above) >= 2:
            return Rule(a_end, a_pos, a_above, b_end, b_pos, b_above, d_pos, d_low_short, flip)


def _compare(r: np.ndarray, lengths: np.ndarray, prompts: np.ndarray, end: str, pos: int, above: bool) -> np.ndarray:
    letter = r[np.arange(len(r)), lengths - 1] if end == "last" else r[:, 0]
    return letter > prompts[:, pos] if above else letter < prompts[:, pos]


def score(prompts: np.ndarray, r: np.ndarray, lengths: np.ndarray, rule: Rule = VISIBLE) -> np.ndarray:
    """The rule's integer score of each response to its prompt."""
    n = len(r)
    a = _compare(r, lengths, prompts, rule.a_end, rule.a_pos, rule.a_above)
    b = _compare(r, lengths, prompts, rule.b_end, rule.b_pos, rule.b_above)
    c = (np.diff(r[:, :4], axis=1) >= 0).all(1)
    low = prompts[:, rule.d_pos] < N_LETTERS // 2
    short, long_ = (lengths >= 8) & (lengths <= 11), (lengths >= 13) & (lengths <= 16)
    d = np.where(low == rule.d_low_short, short, long_)
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
    out[:, start : start + MAX_LEN] = body
    out[np.arange(n), start + lengths] = END
    return out


def decode(row: np.ndarray) -> str:
    chars = {PAD: "", SEP: "|", END: "$"}
    return "".join(chars.get(int(t), chr(ord("a") + int(t) - FIRST)) for t in row)


def _untied(rng: np.random.Generator, n: int, edited: bool, rule: Rule):
    """n prompts with two responses each that the rule does not tie: (prompts, ra, la, rb, lb).

    The second response is an independent draw, or (edited) a small edit of the first."""
    out, have = [], 0
    while have < n:
        m = 2 * (n - have) + 64
        prompts = rng.integers(0, N_LETTERS, size=(m, PROMPT_LEN))
        ra, la = _responses(rng, prompts)
        rb, lb = _edit(rng, ra, la) if edited else _responses(rng, prompts)
        keep = score(prompts, ra, la, rule) != score(prompts, rb, lb, rule)
        out.append(tuple(x[keep] for x in (prompts, ra, la, rb, lb)))
        have += int(keep.sum())
    return tuple(np.concatenate(parts)[:n] for parts in zip(*out))


def pairs(n: int, seed: int, raters: bool, rule: Rule = VISIBLE) -> np.ndarray:
    """n pairs without rule ties, half independent and half edits, in random order.

    Rows [a tokens | b tokens | label | rater] uint8; label 1 if a is preferred. With `raters`,
    each pair gets a rater drawn uniformly from FLIP's and that rater's (possibly flipped) label;
    otherwise the clean label and rater NO_RATER (the hidden and validation splits).
    """
    rng = _rng(seed)
    blocks = []
    for edited, m in ((False, n - n // 2), (True, n // 2)):
        prompts, ra, la, rb, lb = _untied(rng, m, edited, rule)
        label = (score(prompts, ra, la, rule) > score(prompts, rb, lb, rule)).astype(np.uint8)
        blocks.append(np.concatenate([encode(prompts, ra, la), encode(prompts, rb, lb), label[:, None]], axis=1))
    rows = np.concatenate(blocks)[rng.permutation(n)]
    if raters:
        who = rng.integers(0, len(rule.flip), size=n)
        flip = rng.random(n) < np.asarray(rule.flip)[who]
        rows[:, -1] ^= flip.astype(np.uint8)
    else:
        who = np.full(n, NO_RATER)
    return np.concatenate([rows, who[:, None].astype(np.uint8)], axis=1)


def _independent_groups(rng: np.random.Generator, g: int, k: int, rule: Rule):
    """g prompts with k independent responses each, and every untied pair within a group."""
    prompts = np.repeat(rng.integers(0, N_LETTERS, size=(g, PROMPT_LEN)), k, axis=0)
    r, lengths = _responses(rng, prompts)
    sc = score(prompts, r, lengths, rule).reshape(g, k)
    ti, tj = np.triu_indices(k, 1)
    grp, p = np.nonzero(sc[:, ti] != sc[:, tj])  # row-major: ordered by group
    return encode(prompts, r, lengths), grp * k + ti[p], grp * k + tj[p], grp


def _edit_groups(rng: np.random.Generator, g: int, k: int, rule: Rule):
    """g prompts with one response and up to k - 1 small edits of it that the rule ranks apart;
    each edit is paired with the original."""
    prompts = rng.integers(0, N_LETTERS, size=(g, PROMPT_LEN))
    r, lengths = _responses(rng, prompts)
    tries = 4 * k
    pe = np.repeat(prompts, tries, axis=0)
    re, le = _edit(rng, np.repeat(r, tries, axis=0), np.repeat(lengths, tries))
    differ = (score(pe, re, le, rule) != np.repeat(score(prompts, r, lengths, rule), tries)).reshape(g, tries)
    take = differ & (np.cumsum(differ, axis=1) <= k - 1)
    grp, t = np.nonzero(take)
    pick = grp * tries + t
    seqs = np.concatenate([encode(prompts, r, lengths), encode(pe[pick], re[pick], le[pick])])
    return seqs, grp, g + np.arange(len(pick)), grp


def grouped(n: int, seed: int, k: int = 4, rule: Rule = VISIBLE) -> dict:
    """n clean, untied pairs of the same two kinds as pairs(), built so that responses are shared.

    Half the pairs come from groups of k independent responses to one prompt (every untied pair
    of the group), half from groups of one response and up to k - 1 small edits of it that the
    rule ranks differently (each edit against the original). Each response is then scored once;
    pairs of one group share responses, so the standard error is taken over groups. Returns
    seqs [S, SEQ_LEN] uint8 and, per pair, a, b (indices into seqs), label (1 if a is preferred)
    and group.
    """
    rng = _rng(seed)
    seqs, ia, ib, grp = [], [], [], []
    n_seq = n_grp = 0
    for make, want in ((_independent_groups, n - n // 2), (_edit_groups, n // 2)):
        have = 0
        while have < want:
            g = max(16, (want - have) // 2)  # at least 2 untied pairs per group
            s, a, b, gr = make(rng, g, k, rule)
            a, b, gr = a[: want - have], b[: want - have], gr[: want - have]
            used, inverse = np.unique(np.concatenate([a, b]), return_inverse=True)  # score only what is paired
            seqs.append(s[used])
            ia.append(inverse[: len(a)] + n_seq)
            ib.append(inverse[len(a) :] + n_seq)
            grp.append(gr + n_grp)
            n_seq, n_grp, have = n_seq + len(used), n_grp + g, have + len(a)
    seqs = np.concatenate(seqs)
    a, b = np.concatenate(ia), np.concatenate(ib)
    sc = rule_scores(seqs, rule)
    return {"seqs": seqs, "a": a, "b": b, "label": (sc[a] > sc[b]).astype(np.uint8), "group": np.concatenate(grp)}


def unlabelled(n: int, seed: int) -> np.ndarray:
    """n single sequences (prompt | response $) for the base LM's pretraining, no labels: [N, SEQ_LEN]."""
    rng = _rng(seed)
    prompts = rng.integers(0, N_LETTERS, size=(n, PROMPT_LEN))
    r, lengths = _responses(rng, prompts)
    return encode(prompts, r, lengths)


def rule_scores(tokens: np.ndarray, rule: Rule = VISIBLE) -> np.ndarray:
    """The rule's score of encoded sequences [N, SEQ_LEN] (for tests and the perfect reward)."""
    t = tokens.astype(np.int64)
    prompts = t[:, :PROMPT_LEN] - FIRST
    body = t[:, PROMPT_LEN + 1 : PROMPT_LEN + 1 + MAX_LEN]
    lengths = np.argmax(t[:, PROMPT_LEN + 1 :] == END, axis=1)
    r = np.where(body >= FIRST, body - FIRST, 0)
    return score(prompts, r, lengths, rule)
