"""A synthetic text source: a sparse hidden Markov model (the `optimizer` and `pruning` tasks').

Hidden state = (mode, substate). The mode changes rarely, so predicting the next symbol
well means inferring the mode from a long stretch of context; within a mode, substates
follow a sparse transition graph and emit from a few symbols each, shared across modes.

Because the source is an HMM, the exact conditional likelihood p(x_t | x_<t) of any text is
computable with the forward algorithm (conditional_nll): the Bayes-optimal perplexity.

build_source(seed) draws one instance of a family of such sources; two instances share no
parameters (each predicts the other's text worse than a uniform guess: perplexity about 200
against 32). sample(hmm, n_seq, seed, seq_len) draws text of one; each task fixes its own
sequence length (optimizer 128, pruning 64) and secret seeds in its grader.

This file lives only in grader_hidden/: the agent and the graders' training runs see
materialized splits, never a source's parameters or seeds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

N_MODES = 4
N_SUBSTATES = 12
VOCAB = 32
SWITCH_PROB = 0.03  # per-token chance that the mode changes
SUCCESSORS = 3  # nonzero substate successors per substate
EMITTED = 3  # symbols each state can emit


@dataclass(frozen=True)
class HMM:
    """Joint-state HMM: K = N_MODES * N_SUBSTATES states over VOCAB symbols."""

    init: np.ndarray  # [K]     p(state_0)
    trans: np.ndarray  # [K, K]  p(state_t | state_{t-1})
    emit: np.ndarray  # [K, V]  p(x_t | state_t)


def build_source(seed: int) -> HMM:
    rng = np.random.default_rng(seed)
    K = N_MODES * N_SUBSTATES
    sub_init = np.full(N_SUBSTATES, 1.0 / N_SUBSTATES)
    trans = np.zeros((K, K))
    for m in range(N_MODES):
        A = np.zeros((N_SUBSTATES, N_SUBSTATES))
        for s in range(N_SUBSTATES):
            nxt = rng.choice(N_SUBSTATES, SUCCESSORS, replace=False)
            A[s, nxt] = rng.dirichlet(np.ones(SUCCESSORS))
        rows = slice(m * N_SUBSTATES, (m + 1) * N_SUBSTATES)
        trans[rows, rows] = (1 - SWITCH_PROB) * A
        for m2 in range(N_MODES):
            if m2 != m:  # on a switch the substate restarts from the new mode's initial law
                cols = slice(m2 * N_SUBSTATES, (m2 + 1) * N_SUBSTATES)
                trans[rows, cols] = SWITCH_PROB / (N_MODES - 1) * sub_init[None, :]
    emit = np.zeros((K, VOCAB))
    for k in range(K):
        syms = rng.choice(VOCAB, EMITTED, replace=False)
        emit[k, syms] = rng.dirichlet(np.full(EMITTED, 0.7))
    init = np.full(K, 1.0 / K)
    assert np.allclose(trans.sum(1), 1) and np.allclose(emit.sum(1), 1)
    return HMM(init=init, trans=trans, emit=emit)


def sample(hmm: HMM, n_seq: int, seed: int, seq_len: int) -> np.ndarray:
    """n_seq independent sequences [n_seq, seq_len] of uint8 symbols."""
    rng = np.random.default_rng(seed)
    K, V = hmm.emit.shape
    trans_cdf = np.cumsum(hmm.trans, axis=1)
    emit_cdf = np.cumsum(hmm.emit, axis=1)
    state = rng.choice(K, size=n_seq, p=hmm.init)
    out = np.empty((n_seq, seq_len), dtype=np.uint8)
    for t in range(seq_len):
        if t > 0:
            u = rng.random(n_seq)[:, None]
            state = np.minimum((u > trans_cdf[state]).sum(1), K - 1)
        u = rng.random(n_seq)[:, None]
        out[:, t] = np.minimum((u > emit_cdf[state]).sum(1), V - 1)
    return out


def conditional_nll(hmm: HMM, x: np.ndarray) -> np.ndarray:
    """Exact -log p(x_t | x_<t) for t = 1..T-1 (nats), shape [n_seq, T-1], by the forward algorithm."""
    n, T = x.shape
    alpha = hmm.init[None, :] * hmm.emit[:, x[:, 0]].T  # [n, K]
    alpha /= alpha.sum(1, keepdims=True)
    nll = np.empty((n, T - 1))
    for t in range(1, T):
        pred = alpha @ hmm.trans  # [n, K] p(state_t | x_<t)
        joint = pred * hmm.emit[:, x[:, t]].T  # [n, K] p(state_t, x_t | x_<t)
        p = joint.sum(1)  # [n]    p(x_t | x_<t)
        nll[:, t - 1] = -np.log(p)
        alpha = joint / p[:, None]
    return nll
