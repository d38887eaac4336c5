"""The data: fixed, offline, checksummed files. Protected.

    data/train_<scale>.u8   preference pairs [N, 2, SEQ_LEN]: (chosen, rejected) token rows
    data/val.u8             validation prompts with their reference answers [N, SEQ_LEN]
    data/sft.u8             demonstrations used only by prepare.py [N, SEQ_LEN]

Every row is `prompt + answer + EOS`, right-padded with PAD (0); the prompt ends with '>'.
In a pair the chosen answer is right and meets the prompt's format constraint; the rejected
one fails one of the two. The training split is served through `PairSplit`, which meters what
it serves: one run may draw at most `budget_pairs` pairs (repeats count again).
"""
import hashlib
import os
from pathlib import Path

import numpy as np
import torch

from config import PROMPT_END, SEQ_LEN, TOKEN_IDS, encode, get_scale

REPO = Path(__file__).resolve().parent
_END = encode(PROMPT_END)[0]


def data_dir() -> Path:
    # The grader may point at a cache holding large (full-scale) splits.
    return Path(os.environ.get("DPO_DATA_DIR", REPO / "data"))


def _checksums() -> dict:
    """sha256 of each file: data/SHA256SUMS, plus the grader's cache listing for full-scale splits."""
    sums = {}
    for listing in dict.fromkeys([REPO / "data" / "SHA256SUMS", data_dir() / "SHA256SUMS"]):
        if listing.exists():
            for line in listing.read_text().splitlines():
                digest, name = line.split()
                sums.setdefault(name, digest)      # the repo's own listing wins
    return sums


def load_rows(name: str) -> torch.Tensor:
    """`data/<name>.u8` as int64 [..., SEQ_LEN], after checking its sha256."""
    path = data_dir() / f"{name}.u8"
    if not path.exists() and (REPO / "data" / path.name).exists():
        path = REPO / "data" / path.name
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (the grader's training run has no validation "
                                "or demonstration data)")
    raw = path.read_bytes()
    expected = _checksums().get(path.name)
    if expected is None or hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: checksum does not match data/SHA256SUMS")
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(-1, SEQ_LEN)
    return to_model_tokens(torch.from_numpy(arr.astype(np.int64)))


def to_model_tokens(tokens: torch.Tensor) -> torch.Tensor:
    """Task token ids -> the model's: unchanged for the repo's GPT, through config.TOKEN_IDS for your own."""
    return tokens if TOKEN_IDS is None else torch.tensor(TOKEN_IDS, dtype=torch.int64)[tokens]


def prompt_lengths(rows: torch.Tensor) -> torch.Tensor:
    """Tokens in the prompt of each row ([..., SEQ_LEN] -> [...]): up to and including '>'."""
    return (rows == _END).long().argmax(-1) + 1


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more training pairs than its scale's budget."""


class PairSplit:
    """The preference pairs of a scale, served by index and metered."""

    def __init__(self, scale: str):
        self.pairs = load_rows(f"train_{scale}").reshape(-1, 2, SEQ_LEN)    # [N, 2, T]
        self.budget = get_scale(scale).budget_pairs
        self.served = 0

    def __len__(self) -> int:
        return self.pairs.shape[0]

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pairs at `idx` ([B] int64) -> (chosen [B, T], rejected [B, T], prompt_len [B]);
        counts B against the budget."""
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} pairs is spent")
        self.served += len(idx)
        p = self.pairs[idx]
        return p[:, 0], p[:, 1], prompt_lengths(p[:, 0])


if os.environ.get("AI4AI_METER"):
    # A graded run: the budgeted data is not in this copy of the repo. The grader's meter, a
    # process outside the training sandbox, holds it and serves PairSplit with this same API.
    from ai4ai_meter import remote
    PairSplit = remote(PairSplit)
