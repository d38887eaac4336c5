"""The data: fixed, offline splits of tokenized worked solutions, checksummed. Protected.

Each split file `data/<name>.u8` holds uint8 token ids, one sequence of SEQ_LEN per row
(see config.py for the format): `train_<scale>` (worked solutions for SFT), `val` (the
visible validation problems with their solutions) and `pretrain` (worked problems of
1 to 6 operators, the base model's corpus). The training split is served through `TrainingSplit`, which meters
what it serves: one run may draw at most `budget_examples` sequences (repeats count again).
At `ci` and `smoke` this meter, not the wall clock, is the budget.
"""
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from config import PAD, PROMPT_END, SEQ_LEN, TOKEN_IDS, get_scale

REPO = Path(__file__).resolve().parent


def data_dir() -> Path:
    # The grader may point at a folder of its own: the large (full-scale) splits, or the files of the
    # operator table a graded run is given (a fresh instance).
    return Path(os.environ.get("SFT_DATA_DIR", REPO / "data"))


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
    if name == "val" and not path.exists():
        path = REPO / "data" / "val.u8"          # the validation split is committed at every scale
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (the grader's training run has no validation data)")
    raw = path.read_bytes()
    expected = _listing(path.parent).get(path.name)
    if expected is None or hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: checksum does not match the SHA256SUMS beside it")
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(-1, SEQ_LEN)
    return to_model_tokens(torch.from_numpy(arr.astype(np.int64)))


def to_model_tokens(tokens: torch.Tensor) -> torch.Tensor:
    """Task token ids -> the model's: unchanged for the repo's GPT, through config.TOKEN_IDS for your own."""
    return tokens if TOKEN_IDS is None else torch.tensor(TOKEN_IDS, dtype=torch.int64)[tokens]


def prompt_lengths(tokens: torch.Tensor) -> torch.Tensor:
    """[B, T] -> [B]: tokens up to and including ':' (<bos> and the prompt); the completion follows."""
    return (tokens == PROMPT_END).int().argmax(dim=1) + 1


def completion_mask(tokens: torch.Tensor) -> torch.Tensor:
    """[B, T] bool: True on the completion (worked steps, answer, <eos>), False on prompt and padding."""
    pos = torch.arange(tokens.shape[1], device=tokens.device)
    return (pos[None, :] >= prompt_lengths(tokens)[:, None]) & (tokens != PAD)


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more training examples than its scale's budget."""


class TrainingSplit:
    """The SFT training split of a scale, served by index and metered."""

    def __init__(self, scale: str):
        self.sequences = load_sequences(f"train_{scale}")    # [N, SEQ_LEN]
        self.budget = get_scale(scale).budget_examples
        self.served = 0

    def __len__(self) -> int:
        return self.sequences.shape[0]

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def get(self, idx: torch.Tensor) -> torch.Tensor:
        """Sequences at `idx` ([B] int64) -> [B, SEQ_LEN]; counts B against the budget."""
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} examples is spent")
        self.served += len(idx)
        return self.sequences[idx]


if os.environ.get("AI4AI_METER"):
    # A graded run: the budgeted data is not in this copy of the repo. The grader's meter, a
    # process outside the training sandbox, holds it and serves TrainingSplit with this same API.
    from ai4ai_meter import remote
    TrainingSplit = remote(TrainingSplit)
