"""Hidden grader of the `agentic_rl` task: solve rate on held-out puzzles within the step limit.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model). metric.best is the number 1 (every level is solvable).

The levels of the hidden splits come from the repo's own (visible) generator with secret
128-bit seeds; the policy acts by sampling from softmax(logits), with the sampling noise fixed
per (level, step) by a second secret-derived seed, so a checkpoint's score is deterministic.
The all-zero model has uniform logits: its score is the uniformly random policy's solve rate.
The environment code is the pristine repo's: it is found next to the module that defined the
model (the evaluator builds the model from the pristine copy).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import sys
from pathlib import Path

import numpy as np
import torch
import yaml

from ai4ai.core.hidden import shrunk

HERE = Path(__file__).resolve().parent
FROZEN_REPO = HERE.parents[1] / "repos_frozen" / "agentic_rl"
SPLITS = {"selection": 2_000, "test": 12_000, "validation": 2_000}  # levels
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py): evaluation in seconds
    SPLITS = {"selection": 128, "test": 256, "validation": 128}
VALIDATION_SEED = 22  # public: the repo's config.VALIDATION_SEED (the proxy's levels)

_ENV: dict = {}
_LEVELS: dict = {}


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def split(name: str, cfg=None) -> dict:
    """A split's recipe: levels are generated at evaluation, for the model's scale."""
    seed = VALIDATION_SEED if name == "validation" else int(_secrets()[name])
    return {"name": name, "seed": seed, "levels": SPLITS[name]}


def _repo_env(model: torch.nn.Module):
    """The env module of the repo that defined the model's class (the pristine copy), else the frozen repo's."""
    repo = Path(inspect.getfile(type(model))).resolve().parent
    if not (repo / "env.py").is_file():
        repo = FROZEN_REPO
    if repo in _ENV:
        return _ENV[repo]
    saved = {
        k: sys.modules.pop(k)
        for k in ("config",)
        if k in sys.modules and Path(getattr(sys.modules[k], "__file__", "") or "").resolve().parent != repo
    }
    sys.path.insert(0, str(repo))
    try:
        spec = importlib.util.spec_from_file_location("ai4ai_agentic_rl_env", repo / "env.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    finally:
        sys.path.remove(str(repo))
        for k, v in saved.items():
            own = sys.modules.pop(k, None)
            sys.modules[k] = v
            del own
    _ENV[repo] = mod
    return mod


def solved(model: torch.nn.Module, split: dict, cfg=None) -> np.ndarray:
    """Per-level bool: solved within the scale's step limit, actions sampled with fixed noise."""
    env = _repo_env(model)
    scale = env.get_scale(model.scale)
    key = (split["name"], split["seed"], split["levels"], scale)
    if key not in _LEVELS:
        _LEVELS[key] = env.generate_levels(split["levels"], split["seed"], scale)
    return env.solved_mask(model, _LEVELS[key], scale.max_steps, [split["seed"], 1])


def evaluate(model: torch.nn.Module, split: dict, cfg=None) -> float:
    """Solve rate in [0, 1] (raw metric, higher is better)."""
    return float(solved(model, split, cfg).mean())


def evaluate_with_noise(model: torch.nn.Module, split: dict, cfg=None) -> tuple[float, float]:
    """(solve rate, standard error of the per-level shortfall from solving every level)."""
    s = solved(model, split, cfg).astype(np.float64)
    return float(s.mean()), float((1.0 - s).std(ddof=1) / math.sqrt(len(s)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero, so the logits are uniform (random policy)."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model
