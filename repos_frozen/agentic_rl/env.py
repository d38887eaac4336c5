"""The puzzle: Sokoban-style levels on a small grid, stepped as a batch. Protected.

A level is a (size+2) x (size+2) grid with a wall border, some interior walls, `n_boxes`
boxes and as many targets, and the player. Actions 0..3 move the player up, down, left,
right; walking into a box pushes it one cell if the cell beyond is free (no wall, no box).
A level is solved when every box is on a target. Every level is made by scrambling a solved
level with legal reverse moves (pulls), so every level is solvable.

`TrainingEnv` meters what training takes: each transition of each unfinished environment
counts one step against the scale's `budget_env_steps`; asking for more raises
`BudgetExhausted`. Generating levels is free. Evaluation uses `solved_mask` on fixed levels.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from config import N_CHANNELS, TRAIN_SEED, Scale, get_scale

# flat-index offsets of up, down, left, right on a grid of width w
def _offsets(w: int) -> np.ndarray:
    return np.array([-w, w, -1, 1], dtype=np.int64)


@dataclass
class Levels:
    """A batch of levels as flat grids of width w = size + 2."""
    size: int
    walls: np.ndarray       # [N, w*w] bool
    targets: np.ndarray     # [N, w*w] bool
    boxes: np.ndarray       # [N, w*w] bool
    player: np.ndarray      # [N] int64 flat index

    def __len__(self) -> int:
        return len(self.player)

    @property
    def width(self) -> int:
        return self.size + 2

    def take(self, idx) -> "Levels":
        idx = np.asarray(idx)
        return Levels(self.size, self.walls[idx].copy(), self.targets[idx].copy(),
                      self.boxes[idx].copy(), self.player[idx].copy())

    def repeat(self, g: int) -> "Levels":
        """Each level `g` times in a row (level 0, level 0, ..., level 1, ...)."""
        return self.take(np.repeat(np.arange(len(self)), g))

    @staticmethod
    def concat(parts: list["Levels"]) -> "Levels":
        return Levels(parts[0].size, *(np.concatenate([getattr(p, f) for p in parts])
                                       for f in ("walls", "targets", "boxes", "player")))

    def render(self, i: int) -> str:
        w, out = self.width, []
        for y in range(w):
            row = ""
            for x in range(w):
                k = y * w + x
                if self.walls[i, k]:
                    row += "#"
                elif k == self.player[i]:
                    row += "+" if self.targets[i, k] else "@"
                elif self.boxes[i, k]:
                    row += "*" if self.targets[i, k] else "$"
                else:
                    row += "." if self.targets[i, k] else " "
            out.append(row)
        return "\n".join(out)


def generate_levels(n: int, seed, scale: Scale | str) -> Levels:
    """`n` solvable, unsolved levels, a deterministic function of (n, seed, scale)."""
    s = get_scale(scale) if isinstance(scale, str) else scale
    rng = np.random.default_rng(seed)
    w, k = s.size + 2, s.n_boxes
    off = _offsets(w)
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
        parts.append(Levels(s.size, walls[idx], targets[idx], boxes[idx], player[idx]))
        have += len(idx)
    return Levels.concat(parts)


def _box_distance(boxes: np.ndarray, targets: np.ndarray, w: int) -> np.ndarray:
    """Sum over boxes of the Manhattan distance to the nearest target, per level [N]."""
    k = int(targets[0].sum())
    bpos = np.argsort(~boxes, axis=1, kind="stable")[:, :k]
    tpos = np.argsort(~targets, axis=1, kind="stable")[:, :k]
    by, bx = np.divmod(bpos, w)
    ty, tx = np.divmod(tpos, w)
    d = np.abs(by[:, :, None] - ty[:, None, :]) + np.abs(bx[:, :, None] - tx[:, None, :])
    return d.min(2).sum(1)


def observe(levels: Levels) -> torch.Tensor:
    """Observation planes [N, 4, size, size] float32: wall, target, box, player (interior only)."""
    n, w = len(levels), levels.width
    player = np.zeros((n, w * w), dtype=bool)
    player[np.arange(n), levels.player] = True
    planes = np.stack([levels.walls, levels.targets, levels.boxes, player], 1).reshape(n, N_CHANNELS, w, w)
    return torch.from_numpy(planes[:, :, 1:-1, 1:-1].astype(np.float32))


class BudgetExhausted(RuntimeError):
    """Raised when a training run asks for more environment steps than its scale's budget."""


