"""The level generator of the puzzle (env.py). Protected.

In a graded run this file is not in the training copy: the meter, outside the training sandbox,
generates the training levels (from the run's seed) and serves them through `env.TrainingEnv`.
Evaluation and prepare.py use it directly on their fixed seeds.
"""
from __future__ import annotations

import numpy as np

from config import Scale


def generate(n: int, seed, s: Scale) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """`n` solvable, unsolved levels of scale `s` as (walls, targets, boxes, player) flat arrays
    (env.Levels' fields), a deterministic function of (n, seed, s)."""
    rng = np.random.default_rng(seed)
    w, k = s.size + 2, s.n_boxes
    off = np.array([-w, w, -1, 1], dtype=np.int64)         # up, down, left, right
    border = np.ones((w, w), dtype=bool)
    border[1:-1, 1:-1] = False
    border = border.reshape(-1)
    parts, have = [], 0
    while have < n:
        m = max(256, int((n - have) * 4))
        walls = border[None].repeat(m, 0) | (rng.random((m, w * w)) < s.wall_prob)
        keys = np.where(walls, np.inf, rng.random((m, w * w)))
        order = np.argsort(keys, axis=1)
        ok = np.isfinite(np.take_along_axis(keys, order[:, k:k + 1], 1))[:, 0]
        rows = np.arange(m)
        targets = np.zeros((m, w * w), dtype=bool)
        targets[rows[:, None], order[:, :k]] = True
        boxes = targets.copy()
        player = order[:, k].copy()
        for _ in range(s.scramble):                          # reverse play: move, maybe pull
            d = rng.integers(0, 4, size=m)
            want_pull = rng.random(m) < 0.8
            q, behind = player + off[d], player - off[d]
            free = ~walls[rows, q] & ~boxes[rows, q]
            pull = free & want_pull & boxes[rows, behind]
            boxes[rows[pull], behind[pull]] = False
            boxes[rows[pull], player[pull]] = True
            player = np.where(free, q, player)
        ok &= (boxes & ~targets).any(1)                      # not already solved
        ok &= _box_distance(boxes, targets, w) >= s.min_box_dist
        idx = np.flatnonzero(ok)[:n - have]
        parts.append((walls[idx], targets[idx], boxes[idx], player[idx]))
        have += len(idx)
    return tuple(np.concatenate([p[f] for p in parts]) for f in range(4))


def _box_distance(boxes: np.ndarray, targets: np.ndarray, w: int) -> np.ndarray:
    """Sum over boxes of the Manhattan distance to the nearest target, per level [N]."""
    k = int(targets[0].sum())
    bpos = np.argsort(~boxes, axis=1, kind="stable")[:, :k]
    tpos = np.argsort(~targets, axis=1, kind="stable")[:, :k]
    by, bx = np.divmod(bpos, w)
    ty, tx = np.divmod(tpos, w)
    d = np.abs(by[:, :, None] - ty[:, None, :]) + np.abs(bx[:, :, None] - tx[:, None, :])
    return d.min(2).sum(1)
