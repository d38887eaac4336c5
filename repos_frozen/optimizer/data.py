"""The data: a fixed, offline corpus of symbol sequences, checksummed. Protected.

The training split is served through `TrainingSplit`, which meters what it serves: one run
may draw at most `budget_sequences` sequences (repeats count again). At `ci` and `smoke`
this meter, not the wall clock, is the budget, so a result does not depend on the machine.
"""
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from config import SEQ_LEN, get_scale

REPO = Path(__file__).resolve().parent


def data_dir() -> Path:
    # The grader may point at a folder of its own: the large (full-scale) splits, or the training
    # split of the source instance a graded run is served.
    return Path(os.environ.get("OPTIMIZER_DATA_DIR", REPO / "data"))


def _listing(folder: Path) -> dict:
    """sha256 of each file named in folder/SHA256SUMS."""
    listing = folder / "SHA256SUMS"
    if not listing.exists():
        return {}
    return {name: digest for digest, name in (line.split() for line in listing.read_text().splitlines())}


def load_sequences(name: str) -> torch.Tensor:
    """A split file `<name>.u8` as int64 [N, SEQ_LEN], after checking its sha256 against the
    SHA256SUMS beside it."""
    path = data_dir() / f"{name}.u8"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (the grader's training run has no validation data)")
    raw = path.read_bytes()
    expected = _listing(path.parent).get(path.name)
    if expected is None or hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: checksum does not match the SHA256SUMS beside it")
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(-1, SEQ_LEN)
    return torch.from_numpy(arr.astype(np.int64))


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more training sequences than its scale's budget."""


class TrainingSplit:
    """The training split of a scale, served by index and metered."""

    def __init__(self, scale: str):
        self.sequences = load_sequences(f"train_{scale}")    # [N, SEQ_LEN]
        self.budget = get_scale(scale).budget_sequences
        self.served = 0

    def __len__(self) -> int:
        return self.sequences.shape[0]

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def get(self, idx: torch.Tensor) -> torch.Tensor:
        """Sequences at `idx` ([B] int64) -> [B, SEQ_LEN]; counts B against the budget."""
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} sequences is spent")
        self.served += len(idx)
        return self.sequences[idx]


if os.environ.get("AI4AI_METER"):
    # A graded run: the split is not in this copy of the repo. The grader's meter, a process
    # outside the training sandbox, holds it and serves TrainingSplit with this same API.
    from ai4ai_meter import remote
    TrainingSplit = remote(TrainingSplit)
