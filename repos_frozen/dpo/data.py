"""The data: fixed, offline, checksummed files. Protected.

    data/train_<scale>.u8   preference pairs [N, 2, SEQ_LEN]: (chosen, rejected) token rows
    data/val.u8             validation prompts with their reference answers [N, SEQ_LEN]
    data/sft.u8             demonstrations used only by prepare.py [N, SEQ_LEN]

Every row is `prompt + answer + EOS`, right-padded with PAD (0); the prompt ends with '>'.
In a pair the chosen answer is right and meets the prompt's format constraint; the rejected
one fails one of the two. The training split is served through `PairSplit`, which meters what
it serves: one run may draw at most `budget_pairs` pairs (repeats count again). At `quick` and
`full` the training split is a Hugging Face `datasets` folder (`train_<scale>/`, a pair a row,
written by the grader's prepare with `save_to_disk`), memory-mapped: `datasets.load_from_disk`.
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


def load_rows(name: str, row_shape: tuple = (SEQ_LEN,)):
    """A split as int64 [N, *row_shape] in the model's token ids, after checking its sha256: a file
    `data/<name>.u8` as a tensor, or a `datasets` folder `<name>/` in the grader's cache (the GPU
    tiers' training splits) memory-mapped, indexed the same way."""
    folder = data_dir() / name
    if folder.is_dir():
        return _load_arrow(folder, _checksums(), row_shape)
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
    arr = np.frombuffer(raw, dtype=np.uint8).reshape(-1, *row_shape)
    return to_model_tokens(torch.from_numpy(arr.astype(np.int64)))


def to_model_tokens(tokens: torch.Tensor) -> torch.Tensor:
    """Task token ids -> the model's: unchanged for the repo's GPT, through config.TOKEN_IDS for your own."""
    return tokens if TOKEN_IDS is None else torch.tensor(TOKEN_IDS, dtype=torch.int64)[tokens]


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
        return to_model_tokens(torch.from_numpy(rows).reshape(-1, *self.shape[1:]))


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


def prompt_lengths(rows: torch.Tensor) -> torch.Tensor:
    """Tokens in the prompt of each row ([..., SEQ_LEN] -> [...]): up to and including '>'."""
    return (rows == _END).long().argmax(-1) + 1


class BudgetExhausted(RuntimeError):
    """Raised when a run asks for more training pairs than its scale's budget."""


class PairSplit:
    """The preference pairs of a scale, served by index and metered."""

    def __init__(self, scale: str):
        self.pairs = load_rows(f"train_{scale}", (2, SEQ_LEN))    # [N, 2, T], a tensor or memory-mapped
        self.budget = get_scale(scale).budget_pairs
        self.served = 0

    def __len__(self) -> int:
        return len(self.pairs)

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
