"""The hidden graph source: typed graphs under valence rules, with an exact likelihood.

A graph has N_NODES nodes, each of one of 4 types with a valence (4, 3, 2, 1), and a bond
order in {0: none, 1: single, 2: double} on every pair. Sampling: node types i.i.d. from
TYPE_P; then the pairs in row-major upper-triangle order, each bond drawn from weights that
depend on the two types, restricted to orders both nodes still have valence for. Every step
is a categorical draw, so log p(graph) is the sum of their log-probabilities: exact.

Encoding (shared with the repo): int array [N_NODES + N_PAIRS], node types then the pairs
(0,1), (0,2), ..., (N-2, N-1).

A source is one instance (`Source`) of a family: the valences and the encoding are the family's,
the bond weights are the instance's. The agent is given graphs of VISIBLE; graded runs are served,
and tested on, graphs of an instance drawn from a secret seed (`drawn`), whose bond weights are
others but whose node-type and bond-order marginals are the visible ones (within 0.01), so that
the repo's marginal noise, which hard-codes them, stays the data's marginals.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_NODES = 8
N_PAIRS = N_NODES * (N_NODES - 1) // 2
N_TYPES, N_BONDS = 4, 3
VALENCE = np.array([4, 3, 2, 1])
TYPE_P = np.array([0.40, 0.25, 0.20, 0.15])
# BOND_W[a, b] = unnormalised weights of bond orders (none, single, double) between types a and b
BOND_W = np.array(
    [
        [[1.0, 1.6, 0.9], [1.0, 1.4, 0.5], [1.0, 0.9, 1.2], [1.0, 1.1, 0.0]],
        [[1.0, 1.4, 0.5], [1.0, 0.4, 0.2], [1.0, 1.3, 0.6], [1.0, 0.5, 0.0]],
        [[1.0, 0.9, 1.2], [1.0, 1.3, 0.6], [1.0, 0.2, 0.1], [1.0, 0.3, 0.0]],
        [[1.0, 1.1, 0.0], [1.0, 0.5, 0.0], [1.0, 0.3, 0.0], [1.0, 0.05, 0.0]],
    ]
)
PAIRS = [(i, j) for i in range(N_NODES) for j in range(i + 1, N_NODES)]


@dataclass(frozen=True, eq=False)
class Source:
    """One instance of the family: node-type probabilities [N_TYPES] and bond weights
    [N_TYPES, N_TYPES, N_BONDS] (symmetric in the two types; the weight of no bond is 1)."""

    type_p: np.ndarray
    bond_w: np.ndarray

    def same(self, other: Source) -> bool:
        return np.array_equal(self.type_p, other.type_p) and np.array_equal(self.bond_w, other.bond_w)


VISIBLE = Source(TYPE_P, BOND_W)
MARGIN = 0.01  # a drawn instance's bond-order marginals are the visible ones within this
MIN_KL = 2.0  # ... and the visible source is at least this many nats a graph off its graphs


def _bond_probs(types: np.ndarray, rem: np.ndarray, i: int, j: int, source: Source = VISIBLE) -> np.ndarray:
    """[B, 3] probabilities of the bond order of pair (i, j) given the remaining valences."""
    w = source.bond_w[types[:, i], types[:, j]].copy()  # [B, 3]
    cap = np.minimum(rem[:, i], rem[:, j])  # [B]
    w[np.arange(3)[None, :] > cap[:, None]] = 0.0
    return w / w.sum(1, keepdims=True)


def sample(n: int, seed: int, source: Source = VISIBLE) -> np.ndarray:
    """n graphs [n, N_NODES + N_PAIRS] uint8 from the source, deterministic in seed."""
    rng = np.random.default_rng(seed)
    types = rng.choice(N_TYPES, size=(n, N_NODES), p=source.type_p)
    rem = VALENCE[types].copy()
    bonds = np.zeros((n, N_PAIRS), dtype=np.int64)
    for k, (i, j) in enumerate(PAIRS):
        p = _bond_probs(types, rem, i, j, source)
        u = rng.random(n)[:, None]
        b = (u > np.cumsum(p, 1)).sum(1).clip(0, 2)
        bonds[:, k] = b
        rem[:, i] -= b
        rem[:, j] -= b
    return np.concatenate([types, bonds], 1).astype(np.uint8)


def log_prob(graphs: np.ndarray, source: Source = VISIBLE) -> np.ndarray:
    """Exact log p(graph) in nats, float64 [n]; -inf for a graph the source cannot make."""
    g = graphs.astype(np.int64)
    types, bonds = g[:, :N_NODES], g[:, N_NODES:]
    with np.errstate(divide="ignore"):
        lp = np.log(source.type_p[types]).sum(1)
        rem = VALENCE[types].copy()
        for k, (i, j) in enumerate(PAIRS):
            p = _bond_probs(types, rem, i, j, source)
            lp += np.log(p[np.arange(len(g)), bonds[:, k]])
            rem[:, i] -= bonds[:, k]
            rem[:, j] -= bonds[:, k]
    return lp


def marginals(n: int = 200_000, seed: int = 12345, source: Source = VISIBLE) -> tuple[np.ndarray, np.ndarray]:
    """Empirical node-type and bond-order marginals (what the repo's marginal noise uses)."""
    g = sample(n, seed, source)
    nodes = np.bincount(g[:, :N_NODES].ravel(), minlength=N_TYPES) / (n * N_NODES)
    edges = np.bincount(g[:, N_NODES:].ravel(), minlength=N_BONDS) / (n * N_PAIRS)
    return nodes, edges


def kl(source: Source, other: Source, n: int = 4_000, seed: int = 1) -> float:
    """E over graphs of `source` of log p_source - log p_other, nats a graph (inf: other cannot make some)."""
    g = sample(n, seed, source)
    with np.errstate(invalid="ignore"):
        return float((log_prob(g, source) - log_prob(g, other)).mean())


def drawn(seed: int, max_draws: int = 20_000) -> Source:
    """An instance of the family drawn from `seed`: the visible node-type probabilities and new bond
    weights (a single bond in [0.05, 2], a double one in [0, 1.5] where both types can hold one),
    redrawn until the bond-order marginals are the visible ones within MARGIN and the visible
    source is at least MIN_KL nats a graph off its graphs."""
    rng = np.random.default_rng(seed)
    _, target = marginals(4_000, 7)
    for _ in range(max_draws):
        w = np.ones((N_TYPES, N_TYPES, N_BONDS))
        for a in range(N_TYPES):
            for b in range(a, N_TYPES):
                single = rng.uniform(0.05, 2.0)
                double = rng.uniform(0.0, 1.5) if min(VALENCE[a], VALENCE[b]) >= 2 else 0.0
                w[a, b, 1:] = w[b, a, 1:] = (single, double)
        cand = Source(TYPE_P, w)
        if np.abs(marginals(4_000, 7, cand)[1] - target).max() <= MARGIN and kl(cand, VISIBLE, 1_000) >= MIN_KL:
            return cand
    raise RuntimeError(f"no instance of the family within {max_draws} draws from seed {seed}")
