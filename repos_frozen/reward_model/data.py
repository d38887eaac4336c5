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
wall clock, is the budget, so a result does not depend on the machine. At `quick` and `full` the
training split is a Hugging Face `datasets` folder (`train_<scale>/`, a pair a row in the layout
above, written by the grader's prepare with `save_to_disk`), memory-mapped: `datasets.load_from_disk`.
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


def load_pair_rows(name: str):
    """A pair split as int64 [N, PAIR_WIDTH] rows, after checking it against the SHA256SUMS beside it:
    a file `<name>.u8` (the committed splits) as a tensor, or a `datasets` folder `<name>/` (the GPU
    tiers' training splits) memory-mapped, indexed the same way."""
    folder = data_dir() / name
    if folder.is_dir():
        return _load_arrow(folder, _listing(folder.parent), (PAIR_WIDTH,))
    return torch.from_numpy(_read(name, PAIR_WIDTH).astype(np.int64))


def split_pairs(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """[N, PAIR_WIDTH] rows -> (a [N, SEQ_LEN] int64, b [N, SEQ_LEN] int64, label [N] float32: 1 = a
    preferred, rater [N] int64: 0..7, or 255 for the validation split's clean labels)."""
    return rows[:, :SEQ_LEN], rows[:, SEQ_LEN:2 * SEQ_LEN], rows[:, 2 * SEQ_LEN].float(), rows[:, 2 * SEQ_LEN + 1]


def load_pairs(name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A pair file as (a, b, label, rater): `split_pairs` of its rows."""
    return split_pairs(load_pair_rows(name))


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class ArrowRows:
    """A split saved as a Hugging Face `datasets` folder (`save_to_disk`: the GPU tiers' large
    splits, column `tokens`, each row stored flat), memory-mapped so that only the rows served are
    read. Indexed like the tensor it stands for: a [B] int32/int64 index -> int64 [B, *row_shape]."""

    def __init__(self, folder: Path, row_shape: tuple):
        os.environ.setdefault("HF_DATASETS_OFFLINE", "1")   # a local folder: nothing to fetch
        import datasets

        rows = datasets.load_from_disk(str(folder))
        column = rows.data.table.column("tokens")
        if len(column) != len(rows):
            raise RuntimeError(f"{folder}: a dataset with an index mapping is not a split this repo reads")
        self.width = int(np.prod(row_shape))
        # each Arrow record batch (datasets writes 1,000 rows a batch) as a [rows, width] view of the
        # memory-mapped file, no copy: a get gathers its rows from these, row by row (~200x faster at
        # full's size than a `take` on the chunked column, which concatenates its chunks first)
        self.chunks = [c.flatten().to_numpy(zero_copy_only=True).reshape(-1, self.width) for c in column.chunks]
        self.starts = np.cumsum([0] + [len(c) for c in self.chunks])
        self.shape = (int(self.starts[-1]), *row_shape)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, idx: torch.Tensor) -> torch.Tensor:
        idx = torch.as_tensor(idx)
        if idx.dim() != 1 or idx.dtype not in (torch.int32, torch.int64):   # as torch's indexing takes them
            raise IndexError(f"a split is indexed by a [B] integer tensor, not {idx.dtype} of shape {tuple(idx.shape)}")
        n, idx = len(self), idx.to(torch.int64)
        if len(idx) and bool(((idx < -n) | (idx >= n)).any()):
            raise IndexError(f"an index is out of range for a split of {n} rows")
        flat = torch.where(idx < 0, idx + n, idx).numpy()
        which = np.searchsorted(self.starts, flat, side="right") - 1
        rows = np.empty((len(flat), self.width), dtype=np.int64)
        for j, (k, at) in enumerate(zip(which.tolist(), (flat - self.starts[which]).tolist())):
            rows[j] = self.chunks[k][at]
        return torch.from_numpy(rows).reshape(-1, *self.shape[1:])


def _load_arrow(folder: Path, listing: dict, row_shape: tuple) -> ArrowRows:
    """A `datasets` folder, after checking each of its files (and that it has no other) against
    `listing`, the SHA256SUMS beside it, which names them `<folder>/<file>`."""
    listed = {k[len(folder.name) + 1:]: v for k, v in listing.items() if k.startswith(folder.name + "/")}
    present = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
    if not listed or present != set(listed):
        raise RuntimeError(f"{folder}: its files do not match the SHA256SUMS beside it")
    for rel, digest in listed.items():
        if _sha256(folder / rel) != digest:
            raise RuntimeError(f"{folder / rel}: checksum does not match the SHA256SUMS beside it")
    return ArrowRows(folder, row_shape)


def load_unlabelled() -> torch.Tensor:
    """The unlabelled sequences [N, SEQ_LEN] int64 (prepare.py's pretraining data)."""
    return torch.from_numpy(_read("unlabelled", SEQ_LEN).astype(np.int64))


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more training pairs than its scale's budget."""


class PreferencePairs:
    """The training pairs of a scale, served by index and metered."""

    def __init__(self, scale: str):
        self.pairs = load_pair_rows(f"train_{scale}")   # [N, PAIR_WIDTH], a tensor or memory-mapped
        self.budget = get_scale(scale).budget_pairs
        self.served = 0

    def __len__(self) -> int:
        return len(self.pairs)

    @property
    def remaining(self) -> int:
        return self.budget - self.served

    def get(self, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Pairs at `idx` ([B] int64) -> (a [B, SEQ_LEN], b [B, SEQ_LEN], label [B], rater [B]);
        counts B against the budget."""
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} pairs is spent")
        self.served += len(idx)
        return tuple(t.contiguous() for t in split_pairs(self.pairs[idx]))


if os.environ.get("AI4AI_METER"):
    # A graded run: the budgeted data is not in this copy of the repo. The grader's meter, a
    # process outside the training sandbox, holds it and serves PreferencePairs with this same API.
    from ai4ai_meter import remote
    PreferencePairs = remote(PreferencePairs)
