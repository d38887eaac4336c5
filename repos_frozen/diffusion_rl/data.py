"""The data: half of scikit-learn's 8x8 digits (UCI, CC BY 4.0), checksummed. Protected.

`data/digits_a.u8` holds N records of 65 bytes: 64 pixels (0..16, row-major) and the label.
prepare.py trains the base diffusion model and the reward's classifier on it. The other half
of the digits is not in this repo.
"""
import hashlib
from pathlib import Path

import numpy as np
import torch

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


def read_checked(path: Path) -> bytes:
    """The bytes of a data file or artifact, after checking its sha256 against the folder's SHA256SUMS."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (run prepare.py for artifacts)")
    raw = path.read_bytes()
    expected = _listing(path.parent / "SHA256SUMS").get(path.name)
    if expected is None or hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: checksum does not match {path.parent.name}/SHA256SUMS")
    return raw


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """(images [N, 64] float32 in [-1, 1], labels [N] int64) of the repo's half of the digits."""
    arr = np.frombuffer(read_checked(DATA / "digits_a.u8"), dtype=np.uint8).reshape(-1, 65)
    x = torch.from_numpy(arr[:, :64].astype(np.float32)) / 8.0 - 1.0
    return x, torch.from_numpy(arr[:, 64].astype(np.int64))