class VecEnv:
    """A batch of episodes stepped together. Finished episodes ignore actions and cost nothing."""

    def __init__(self, levels: Levels, max_steps: int, meter: "TrainingEnv | None" = None):
        self.state = levels.take(np.arange(len(levels)))
        self.max_steps = max_steps
        self.meter = meter
        self.t = np.zeros(len(levels), dtype=np.int64)
        self.done = np.zeros(len(levels), dtype=bool)
        self.solved = np.zeros(len(levels), dtype=bool)
        self._off = _offsets(levels.width)

    def __len__(self) -> int:
        return len(self.t)

    def observe(self) -> torch.Tensor:
        return observe(self.state)

    def step(self, actions) -> tuple[torch.Tensor, np.ndarray, np.ndarray]:
        """Apply actions [N] (ints 0..3) -> (observation, solved_now [N] bool, done [N] bool).

        solved_now marks the episodes that reached the solved state on this step; an episode
        is done once solved or after `max_steps` steps.
        """
        a = np.asarray(actions.cpu() if isinstance(actions, torch.Tensor) else actions).astype(np.int64)
        if a.shape != (len(self),) or ((a < 0) | (a > 3)).any():
            raise ValueError(f"actions must be {len(self)} integers in 0..3")
        active = ~self.done
        if self.meter is not None:
            self.meter.charge(int(active.sum()))
        st, rows = self.state, np.arange(len(self))
        ww = st.walls.shape[1]
        q = st.player + self._off[a]
        r = np.clip(q + self._off[a], 0, ww - 1)
        box_q = st.boxes[rows, q]
        blocked = st.walls[rows, r] | st.boxes[rows, r]
        move = active & ~st.walls[rows, q] & (~box_q | ~blocked)
        push = move & box_q
        st.boxes[rows[push], q[push]] = False
        st.boxes[rows[push], r[push]] = True
        st.player = np.where(move, q, st.player)
        self.t += active
        solved_now = active & ~(st.boxes & ~st.targets).any(1)
        self.solved |= solved_now
        self.done |= solved_now | (self.t >= self.max_steps)
        return observe(st), solved_now, self.done.copy()


class TrainingEnv:
    """The metered source of training episodes for one run.

    levels = env.sample_levels(256)      # fresh training levels (free)
    batch = env.reset(levels)            # a VecEnv whose steps count against the budget
    """

    def __init__(self, scale: str, seed: int):
        self.scale = get_scale(scale)
        self.budget = self.scale.budget_env_steps
        self.served = 0
        self._rng = np.random.default_rng([TRAIN_SEED, seed])

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def charge(self, steps: int) -> None:
        if self.served + steps > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} environment steps is spent")
        self.served += steps

    def sample_levels(self, n: int) -> Levels:
        return generate_levels(n, int(self._rng.integers(2**63)), self.scale)

    def reset(self, levels: Levels) -> VecEnv:
        return VecEnv(levels, self.scale.max_steps, meter=self)


@torch.no_grad()
def solved_mask(policy: torch.nn.Module, levels: Levels, max_steps: int, seed, chunk: int = 4096) -> np.ndarray:
    """Which levels the policy solves within `max_steps`, sampling actions from softmax(logits).

    The sampling noise is fixed: level i at step t uses uniform u[i, t] drawn from `seed`, so the
    result is a deterministic function of (weights, levels, seed). An episode whose logits are
    not all finite counts as failed.
    """
    n = len(levels)
    u = np.random.default_rng(seed).random((n, max_steps))
    device = next(policy.parameters()).device
    out = np.zeros(n, dtype=bool)
    for lo in range(0, n, chunk):
        idx = np.arange(lo, min(n, lo + chunk))
        env = VecEnv(levels.take(idx), max_steps)
        broken = np.zeros(len(idx), dtype=bool)
        obs = env.observe()
        for t in range(max_steps):
            logits = policy(obs.to(device)).double().cpu()
            finite = torch.isfinite(logits).all(1).numpy()
            broken |= ~finite & ~env.done
            cdf = torch.softmax(torch.nan_to_num(logits), 1).cumsum(1).numpy()
            a = np.minimum((u[idx, t][:, None] > cdf).sum(1), 3)
            env.done |= broken
            obs, _, done = env.step(a)
            if done.all():
                break
        out[idx] = env.solved & ~broken
    return out
