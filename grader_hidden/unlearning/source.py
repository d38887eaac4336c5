"""The hidden generator of the `unlearning` task: facts and general text.

Never mounted in a sandbox. The repo holds only the materialized forget set, the visible retain
subset and the validation split; the prepared model was trained on every fact (prepare_data).

Symbol layout (the same as repos_frozen/unlearning/config.py):
    0 newline, 1 space, 2..27 letters a-z, 28..33 attributes, 34..97 values, 98.. entities.
A fact is [newline, attribute, entity, value]; general text is letters and spaces.
"""
from __future__ import annotations

import numpy as np

NEWLINE, SPACE, LETTER0, N_LETTERS = 0, 1, 2, 26
ATTR0, N_ATTRS = 28, 6
VALUE0, N_VALUES = 34, 64
ENTITY0, N_ENTITIES = 98, 2000
VOCAB = ENTITY0 + N_ENTITIES
TEXT_LEN = 32

# the facts, in a secret random order, are cut into these groups (sizes in facts)
GROUPS = {"forget": 6000, "retain": 1000, "retain_validation": 250, "retain_selection": 250,
          "retain_test": 4500}
assert sum(GROUPS.values()) == N_ATTRS * N_ENTITIES


def all_facts(seed: int) -> dict[str, np.ndarray]:
    """Every fact ([N, 4] uint16: newline, attribute, entity, value), cut into GROUPS."""
    rng = np.random.default_rng(seed)
    ent = np.repeat(np.arange(N_ENTITIES), N_ATTRS)
    att = np.tile(np.arange(N_ATTRS), N_ENTITIES)
    val = rng.integers(0, N_VALUES, size=ent.shape[0])
    facts = np.stack([np.full_like(ent, NEWLINE), ATTR0 + att, ENTITY0 + ent, VALUE0 + val], 1)
    facts = facts[rng.permutation(len(facts))].astype(np.uint16)
    out, i = {}, 0
    for name, n in GROUPS.items():
        out[name] = facts[i:i + n]
        i += n
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
        out[i] = [SPACE if c == " " else LETTER0 + ord(c) - 97 for c in s[off:off + TEXT_LEN]]
    return out
