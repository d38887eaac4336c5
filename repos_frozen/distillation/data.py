"""The data: fixed, offline files of prompts, checksummed. Protected.

    data/train_<scale>.u8   training prompts only (no answers): [N, PROMPT_W] uint8, left-padded
    data/val.u8             validation prompts and answers for the proxy: [N, PROMPT_W + ANSWER_W]
    data/teacher_train.u8   the ground-truth set prepare.py trains the teacher on (same layout as
                            val.u8); absent from the grader's training run, never for the student

The training split is served through `TrainingSplit`, which meters what it serves: one run may
draw at most `budget_prompts` prompts (repeats count again). Together with the teacher's token
meter (teacher.py) this, not the wall clock, is the budget at ci and smoke.
"""
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from config import ANSWER_W, PAD, PROMPT_W, get_scale

REPO = Path(__file__).resolve().parent


def data_dir() -> Path:
    # The grader may point at a folder of its own: the large (full-scale) splits, or the files of the
    # instance a graded run is given (a fresh instance).
    return Path(os.environ.get("DISTILLATION_DATA_DIR", REPO / "data"))


def _listing(folder: Path) -> dict:
    """sha256 of each file named in folder/SHA256SUMS."""
    listing = folder / "SHA256SUMS"
    if not listing.exists():
        return {}
    return {name: digest for digest, name in (line.split() for line in listing.read_text().splitlines())}


def load_rows(name: str, width: int) -> torch.Tensor:
    """`<name>.u8` as int64 [N, width], after checking its sha256 against the SHA256SUMS beside it."""
    path = data_dir() / f"{name}.u8"
    if not path.exists():
        path = REPO / "data" / f"{name}.u8"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (the grader's training run has no validation data)")
    raw = path.read_bytes()
    expected = _listing(path.parent).get(path.name)
    if expected is None or hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: checksum does not match the SHA256SUMS beside it")
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(-1, width)
    return torch.from_numpy(arr.astype(np.int64))


def load_labelled(name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(prompts [N, PROMPT_W], answers [N, ANSWER_W]) of a labelled file (val, teacher_train)."""
    rows = load_rows(name, PROMPT_W + ANSWER_W)
    return rows[:, :PROMPT_W], rows[:, PROMPT_W:]


def join(prompts: torch.Tensor, completions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Prompts [B, PROMPT_W] (left-padded) + completions [B, C] (right-padded) -> (tokens, targets).

    tokens [B, PROMPT_W + C]: prompt then completion.
    targets [B, PROMPT_W + C]: at position t the completion token that follows tokens[:t+1];
    -100 at prompt positions and completion padding (for cross_entropy(ignore_index=-100)).
    """
    tokens = torch.cat([prompts, completions], dim=1)
    targets = torch.full_like(tokens, -100)
    targets[:, PROMPT_W - 1:PROMPT_W - 1 + completions.shape[1]] = completions.masked_fill(completions == PAD, -100)
    return tokens, targets


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more training prompts than its scale's budget."""


class TrainingSplit:
    """The training prompts of a scale, served by index and metered."""

    def __init__(self, scale: str):
        self.prompts = load_rows(f"train_{scale}", PROMPT_W)     # [N, PROMPT_W]
        self.budget = get_scale(scale).budget_prompts
        self.served = 0

    def __len__(self) -> int:
        return self.prompts.shape[0]

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def get(self, idx: torch.Tensor) -> torch.Tensor:
        """Prompts at `idx` ([B] int64) -> [B, PROMPT_W]; counts B against the budget."""
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} prompts is spent")
        self.served += len(idx)
        return self.prompts[idx].clone()


if os.environ.get("AI4AI_METER"):
    # A graded run: the budgeted data is not in this copy of the repo. The grader's meter, a
    # process outside the training sandbox, holds it and serves TrainingSplit with this same API.
    from ai4ai_meter import remote
    TrainingSplit = remote(TrainingSplit)
