"""The forward noising processes the grader accepts, and the bound it scores with. Protected.

Every variable (a node's type, a pair's bond order) is noised on its own by a mixing process

    q(x_t | x_{t-1}) = alpha_t * [x_t = x_{t-1}] + (1 - alpha_t) * m(x_t)
    q(x_t | x_0)     = abar_t  * [x_t = x_0]     + (1 - abar_t)  * m(x_t)

with a stationary distribution m and a schedule abar_t (abar_0 = 1, abar_T = 0). A checkpoint
declares its process in its metadata (`ckpt_*.json`, keys `noise` and `schedule`); the family
the grader accepts is

    noise:    uniform  (m = 1/C)  |  marginal  (m = the training data's marginals below)
    schedule: cosine   (Nichol & Dhariwal)  |  linear  (abar_t = 1 - t/T)

and a missing key means uniform / cosine. Anything else makes the checkpoint invalid.

The score is the negative ELBO in nats per graph, an upper bound on -log p_model(graph):

    KL(q(x_T|x_0) || m) + sum_{t=2..T} E_q KL(q(x_{t-1}|x_t,x_0) || p(x_{t-1}|x_t)) + E_q[-log p(x_0|x_1)]

with p(x_{t-1}|x_t) = sum_{x_0'} q(x_{t-1}|x_t,x_0') p_model(x_0'|x_t). It holds for any process
of the family, so no declaration can push it below the model's true likelihood. `elbo` is the
implementation both `evaluate.py` and the hidden grader use (the grader imports the pristine copy).
"""
from __future__ import annotations

import math

import torch

from config import N_BONDS, N_NODES, N_TYPES, STEPS

# Marginals of node types and bond orders in the training data (from data/train_full, rounded).
NODE_MARGINAL = (0.4006, 0.2497, 0.1995, 0.1502)
BOND_MARGINAL = (0.7174, 0.2278, 0.0548)
NOISES = ("uniform", "marginal")
SCHEDULES = ("cosine", "linear")


class UndeclaredProcess(ValueError):
    """The checkpoint declares a process outside the accepted family."""


def abar(schedule: str, T: int = STEPS) -> torch.Tensor:
    """abar_t for t = 0..T (float64, [T+1]), abar_0 = 1 and abar_T = 0."""
    t = torch.arange(T + 1, dtype=torch.float64)
    if schedule == "cosine":
        s = 0.008
        f = torch.cos((t / T + s) / (1 + s) * math.pi / 2) ** 2
        a = f / f[0]
    elif schedule == "linear":
        a = 1 - t / T
    else:
        raise UndeclaredProcess(f"schedule {schedule!r} is not one of {SCHEDULES}")
    a[-1] = 0.0
    return a.clamp(0.0, 1.0)


def stationary(noise: str, n_classes: int) -> torch.Tensor:
    if noise == "uniform":
        return torch.full((n_classes,), 1.0 / n_classes, dtype=torch.float64)
    if noise == "marginal":
        m = torch.tensor(NODE_MARGINAL if n_classes == N_TYPES else BOND_MARGINAL, dtype=torch.float64)
        return m / m.sum()
    raise UndeclaredProcess(f"noise {noise!r} is not one of {NOISES}")


