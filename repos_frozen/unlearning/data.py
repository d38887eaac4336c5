"""The data and the prepared model: checksummed files, and a metered training interface. Protected.

Training sees two sets of facts ([N, 8] int64 rows: newline, the fact's five-symbol name, entity, value):
  forget   the facts to unlearn (every one of them is scored)
  retain   a subset of the facts to keep (the grader also scores retain facts you never see)
`UnlearningData` serves them by index and meters what it serves: one run may draw at most
`budget_examples` facts in total (forget and retain together; repeats count again).
"""
import hashlib
import io
import os
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load as load_safetensors

from config import BYOM, TOKEN_IDS, get_scale

REPO = Path(__file__).resolve().parent
DATA = REPO / "data"
ARTIFACTS = REPO / "artifacts"


def _listing(path: Path) -> dict:
    sums = {}
    if path.exists():
        for line in path.read_text().splitlines():
            digest, name = line.split()
            sums[name] = digest
    return sums


def _checked_bytes(path: Path, listing: Path) -> bytes:
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (the grader's training run has no validation data)")
    raw = path.read_bytes()
    expected = _listing(listing).get(path.name)
    if expected is None or hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: checksum does not match {listing.relative_to(REPO)}")
    return raw


def load_array(name: str) -> torch.Tensor:
    """data/<name>.npy as int64, after checking its sha256 against data/SHA256SUMS."""
    raw = _checked_bytes(DATA / f"{name}.npy", DATA / "SHA256SUMS")
    return torch.from_numpy(np.load(io.BytesIO(raw)).astype(np.int64))


def prepared_path(scale: str) -> Path:
    """The prepared (memorised) model of `scale`: artifacts/<artifact>.safetensors, or with your own
    model byom/memorised.safetensors (the same at every scale)."""
    if TOKEN_IDS is not None:
        return BYOM / "memorised.safetensors"
    return ARTIFACTS / f"{get_scale(scale).artifact}.safetensors"


def load_prepared(model: torch.nn.Module, scale: str) -> torch.nn.Module:
    """Load the prepared (memorised) weights of `scale` into `model`, checking the SHA256SUMS beside them."""
    path = prepared_path(scale)
    raw = _checked_bytes(path, path.parent / "SHA256SUMS")
    weights = load_safetensors(raw)
    if TOKEN_IDS is not None:           # every parameter of your own model, tied ones once
        names = {k for k, _ in model.named_parameters()}
        if set(weights) != names:
            raise RuntimeError(f"{path}: parameter names differ from the model's ({sorted(set(weights) ^ names)[:5]})")
    model.load_state_dict(weights, strict=False)   # tied lm_head.weight is wte.weight
    return model


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more facts than its scale's budget."""


class UnlearningData:
    """The forget set and the visible retain subset, served by index and metered."""

    def __init__(self, scale: str):
        self.forget = load_array("forget")          # [6000, 8]
        self.retain = load_array("retain")          # [1000, 8]
        self.budget = get_scale(scale).budget_examples
        self.served = 0

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    @property
    def n_forget(self) -> int:
        """Facts in the forget set (indices 0 .. n_forget - 1)."""
        return len(self.forget)

    @property
    def n_retain(self) -> int:
        """Visible retain facts (indices 0 .. n_retain - 1)."""
        return len(self.retain)

    def _serve(self, rows: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} facts is spent")
        self.served += len(idx)
        return rows[idx]

    def get_forget(self, idx: torch.Tensor) -> torch.Tensor:
        """Forget facts at `idx` ([B] int64) -> [B, 8]; counts B against the budget."""
        return self._serve(self.forget, idx)

    def get_retain(self, idx: torch.Tensor) -> torch.Tensor:
        """Visible retain facts at `idx` ([B] int64) -> [B, 8]; counts B against the budget."""
        return self._serve(self.retain, idx)


if os.environ.get("AI4AI_METER"):
    # A graded run: the fact files are not in this copy of the repo. The grader's meter, a process
    # outside the training sandbox, holds them and serves UnlearningData with this same API
    # (get_forget, get_retain, n_forget, n_retain and the counts; not the raw arrays).
    from ai4ai_meter import remote
    UnlearningData = remote(UnlearningData)
