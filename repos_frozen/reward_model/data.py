"""The data: fixed, offline, checksummed files. Protected.

- `data/train_<scale>.u8`: preference pairs, rows of 2 * SEQ_LEN + 2 bytes: sequence a, sequence b,
  label (1 if a is preferred, 0 if b is), rater (0-7: which of the eight raters labelled the pair).
  Both sequences share the prompt. The raters are sometimes wrong, and not equally often.
- `data/val.u8`: pairs in the same format with correct labels and rater 255 (no rater; the proxy
  evaluation).
- `data/unlabelled.u8`: single sequences (prompt|response$) without labels; prepare.py pretrains
  the base LM on them.

The training split is served through `PreferencePairs`, which meters what it serves: one run may
draw at most `budget_pairs` pairs (repeats count again). At `ci` and `smoke` this meter, not the
wall clock, is the budget, so a result does not depend on the machine.
"""
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from config import SEQ_LEN, get_scale

REPO = Path(__file__).resolve().parent
PAIR_WIDTH = 2 * SEQ_LEN + 2
N_RATERS = 8


def data_dir() -> Path:
    # The grader may point at a folder of its own: the large (full-scale) splits, or the training
    # split of the rule instance a graded run is served.
    return Path(os.environ.get("REWARD_MODEL_DATA_DIR", REPO / "data"))


def _listing(folder: Path) -> dict:
    """sha256 of each file named in folder/SHA256SUMS."""
    listing = folder / "SHA256SUMS"
    if not listing.exists():
        return {}
    return {name: digest for digest, name in (line.split() for line in listing.read_text().splitlines())}


def _read(name: str, width: int) -> np.ndarray:
    path = data_dir() / f"{name}.u8"
    if not path.exists():
        path = REPO / "data" / f"{name}.u8"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (the grader's training run has no validation data)")
    raw = path.read_bytes()
    expected = _listing(path.parent).get(path.name)      # the listing of the folder it was read from
    if expected is None or hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: checksum does not match the SHA256SUMS beside it")
    return np.frombuffer(raw, dtype=np.uint8).reshape(-1, width)


def load_pairs(name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A pair file as (a [N, SEQ_LEN] int64, b [N, SEQ_LEN] int64, label [N] float32: 1 = a preferred,
    rater [N] int64: 0..7, or 255 for the validation split's clean labels)."""
    arr = torch.from_numpy(_read(name, PAIR_WIDTH).astype(np.int64))
    return arr[:, :SEQ_LEN], arr[:, SEQ_LEN:2 * SEQ_LEN], arr[:, 2 * SEQ_LEN].float(), arr[:, 2 * SEQ_LEN + 1]


def load_unlabelled() -> torch.Tensor:
    """The unlabelled sequences [N, SEQ_LEN] int64 (prepare.py's pretraining data)."""
    return torch.from_numpy(_read("unlabelled", SEQ_LEN).astype(np.int64))


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more training pairs than its scale's budget."""


class PreferencePairs:
    """The training pairs of a scale, served by index and metered."""

    def __init__(self, scale: str):
        self.a, self.b, self.label, self.rater = load_pairs(f"train_{scale}")
        self.budget = get_scale(scale).budget_pairs
        self.served = 0

    def __len__(self) -> int:
        return self.a.shape[0]

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pairs at `idx` ([B] int64) -> (a [B, SEQ_LEN], b [B, SEQ_LEN], label [B], rater [B]);
        counts B against the budget."""
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} pairs is spent")
        self.served += len(idx)
        return self.a[idx], self.b[idx], self.label[idx], self.rater[idx]


if os.environ.get("AI4AI_METER"):
    # A graded run: the budgeted data is not in this copy of the repo. The grader's meter, a
    # process outside the training sandbox, holds it and serves PreferencePairs with this same API.
    from ai4ai_meter import remote
    PreferencePairs = remote(PreferencePairs)
