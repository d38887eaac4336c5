"""The RL environment: metered sampling and reward. Protected.

One RL run may draw at most `budget_samples` trajectories (config.py) through `Environment`:
`rollout` draws prompts (digits, uniformly, unless you give them), samples whole denoising chains
from the current model for them and scores their final images with the reward for their prompt;
`score` scores images you made yourself (e.g. a differentiable sampler of your own) for prompts
you give and counts them the same. Both raise `BudgetExhausted` past the budget.
At `ci` and `smoke` this meter, not the wall clock, is the budget. The scorer and the count
live in `Judge`; in a graded run the grader's meter, outside the training sandbox, runs it and
the scorer's weights are not in the training copy.
"""
import os
from dataclasses import dataclass

import torch

from config import N_PROMPTS, get_scale
from model import sample_chain
from reward import check_prompts, load_scorer, reward


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more samples than its scale's budget."""


@dataclass
class Rollout:
    prompts: torch.Tensor    # [n] the digit each trajectory was sampled for
    chain: torch.Tensor      # [N_STEPS + 1, n, 64]: x_T first, x_0 (the sample) last
    rewards: torch.Tensor    # [n] in [0, 1]


class Judge:
    """The scorer and the sample meter. In a graded run it lives in the grader's meter, a process
    outside the training sandbox (the scorer's weights are not in the training copy)."""

    def __init__(self, scale: str):
        self.budget = get_scale(scale).budget_samples
        self.used = 0
        self._scorer = load_scorer()

    @property
    def remaining(self) -> int:
        return self.budget - self.used

    def _charge(self, n: int) -> None:
        if self.used + n > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} samples is spent ({self.used} used, {n} asked)")
        self.used += n

    def rewards(self, x: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        """Rewards [n] of images [n, 64] for prompts [n] (no gradient); counts n."""
        prompts = check_prompts(prompts, x.shape[0])
        self._charge(x.shape[0])
        with torch.no_grad():
            return reward(self._scorer, x.float(), prompts)

    def rewards_and_grads(self, x: torch.Tensor, prompts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(rewards [n], d reward_i / d x_i [n, 64]) of images [n, 64] for prompts [n]; counts n. The
        reward of a sample depends on that sample alone, so these gradients are its whole Jacobian."""
        prompts = check_prompts(prompts, x.shape[0])
        self._charge(x.shape[0])
        with torch.enable_grad():
            x = x.detach().float().requires_grad_(True)
            r = reward(self._scorer, x, prompts)
            (g,) = torch.autograd.grad(r.sum(), x)
        return r.detach(), g


class _Reward(torch.autograd.Function):
    """The reward as a differentiable function of x, whichever process the judge is in."""

    @staticmethod
    def forward(ctx, x, prompts, judge):
        r, g = judge.rewards_and_grads(x.detach().cpu(), prompts.cpu())
        ctx.save_for_backward(g.to(x.device, x.dtype))
        return r.to(x.device)

    @staticmethod
    def backward(ctx, grad_r):
        (g,) = ctx.saved_tensors
        return grad_r[:, None].to(g.dtype) * g, None, None


class Environment:
    def __init__(self, scale: str, device: str = "cpu"):
        self.device = torch.device(device)
        self._judge = Judge(scale)
        self.budget = self._judge.budget

    @property
    def used(self) -> int:
        return self._judge.used

    @property
    def remaining(self) -> int:
        return self._judge.remaining

    def rollout(self, model: torch.nn.Module, n: int, generator: torch.Generator,
                prompts: torch.Tensor | None = None) -> Rollout:
        """n trajectories from `model` (no gradient) and their rewards; counts n. The prompts are
        drawn uniformly from the digits with `generator` unless given ([n] digits)."""
        if n > self.remaining:
            raise BudgetExhausted(f"budget of {self.budget} samples is spent ({self.used} used, {n} asked)")
        if prompts is None:
            prompts = torch.randint(0, N_PROMPTS, (n,), generator=generator)
        prompts = check_prompts(torch.as_tensor(prompts).cpu(), n)
        was_training = model.training
        model.eval()
        chain = sample_chain(model, prompts, generator, self.device)
        model.train(was_training)
        r = self._judge.rewards(chain[-1].detach().cpu(), prompts).to(self.device)
        return Rollout(prompts=prompts.to(self.device), chain=chain, rewards=r)

    def score(self, x: torch.Tensor, prompts: torch.Tensor) -> torch.Tensor:
        """Rewards of images [n, 64] you sampled yourself for prompts [n] (differentiable in x); counts n."""
        prompts = check_prompts(torch.as_tensor(prompts).cpu(), x.shape[0])
        if x.requires_grad:
            return _Reward.apply(x, prompts, self._judge)
        return self._judge.rewards(x.detach().cpu(), prompts).to(x.device)


if os.environ.get("AI4AI_METER"):
    # A graded run: the judge (scorer and meter) is served by the grader's meter.
    from ai4ai_meter import remote
    Judge = remote(Judge)
