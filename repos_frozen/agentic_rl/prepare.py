"""Prepare step: behaviour cloning on optimal solutions, the warm start of training. Protected.

    python prepare.py --scale smoke        # writes artifacts/bc_smoke.safetensors (+ SHA256SUMS)

Levels come from the public PREPARE_SEED stream; each is solved optimally by breadth-first
search over (player, boxes) states; the policy imitates those moves (cross-entropy, Adam).
Deterministic on one thread: the committed ci and smoke artifacts are what it writes.
`load_prepared(model, scale)` loads an artifact after checking its sha256.
"""
import argparse
import hashlib
from collections import deque
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from config import PREPARE_SEED, get_scale
from env import Levels, VecEnv, _offsets, generate_levels
from model import build_model

REPO = Path(__file__).resolve().parent
ARTIFACTS = REPO / "artifacts"


def solve(levels: Levels, i: int) -> list[int]:
    """Shortest action sequence that solves level i (breadth-first search)."""
    w, off = levels.width, _offsets(levels.width)
    walls, targets = levels.walls[i], frozenset(np.flatnonzero(levels.targets[i]).tolist())
    start = (int(levels.player[i]), frozenset(np.flatnonzero(levels.boxes[i]).tolist()))
    parent = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        p, boxes = state
        if boxes == targets:
            path = []
            while parent[state] is not None:
                state, a = parent[state]
                path.append(a)
            return path[::-1]
        for a in range(4):
            q = p + int(off[a])
            if walls[q]:
                continue
            nb = boxes
            if q in boxes:
                r = q + int(off[a])
                if walls[r] or r in boxes:
                    continue
                nb = (boxes - {q}) | {r}
            nxt = (q, nb)
            if nxt not in parent:
                parent[nxt] = (state, a)
                queue.append(nxt)
    raise RuntimeError(f"level {i} has no solution (w={w})")


def demonstrations(levels: Levels, max_steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(observations, optimal actions) along the optimal solution of every level."""
    plans = [solve(levels, i) for i in range(len(levels))]
    horizon = max(len(p) for p in plans)
    acts = np.zeros((len(levels), horizon), dtype=np.int64)
    for i, p in enumerate(plans):
        acts[i, :len(p)] = p
    env = VecEnv(levels, max(max_steps, horizon))
    obs, act = [], []
    o = env.observe()
    for t in range(horizon):
        live = torch.from_numpy(~env.done)
        obs.append(o[live])
        act.append(torch.from_numpy(acts[~env.done, t]))
        o, _, _ = env.step(acts[:, t])
    assert env.solved.all()
    return torch.cat(obs), torch.cat(act)


def behaviour_clone(scale: str) -> dict:
    s = get_scale(scale)
    torch.manual_seed(0)
    levels = generate_levels(s.bc_levels, PREPARE_SEED, s)
    obs, act = demonstrations(levels, s.max_steps)
    model = build_model(scale)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(0)
    for epoch in range(s.bc_epochs):
        perm = torch.randperm(len(act), generator=g)
        for lo in range(0, len(act), 128):
            idx = perm[lo:lo + 128]
            loss = torch.nn.functional.cross_entropy(model(obs[idx]), act[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    print(f"{scale}: {len(levels)} levels, {len(act)} demonstrated moves, final batch loss {loss.item():.3f}")
    return {k: v.detach().float().contiguous() for k, v in model.named_parameters()}


def _sums() -> dict:
    f = ARTIFACTS / "SHA256SUMS"
    return dict(reversed(line.split()) for line in f.read_text().splitlines()) if f.exists() else {}


def write(scale: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"bc_{scale}.safetensors"
    save_file(behaviour_clone(scale), str(path))
    sums = _sums()
    sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    (ARTIFACTS / "SHA256SUMS").write_text("".join(f"{v}  {k}\n" for k, v in sorted(sums.items())))
    return path


def load_prepared(model: torch.nn.Module, scale: str) -> torch.nn.Module:
    """Load the behaviour-cloned warm start of `scale` into `model`, after checking its sha256."""
    path = ARTIFACTS / f"bc_{scale}.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python prepare.py --scale {scale}`")
    if hashlib.sha256(path.read_bytes()).hexdigest() != _sums().get(path.name):
        raise RuntimeError(f"{path}: checksum does not match artifacts/SHA256SUMS")
    model.load_state_dict(load_file(str(path)), strict=True)
    return model


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    print(f"wrote {write(args.scale)}")
