"""The policy: an MLP over the grid's one-hot planes, four action logits. Protected."""
import torch
from torch import nn

from config import N_ACTIONS, N_CHANNELS, get_scale


class Policy(nn.Module):
    def __init__(self, scale: str):
        super().__init__()
        s = get_scale(scale)
        self.scale = scale
        d = N_CHANNELS * s.size * s.size
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(d, s.hidden), nn.ReLU(),
                                 nn.Linear(s.hidden, s.hidden), nn.ReLU(), nn.Linear(s.hidden, N_ACTIONS))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """obs [N, 4, size, size] -> logits [N, 4] (up, down, left, right)."""
        return self.net(obs)


def build_model(scale: str) -> Policy:
    """The policy for `scale`, fp32, random init (the prepared warm start is loaded by training)."""
    return Policy(scale).float()
