"""The puzzle: Sokoban-style levels on a small grid, stepped as a batch. Protected.

A level is a (size+2) x (size+2) grid with a wall border, some interior walls, `n_boxes`
boxes and as many targets, and the player. Actions 0..3 move the player up, down, left,
right; walking into a box pushes it one cell if the cell beyond is free (no wall, no box).
A level is solved when every box is on a target. Every level is made by scrambling a solved
level with legal reverse moves (pulls), so every level is solvable.

`TrainingEnv` meters what training takes: each transition of each unfinished environment
counts one step against the scale's `budget_env_steps`; asking for more raises
`BudgetExhausted`; a sampled level prepays its episode (see `TrainingEnv`). In a graded run the levels come only
from the grader's meter: `levels.py` (the generator) is not in the training copy, and
`TrainingEnv` with the `VecEnv`s it returns lives in the meter's process, outside the training
sandbox, with this same API. Evaluation uses `solved_mask` on fixed levels.
"""
from __future__ import annotations

import os
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


try:
    from levels import generate as _generate       # the generator; not in a graded run's training copy
except ImportError:
    _generate = None


def generate_levels(n: int, seed, scale: Scale | str) -> Levels:
    """`n` solvable, unsolved levels, a deterministic function of (n, seed, scale) (levels.py)."""
    if _generate is None:
        raise ImportError("the level generator (levels.py) is not in this copy of the repo: in a graded run "
                          "the training levels come from the meter, through TrainingEnv.sample_levels")
    s = get_scale(scale) if isinstance(scale, str) else scale
    return Levels(s.size, *_generate(n, seed, s))


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
        # steps prepaid when the level was sampled (TrainingEnv.sample_levels), spent first
        self.credit = meter._claim(self.state) if meter is not None else np.zeros(len(levels), dtype=np.int64)
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
            paid = active & (self.credit > 0)
            self.meter.charge(int((active & ~paid).sum()))
            self.credit[paid] -= 1
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
        if self.meter is not None and (self.done & (self.credit > 0)).any():
            ended = self.done & (self.credit > 0)       # an episode that ended early: its unused prepaid steps back
            self.meter.served -= int(self.credit[ended].sum())
            self.credit[ended] = 0
        return observe(st), solved_now, self.done.copy()


def _level_key(levels: Levels, i: int) -> bytes:
    return (np.packbits(levels.walls[i]).tobytes() + np.packbits(levels.targets[i]).tobytes()
            + np.packbits(levels.boxes[i]).tobytes() + int(levels.player[i]).to_bytes(8, "little"))


class TrainingEnv:
    """The metered source of training episodes for one run.

    levels = env.sample_levels(256)      # fresh training levels
    batch = env.reset(levels)            # a VecEnv whose steps count against the budget

    A sampled level prepays its whole episode (`max_steps`); when it is played, its steps use
    the prepaid ones first and the episode's unused steps come back when it ends. A run that
    plays every level it samples pays exactly the steps it takes; a level sampled and never
    played costs a full episode, so levels cannot be drawn for free and solved elsewhere.
    """

    def __init__(self, scale: str, seed: int):
        self.scale = get_scale(scale)
        self.budget = self.scale.budget_env_steps
        self.served = 0
        self._rng = np.random.default_rng([TRAIN_SEED, seed])
        self._prepaid: dict[bytes, list[int]] = {}     # level -> prepaid steps of each sampled copy

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def charge(self, steps: int) -> None:
        if self.served + steps > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} environment steps is spent")
        self.served += steps

    def sample_levels(self, n: int) -> Levels:
        """`n` fresh training levels; each prepays a full episode of the budget (see the class)."""
        self.charge(n * self.scale.max_steps)
        levels = generate_levels(n, int(self._rng.integers(2**63)), self.scale)
        for i in range(n):
            self._prepaid.setdefault(_level_key(levels, i), []).append(self.scale.max_steps)
        return levels

    def _claim(self, levels: Levels) -> np.ndarray:
        """The prepaid steps of each level of a batch being reset (each sampled copy claimed once)."""
        out = np.zeros(len(levels), dtype=np.int64)
        for i in range(len(levels)):
            left = self._prepaid.get(_level_key(levels, i))
            if left:
                out[i] = left.pop()
                if not left:
                    del self._prepaid[_level_key(levels, i)]
        return out

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


if os.environ.get("AI4AI_METER"):
    # A graded run: the levels and the steps come from the grader's meter, a process outside the
    # training sandbox, which runs TrainingEnv (and the VecEnvs its reset returns) there.
    from ai4ai_meter import remote
    TrainingEnv = remote(TrainingEnv)