class Process:
    """One declared process: schedule and stationary distributions for nodes and bonds."""

    def __init__(self, noise: str = "uniform", schedule: str = "cosine", T: int = STEPS):
        self.noise, self.schedule, self.T = noise, schedule, T
        self.abar = abar(schedule, T)
        self.alpha = torch.ones(T + 1, dtype=torch.float64)
        self.alpha[1:] = torch.where(self.abar[:-1] > 0, self.abar[1:] / self.abar[:-1].clamp_min(1e-300),
                                     torch.zeros(T, dtype=torch.float64))
        self.m = {N_TYPES: stationary(noise, N_TYPES), N_BONDS: stationary(noise, N_BONDS)}

    @classmethod
    def from_metadata(cls, meta: dict | None) -> "Process":
        meta = meta or {}
        return cls(str(meta.get("noise", "uniform")), str(meta.get("schedule", "cosine")))

    def metadata(self) -> dict:
        return {"noise": self.noise, "schedule": self.schedule}

    def q_t(self, x0: torch.Tensor, t: torch.Tensor, n_classes: int) -> torch.Tensor:
        """Probabilities q(x_t | x_0): x0 [B, V] int, t [B] int -> [B, V, C] (float64)."""
        a = self.abar.to(x0.device)[t][:, None, None]
        onehot = torch.nn.functional.one_hot(x0.long(), n_classes).double()
        return a * onehot + (1 - a) * self.m[n_classes].to(x0.device)

    def sample(self, x0: torch.Tensor, t: torch.Tensor, n_classes: int,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw x_t ~ q(x_t | x_0) for every variable: [B, V] int -> [B, V] int64."""
        cdf = self.q_t(x0, t, n_classes).cumsum(-1)                      # [B, V, C]
        u = torch.rand(x0.shape, generator=generator, dtype=torch.float64).to(x0.device)
        return (u[..., None] > cdf[..., :-1]).sum(-1)

    def posterior(self, xt: torch.Tensor, t: int, n_classes: int) -> torch.Tensor:
        """q(x_{t-1} = k | x_t, x_0 = i) for every i: xt [B, V] -> [B, V, C(i), C(k)] (float64)."""
        m = self.m[n_classes].to(xt.device)
        eye = torch.eye(n_classes, dtype=torch.float64, device=xt.device)
        # Q_t[k, j] = alpha_t [k = j] + (1 - alpha_t) m_j ; Qbar_{t-1}[i, k] = abar_{t-1} [i = k] + (1 - abar_{t-1}) m_k
        a, ab = float(self.alpha[t]), float(self.abar[t - 1])
        q_step = a * eye + (1 - a) * m[None, :]                        # [C(k), C(j)]
        q_bar = ab * eye + (1 - ab) * m[None, :]                       # [C(i), C(k)]
        like = q_step[:, xt.long()].permute(1, 2, 0)                   # [B, V, C(k)] = Q_t[k, x_t]
        u = q_bar[None, None] * like[:, :, None, :]                    # [B, V, C(i), C(k)]
        return u / u.sum(-1, keepdim=True).clamp_min(1e-300)


def _kl(q: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """KL(q || p) over the last axis, float64, 0 log 0 = 0."""
    return torch.where(q > 0, q * (q.clamp_min(1e-300).log() - p.clamp_min(1e-300).log()), torch.zeros_like(q)).sum(-1)


@torch.no_grad()
def elbo(model: torch.nn.Module, graphs: torch.Tensor, process: Process, seed: int,
         batch: int = 2048) -> torch.Tensor:
    """Negative ELBO in nats per graph, float64 [N]; graphs [N, N_NODES + N_PAIRS] int.

    The expectation over x_t uses one draw per graph and step from a generator seeded by
    `seed`, so the value is deterministic. Non-finite model outputs give +inf.
    """
    device = next(model.parameters()).device
    out = []
    for s in range(0, len(graphs), batch):
        g = graphs[s:s + batch].to(device).long()
        parts = ((g[:, :N_NODES], N_TYPES), (g[:, N_NODES:], N_BONDS))
        gen = torch.Generator(device="cpu").manual_seed(seed + s)
        total = torch.zeros(len(g), dtype=torch.float64, device=device)
        T = process.T
        for x0, c in parts:        # prior term: KL(q(x_T | x_0) || m)
            qT = process.q_t(x0, torch.full((len(g),), T, device=device), c)
            total += _kl(qT, process.m[c].to(device).expand_as(qT)).sum(1)
        for t in range(1, T + 1):
            tt = torch.full((len(g),), t, device=device)
            xt = [process.sample(x0, tt, c, gen).to(device) for x0, c in parts]
            logits = model(xt[0], xt[1], tt.float() / T)
            for (x0, c), x_t, lg in zip(parts, xt, logits):
                p0 = torch.softmax(lg.double(), dim=-1)                       # [B, V, C]
                if t == 1:
                    total += -p0.gather(-1, x0[..., None]).squeeze(-1).clamp_min(1e-300).log().sum(1)
                    continue
                post = process.posterior(x_t, t, c)                           # [B, V, C(i), C(k)]
                q_true = post.gather(2, x0[:, :, None, None].expand(-1, -1, 1, c)).squeeze(2)
                p_model = (p0[..., None] * post).sum(2)
                total += _kl(q_true, p_model).sum(1)
        total = torch.where(torch.isfinite(total), total, torch.full_like(total, math.inf))
        out.append(total.cpu())
    return torch.cat(out)


def uniform_nll() -> float:
    """-log of the uniform distribution over graph encodings (the 0 anchor), in nats."""
    from config import N_PAIRS
    return N_NODES * math.log(N_TYPES) + N_PAIRS * math.log(N_BONDS)
