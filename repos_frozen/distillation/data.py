"""The data: fixed, offline files of prompts, checksummed. Protected.

    data/train_<scale>.u8   training prompts only (no answers): [N, PROMPT_W] uint8, left-padded
    data/val.u8             validation prompts and answers for the proxy: [N, PROMPT_W + ANSWER_W]
    data/teacher_train.u8   the ground-truth set prepare.py trains the teacher on (same layout as
                            val.u8); absent from the grader's training run, never for the student

The training split is served through `TrainingSplit`, which meters what it serves: one run may
draw at most `budget_prompts` prompts (repeats count again). Together with the teacher's token
meter (teacher.py) this, not the wall clock, is the budget at ci and smoke. At `quick` and `full`
the training split is a Hugging Face `datasets` folder (`train_<scale>/`, a prompt a row, written by
the grader's prepare with `save_to_disk`), memory-mapped: `datasets.load_from_disk`.
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


def load_prompts(name: str):
    """A prompt split as int64 [N, PROMPT_W], after checking it against the SHA256SUMS beside it: a
    file `<name>.u8` (the committed splits) as a tensor, or a `datasets` folder `<name>/` (the GPU
    tiers' training splits) memory-mapped, indexed the same way."""
    folder = data_dir() / name
    if folder.is_dir():
        return _load_arrow(folder, _listing(folder.parent), (PROMPT_W,))
    return load_rows(name, PROMPT_W)


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
        self.prompts = load_prompts(f"train_{scale}")     # [N, PROMPT_W], a tensor or memory-mapped
        self.budget = get_scale(scale).budget_prompts
        self.served = 0

    def __len__(self) -> int:
        return len(self.prompts)

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
