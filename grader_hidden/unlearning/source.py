"""The hidden generator of the `unlearning` task: facts and general text.

Never mounted in a sandbox. The repo holds only the materialized forget set, the visible retain
subset and the validation split; the prepared model was trained on every fact (prepare_data).

Symbol layout (the same as repos_frozen/unlearning/config.py):
    0 newline, 1 space, 2..27 letters a-z, 28 unknown, 29..92 name symbols, 93..156 values, 157.. entities.
A fact is [newline, n1..n5, entity, value]: each fact has its own attribute name, NAME_LEN symbols
drawn from a secret seed among N_NAME_SYMBOLS**NAME_LEN (64**5 ~ 1.07e9) names, so the names of the
facts an agent is not shown (other facts of the entities it forgets included) cannot be listed.
General text is letters and spaces.
"""

from __future__ import annotations

import numpy as np

NEWLINE, SPACE, LETTER0, N_LETTERS = 0, 1, 2, 26
UNKNOWN = 28
NAME0, N_NAME_SYMBOLS, NAME_LEN = 29, 64, 5
VALUE0, N_VALUES = 93, 64
ENTITY0, N_ENTITIES = 157, 2000
FACTS_PER_ENTITY = 6
VOCAB = ENTITY0 + N_ENTITIES
FACT_LEN, VALUE_POS = NAME_LEN + 3, NAME_LEN + 2
TEXT_LEN = 32

# the facts, in a secret random order, are cut into these groups (sizes in facts)
GROUPS = {"forget": 6000, "retain": 1000, "retain_validation": 250, "retain_selection": 250, "retain_test": 4500}
assert sum(GROUPS.values()) == FACTS_PER_ENTITY * N_ENTITIES


def all_facts(seed: int) -> dict[str, np.ndarray]:
    """Every fact ([N, FACT_LEN] uint16: newline, name, entity, value), cut into GROUPS.

    Every fact's name is drawn uniformly from the N_NAME_SYMBOLS**NAME_LEN names, distinct over all facts.
    """
    rng = np.random.default_rng(seed)
    n = FACTS_PER_ENTITY * N_ENTITIES
    ent = np.repeat(np.arange(N_ENTITIES), FACTS_PER_ENTITY)
    names = rng.integers(0, N_NAME_SYMBOLS, size=(n, NAME_LEN))
    while True:  # redraw any repeated name (rare: 12,000 of 1.07e9)
        _, first = np.unique(names, axis=0, return_index=True)
        dup = np.setdiff1d(np.arange(n), first)
        if len(dup) == 0:
            break
        names[dup] = rng.integers(0, N_NAME_SYMBOLS, size=(len(dup), NAME_LEN))
    val = rng.integers(0, N_VALUES, size=n)
    facts = np.concatenate([np.full((n, 1), NEWLINE), NAME0 + names, ENTITY0 + ent[:, None], VALUE0 + val[:, None]], 1)
    facts = facts[rng.permutation(n)].astype(np.uint16)
    out, i = {}, 0
    for name, k in GROUPS.items():
        out[name] = facts[i : i + k]
        i += k
    return out


def lexicon(seed: int, n_words: int = 400, successors: int = 6):
    """Words of 2-7 letters and a sparse random bigram chain over them."""
    rng = np.random.default_rng(seed)
    words: set[str] = set()
    while len(words) < n_words:
        words.add("".join(chr(97 + c) for c in rng.integers(0, N_LETTERS, int(rng.integers(2, 8)))))
    words_l = sorted(words)
    rng.shuffle(words_l)
    nxt = rng.integers(0, n_words, size=(n_words, successors))
    p = rng.dirichlet(np.full(successors, 0.5), size=n_words)
    return words_l, nxt, p


def general_text(n: int, lex, seed: int) -> np.ndarray:
    """n sequences of TEXT_LEN symbols ([n, TEXT_LEN] uint16) of general text."""
    words, nxt, p = lex
    rng = np.random.default_rng(seed)
    cum = np.cumsum(p, 1)
    out = np.zeros((n, TEXT_LEN), dtype=np.uint16)
    for i in range(n):
        w = int(rng.integers(len(words)))
        s = words[w]
        while len(s) < TEXT_LEN + 8:
            w = int(nxt[w, min(int(np.searchsorted(cum[w], rng.random())), nxt.shape[1] - 1)])
            s += " " + words[w]
        off = int(rng.integers(0, 8))
        out[i] = [SPACE if c == " " else LETTER0 + ord(c) - 97 for c in s[off : off + TEXT_LEN]]
    return out
