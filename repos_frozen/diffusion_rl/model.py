"""The model: a prompt-conditioned MLP noise predictor (DDPM epsilon-parameterisation) and the sampling chain. Protected.

`build_model(scale)` builds the architecture from config, random init; the prepared
(pretrained) weights are loaded by the training code from artifacts/ddpm_<scale>.safetensors.
"""
import math

import torch
from torch import nn

from config import IMAGE_DIM, N_PROMPTS, N_STEPS, get_scale


class Denoiser(nn.Module):
    """eps_theta(x_t, t, c): residual MLP on the flattened 8x8 image plus learned step and prompt embeddings."""

    def __init__(self, width: int, depth: int):
        super().__init__()
        self.inp = nn.Linear(IMAGE_DIM, width)
        self.t_embed = nn.Embedding(N_STEPS, width)
        self.c_embed = nn.Embedding(N_PROMPTS, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.SiLU(),
                                                  nn.Linear(width, width)) for _ in range(depth))
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, IMAGE_DIM)

    def forward(self, x: torch.Tensor, t: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        """x: [B, 64] noisy images, t: [B] step index in 0..N_STEPS-1 (0 = least noise), c: [B] prompt
        (the digit asked for, 0..N_PROMPTS-1) -> eps [B, 64]."""
        h = self.inp(x) + self.t_embed(t) + self.c_embed(c)
        for block in self.blocks:
            h = h + block(h)
        return self.out(self.norm(h))


def build_model(scale: str) -> Denoiser:
    s = get_scale(scale)
    return Denoiser(s.width, s.depth).float()


def schedule() -> dict:
    """Linear beta schedule over N_STEPS steps (float64): betas, alphas, alpha_bar, per-step sampling std."""
    betas = torch.linspace(0.005, 0.45, N_STEPS, dtype=torch.float64)
    alphas = 1 - betas
    abar = torch.cumprod(alphas, 0)
    prev = torch.cat([torch.ones(1, dtype=torch.float64), abar[:-1]])
    var = betas * (1 - prev) / (1 - abar)          # posterior variance (tilde beta)
    var[0] = 1e-3                                  # the last step stays (slightly) stochastic
    return {"betas": betas, "alphas": alphas, "abar": abar, "std": var.sqrt()}


SCHEDULE = schedule()


def step_mean(model: nn.Module, x: torch.Tensor, k: int, c: torch.Tensor) -> torch.Tensor:
    """Mean of p_theta(x_{k-1} | x_k, c) for the denoising step at index k (N_STEPS-1 first, 0 last)
    under prompts c [B].

    The predicted clean image x0 = (x_k - sqrt(1 - abar_k) eps) / sqrt(abar_k) is clipped to
    [-1, 1] and the mean is the DDPM posterior mean given that x0 and x_k.
    """
    sch = SCHEDULE
    t = torch.full((x.shape[0],), k, dtype=torch.long, device=x.device)
    eps = model(x, t, c)
    b, a, ab = (float(sch[n][k]) for n in ("betas", "alphas", "abar"))
    ab_prev = float(sch["abar"][k - 1]) if k > 0 else 1.0
    x0 = ((x - math.sqrt(1 - ab) * eps) / math.sqrt(ab)).clamp(-1, 1)
    return (math.sqrt(ab_prev) * b / (1 - ab)) * x0 + (math.sqrt(a) * (1 - ab_prev) / (1 - ab)) * x


def step_log_prob(mean: torch.Tensor, x_prev: torch.Tensor, k: int) -> torch.Tensor:
    """log N(x_prev; mean, std_k^2 I) summed over pixels -> [B]."""
    std = float(SCHEDULE["std"][k])
    return (-((x_prev - mean) ** 2).sum(-1) / (2 * std * std)
            - IMAGE_DIM * (math.log(std) + 0.5 * math.log(2 * math.pi)))


@torch.no_grad()
def sample_chain(model: nn.Module, prompts: torch.Tensor, generator: torch.Generator, device="cpu") -> torch.Tensor:
    """Ancestral DDPM sampling of one image per prompt (prompts: [n] digits). Returns the whole chain
    [N_STEPS + 1, n, 64]: x_T first, x_0 last.

    All noise (the start x_T and every step's noise) is drawn from `generator` on the CPU, so a
    chain is a deterministic function of the weights, the prompts and the generator's seed.
    """
    n = len(prompts)
    c = prompts.to(device)
    x = torch.randn(n, IMAGE_DIM, generator=generator, dtype=torch.float32).to(device)
    chain = [x]
    for k in reversed(range(N_STEPS)):
        z = torch.randn(n, IMAGE_DIM, generator=generator, dtype=torch.float32).to(device)
        x = step_mean(model, x, k, c) + float(SCHEDULE["std"][k]) * z
        chain.append(x)
    return torch.stack(chain)


def to_image(x0: torch.Tensor) -> torch.Tensor:
    """A final sample as an image in [-1, 1] (clipped); non-finite values stay non-finite."""
    return x0.clamp(-1, 1)
