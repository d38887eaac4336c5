"""The data: fixed, offline sets of graphs, checksummed. Protected.

A graph is a row of uint8 [N_NODES + N_PAIRS]: the node types, then the bond orders of the
pairs (0,1), (0,2), ..., (N-2, N-1). The training split is served through `TrainingGraphs`,
which meters what it serves: one run may draw at most `budget_graphs` graphs (repeats count
again). At `ci` and `smoke` this meter, not the wall clock, is the budget.
"""
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from config import N_NODES, N_PAIRS, get_scale

REPO = Path(__file__).resolve().parent
WIDTH = N_NODES + N_PAIRS


def data_dir() -> Path:
    # The grader may point at a folder of its own: the large (full-scale) splits, or the training
    # split of the source instance a graded run is served.
    return Path(os.environ.get("GRAPH_DIFFUSION_DATA_DIR", REPO / "data"))


def _listing(folder: Path) -> dict:
    """sha256 of each file named in folder/SHA256SUMS."""
    listing = folder / "SHA256SUMS"
    if not listing.exists():
        return {}
    return {name: digest for digest, name in (line.split() for line in listing.read_text().splitlines())}


def load_graphs(name: str) -> torch.Tensor:
    """The split `<name>.u8` as int64 [N, N_NODES + N_PAIRS], after checking its sha256 against the
    SHA256SUMS beside it."""
    path = data_dir() / f"{name}.u8"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (the grader's training run has no validation data)")
    raw = path.read_bytes()
    expected = _listing(path.parent).get(path.name)
    if expected is None or hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: checksum does not match the SHA256SUMS beside it")
    return torch.from_numpy(np.frombuffer(raw, dtype=np.uint8).reshape(-1, WIDTH).astype(np.int64))


def split_graph(g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, N_NODES + N_PAIRS] -> (node types [B, N_NODES], bond orders [B, N_PAIRS])."""
    return g[:, :N_NODES], g[:, N_NODES:]


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more training graphs than its scale's budget."""


class TrainingGraphs:
    """The training split of a scale, served by index and metered."""

    def __init__(self, scale: str):
        s = get_scale(scale)
        self.graphs = load_graphs(s.split)
        self.budget = s.budget_graphs
        self.served = 0

    def __len__(self) -> int:
        return self.graphs.shape[0]

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def get(self, idx: torch.Tensor) -> torch.Tensor:
        """Graphs at `idx` ([B] int64) -> [B, N_NODES + N_PAIRS]; counts B against the budget."""
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} graphs is spent")
        self.served += len(idx)
        return self.graphs[idx]


if os.environ.get("AI4AI_METER"):
    # A graded run: the budgeted data is not in this copy of the repo. The grader's meter, a
    # process outside the training sandbox, holds it and serves TrainingGraphs with this same API.
    from ai4ai_meter import remote
    TrainingGraphs = remote(TrainingGraphs)
