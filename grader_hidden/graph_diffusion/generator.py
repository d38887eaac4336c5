"""The hidden graph source: typed graphs under valence rules, with an exact likelihood.

A graph has N_NODES nodes, each of one of 4 types with a valence (4, 3, 2, 1), and a bond
order in {0: none, 1: single, 2: double} on every pair. Sampling: node types i.i.d. from
TYPE_P; then the pairs in row-major upper-triangle order, each bond drawn from weights that
depend on the two types, restricted to orders both nodes still have valence for. Every step
is a categorical draw, so log p(graph) is the sum of their log-probabilities: exact.

Encoding (shared with the repo): int array [N_NODES + N_PAIRS], node types then the pairs
(0,1), (0,2), ..., (N-2, N-1).
"""
from __future__ import annotations

import numpy as np

N_NODES = 8
N_PAIRS = N_NODES * (N_NODES - 1) // 2
N_TYPES, N_BONDS = 4, 3
VALENCE = np.array([4, 3, 2, 1])
TYPE_P = np.array([0.40, 0.25, 0.20, 0.15])
# BOND_W[a, b] = unnormalised weights of bond orders (none, single, double) between types a and b
BOND_W = np.array([
    [[1.0, 1.6, 0.9], [1.0, 1.4, 0.5], [1.0, 0.9, 1.2], [1.0, 1.1, 0.0]],
    [[1.0, 1.4, 0.5], [1.0, 0.4, 0.2], [1.0, 1.3, 0.6], [1.0, 0.5, 0.0]],
    [[1.0, 0.9, 1.2], [1.0, 1.3, 0.6], [1.0, 0.2, 0.1], [1.0, 0.3, 0.0]],
    [[1.0, 1.1, 0.0], [1.0, 0.5, 0.0], [1.0, 0.3, 0.0], [1.0, 0.05, 0.0]],
])
PAIRS = [(i, j) for i in range(N_NODES) for j in range(i + 1, N_NODES)]


def _bond_probs(types: np.ndarray, rem: np.ndarray, i: int, j: int) -> np.ndarray:
    """[B, 3] probabilities of the bond order of pair (i, j) given the remaining valences."""
    w = BOND_W[types[:, i], types[:, j]].copy()                     # [B, 3]
    cap = np.minimum(rem[:, i], rem[:, j])                           # [B]
    w[np.arange(3)[None, :] > cap[:, None]] = 0.0
    return w / w.sum(1, keepdims=True)


def sample(n: int, seed: int) -> np.ndarray:
    """n graphs [n, N_NODES + N_PAIRS] uint8 from the source, deterministic in seed."""
    rng = np.random.default_rng(seed)
    types = rng.choice(N_TYPES, size=(n, N_NODES), p=TYPE_P)
    rem = VALENCE[types].copy()
    bonds = np.zeros((n, N_PAIRS), dtype=np.int64)
    for k, (i, j) in enumerate(PAIRS):
        p = _bond_probs(types, rem, i, j)
        u = rng.random(n)[:, None]
        b = (u > np.cumsum(p, 1)).sum(1).clip(0, 2)
        bonds[:, k] = b
        rem[:, i] -= b
        rem[:, j] -= b
    return np.concatenate([types, bonds], 1).astype(np.uint8)


def log_prob(graphs: np.ndarray) -> np.ndarray:
    """Exact log p(graph) in nats, float64 [n]; -inf for a graph the source cannot make."""
    g = graphs.astype(np.int64)
    types, bonds = g[:, :N_NODES], g[:, N_NODES:]
    with np.errstate(divide="ignore"):
        lp = np.log(TYPE_P[types]).sum(1)
        rem = VALENCE[types].copy()
        for k, (i, j) in enumerate(PAIRS):
            p = _bond_probs(types, rem, i, j)
            lp += np.log(p[np.arange(len(g)), bonds[:, k]])
            rem[:, i] -= bonds[:, k]
            rem[:, j] -= bonds[:, k]
    return lp


def marginals(n: int = 200_000, seed: int = 12345) -> tuple[np.ndarray, np.ndarray]:
    """Empirical node-type and bond-order marginals (what the repo's marginal noise uses)."""
    g = sample(n, seed)
    nodes = np.bincount(g[:, :N_NODES].ravel(), minlength=N_TYPES) / (n * N_NODES)
    edges = np.bincount(g[:, N_NODES:].ravel(), minlength=N_BONDS) / (n * N_PAIRS)
    return nodes, edges
