"""The denoiser: an MLP from a noisy graph and its step to logits of the clean graph. Protected.

Input: the noisy graph x_t (node types and bond orders, one-hot, flattened) and t / T.
Output: logits over the clean node types [B, N_NODES, N_TYPES] and bond orders
[B, N_PAIRS, N_BONDS]. The grader turns them into p(x_0 | x_t) with a softmax.
"""
import math

import torch
from torch import nn

from config import N_BONDS, N_NODES, N_PAIRS, N_TYPES, get_scale

IN_DIM = N_NODES * N_TYPES + N_PAIRS * N_BONDS
TIME_DIM = 32


def time_features(t: torch.Tensor) -> torch.Tensor:
    """Sinusoidal features of t in [0, 1]: [B] -> [B, TIME_DIM]."""
    freqs = torch.exp(torch.arange(TIME_DIM // 2, device=t.device) * (-math.log(1000.0) / (TIME_DIM // 2)))
    ang = 1000.0 * t[:, None].float() * freqs[None, :]
    return torch.cat([ang.sin(), ang.cos()], dim=1)


class GraphDenoiser(nn.Module):
    def __init__(self, width: int, depth: int):
        super().__init__()
        layers, d = [], IN_DIM + TIME_DIM
        for _ in range(depth):
            layers += [nn.Linear(d, width), nn.SiLU()]
            d = width
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(width, IN_DIM)

    def forward(self, nodes: torch.Tensor, bonds: torch.Tensor, t: torch.Tensor):
        """nodes [B, N_NODES], bonds [B, N_PAIRS] (int), t [B] in [0, 1] -> (node, bond) logits."""
        x = torch.cat([nn.functional.one_hot(nodes.long(), N_TYPES).flatten(1).float(),
                       nn.functional.one_hot(bonds.long(), N_BONDS).flatten(1).float(),
                       time_features(t)], dim=1)
        out = self.head(self.body(x))
        k = N_NODES * N_TYPES
        return out[:, :k].view(-1, N_NODES, N_TYPES), out[:, k:].view(-1, N_PAIRS, N_BONDS)


def build_model(scale: str) -> GraphDenoiser:
    s = get_scale(scale)
    return GraphDenoiser(s.width, s.depth).float()
