"""The RL environment: metered sampling and reward. Protected.

One RL run may draw at most `budget_samples` trajectories (config.py) through `Environment`:
`rollout` samples whole denoising chains from the current model and scores their final
images with the reward; `score` scores images you made yourself (e.g. a differentiable
sampler of your own) and counts them the same. Both raise `BudgetExhausted` past the budget.
At `ci` and `smoke` this meter, not the wall clock, is the budget.
"""
from dataclasses import dataclass

import torch

from config import get_scale
from model import sample_chain
from reward import load_scorer, reward


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more samples than its scale's budget."""


@dataclass
class Rollout:
    chain: torch.Tensor      # [N_STEPS + 1, n, 64]: x_T first, x_0 (the sample) last
    rewards: torch.Tensor    # [n] in [0, 1]


class Environment:
    def __init__(self, scale: str, device: str = "cpu"):
        self.budget = get_scale(scale).budget_samples
        self.used = 0
        self.device = torch.device(device)
        self.scorer = load_scorer().to(self.device)

    @property
    def remaining(self) -> int:
        return self.budget - self.used

    def _charge(self, n: int) -> None:
        if self.used + n > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} samples is spent ({self.used} used, {n} asked)")
        self.used += n

    def rollout(self, model: torch.nn.Module, n: int, generator: torch.Generator) -> Rollout:
        """n trajectories from `model` (no gradient) and their rewards; counts n."""
        self._charge(n)
        was_training = model.training
        model.eval()
        chain = sample_chain(model, n, generator, self.device)
        model.train(was_training)
        with torch.no_grad():
            r = reward(self.scorer, chain[-1])
        return Rollout(chain=chain, rewards=r)

    def score(self, x: torch.Tensor) -> torch.Tensor:
        """Rewards of images [n, 64] you sampled yourself (differentiable in x); counts n."""
        self._charge(x.shape[0])
        return reward(self.scorer, x)
