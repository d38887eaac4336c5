"""The hidden grader's contract, and loading it from grader_hidden/<task>/ as a package.

A hidden grader package provides:
    SPLITS: dict[str, int]                      split names (at least selection, test) and sizes
    split(name, cfg) -> data                    regenerated from a 128-bit secret seed
    evaluate(model, split, cfg) -> float        the raw metric, deterministic; cfg is None (anchors) or
                                                {"scale": S, "metadata": the checkpoint's metadata,
                                                whitelisted keys only}; non-finite = invalid
    uninformative(model) -> model               the no-information model (the 0 anchor)
    best_attainable(split, cfg) -> float        when the task's metric.best is a name
    materialize(scale, dest) -> {file: sha256}  optional: writes the `full` splits (too large to commit)
    grading_data(scale, dest) -> {file: sha256} optional (data.grading): the training split of a fresh
                                                instance of the task's source, served to graded runs only,
                                                and the files the repo's prepare step reads where its
                                                prepared models depend on the instance (data.grading_artifacts)
    evaluate_with_noise(model, split, cfg)      optional: (raw, standard error of the paired
                                                excess over the best predictor), for noise checks

`write_splits` is the one writer of a grader's split files (materialize, grading_data and the like),
raw arrays or, for the GPU tiers' large splits, `datasets` folders (`ArrowSplit`);
`shrunk()` says whether the harness asks for `full` at CPU sizes (SHRINK_ENV).

Loading: every grader is loaded as the package `ai4ai_hidden.<task>` (from its own folder, wherever
that lies: a test may point a task at a copy), under a parent package `ai4ai_hidden` whose path is
the project's grader_hidden/. So a grader imports the graders' shared library, grader_hidden/common/
(never a task), as its sibling: `from ..common import hmm`. That import is what `uses_common`
finds, and a task whose grader makes it has the library's tree hash in its task version
(provenance.task_version).

What the graders write alike on purpose: each defines its own `uninformative` (zeroing every
parameter is the usual 0 anchor, but what "no information" means is the task's to say, in its
docstring, and it is part of the task's version), its own `evaluate_with_noise` (the mean and the
standard error of the shortfall from the best value, over the task's own per-item scores) and its
package's export list (this contract, one name a line). Code shared for what it computes (the HMM
token source, the LM likelihood) lives in grader_hidden/common/; these few lines stay with each
task, so that a task's grader reads whole and an edit to one task's 0 anchor moves that task alone.
Small per-task codecs (`encode`/`decode` of a task's own vocabulary) are alike in shape only.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.machinery
import importlib.util
import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from ai4ai import PROJECT_ROOT

REQUIRED = ("SPLITS", "split", "evaluate", "uninformative")
PACKAGE = "ai4ai_hidden"  # every grader is loaded as PACKAGE.<task>
HIDDEN_DIR = "grader_hidden"  # PACKAGE's folder, under the project root
COMMON = "common"  # the graders' shared library, grader_hidden/common/ (PACKAGE.common)
# Set (to a profile name, "cpu") in the harness's environment, it makes every repo's config.py and
# every hidden grader use their shrunk sizes at the GPU tiers (quick, full): the same code paths, in
# seconds on a CPU.
SHRINK_ENV = "AI4AI_SHRINK"


def shrunk() -> bool:
    """Whether SHRINK_ENV asks for the GPU tiers at CPU sizes (tests/test_full_shrunk.py). A grader reads it
    once, where it defines its sizes, and shrinks its quick and full sizes (and its hidden splits) as its
    repo does."""
    return bool(os.environ.get(SHRINK_ENV))


def _parent() -> ModuleType:
    """The package the graders are loaded under (made once): a path-only package over grader_hidden/,
    through which `from ..common import X` in any grader finds the shared library."""
    pkg = sys.modules.get(PACKAGE)
    if pkg is None:
        spec = importlib.machinery.ModuleSpec(PACKAGE, None, is_package=True)
        spec.submodule_search_locations = [str(PROJECT_ROOT / HIDDEN_DIR)]
        pkg = importlib.util.module_from_spec(spec)
        sys.modules[PACKAGE] = pkg
    return pkg


def load_grader(task_name: str, grader_dir: Path) -> ModuleType:
    """The hidden grader package of `task_name` from `grader_dir` (loaded once per process, as
    ai4ai_hidden.<task_name>); FileNotFoundError without an __init__.py, AttributeError when it lacks
    a name of REQUIRED."""
    if task_name == COMMON:
        raise ValueError(f"{HIDDEN_DIR}/{COMMON} is the graders' shared library, not a task")
    name = f"{PACKAGE}.{task_name}"
    if name in sys.modules:
        return sys.modules[name]
    init = Path(grader_dir) / "__init__.py"
    if not init.exists():
        raise FileNotFoundError(f"{init} is missing: a hidden grader is a package exporting {REQUIRED}")
    _parent()
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(grader_dir)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    missing = [a for a in REQUIRED if not hasattr(mod, a)]
    if missing:
        raise AttributeError(f"hidden grader {grader_dir} lacks {missing}")
    return mod


def uses_common(grader_dir: Path) -> bool:
    """Whether a grader's code imports the shared library (grader_hidden/common/): a relative import
    that reaches it (`from ..common import hmm`, `from ..common.hmm import sample`, `from .. import
    common`) or an absolute one (ai4ai_hidden.common, grader_hidden.common)."""
    root = Path(grader_dir)
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if "__pycache__" in rel.parts:
            continue
        package = [PACKAGE, "task", *rel.parts[:-1]]  # the package a relative import starts from
        for node in ast.walk(ast.parse(p.read_bytes(), str(p))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                targets = [node.module or ""]
            elif isinstance(node, ast.ImportFrom):
                if node.level > len(package):
                    continue
                base = ".".join(package[: len(package) - node.level + 1])
                targets = [f"{base}.{node.module}"] if node.module else [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for t in targets:
                parts = t.split(".")
                if parts[0] in (PACKAGE, HIDDEN_DIR) and parts[1:2] == [COMMON]:
                    return True
    return False


def sha256_file(path: Path) -> str:
    """A file's sha256, read in blocks (a GPU tier's split can be GiBs): the one hash of a split or
    cache file the harness computes (ai4ai.repo.preparing uses it too)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _npy(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


@dataclass(frozen=True)
class ArrowSplit:
    """A split to be written as a Hugging Face `datasets` folder (`Dataset.save_to_disk`): one row per
    example, each column a fixed-size list of one array's trailing values ([N, L] -> N rows of L). The
    GPU tiers' large splits are written so: the repo's data.py memory-maps it (`load_from_disk`) and
    reads only the rows it serves, and a researcher opens it with `datasets.load_from_disk`."""

    columns: dict  # {name: np.ndarray [N, ...]}, every array of the same N; a row is stored flat


# the tiers whose training splits are datasets folders: task.GPU_SCALES, which this module, below
# task in the layering, does not import (tests/test_arrow_splits.py checks that the two agree)
GPU_TIERS = ("quick", "full")


def train_split(scale: str, rows: np.ndarray) -> dict:
    """A grader's training split of `scale` as write_splits takes it: at the GPU tiers the `datasets`
    folder `train_<scale>/` (column `tokens`, one row per example, read memory-mapped by the repo's
    data.py), at ci and smoke the raw file `train_<scale>.u8` the repos commit."""
    if scale in GPU_TIERS:
        return {f"train_{scale}": ArrowSplit({"tokens": rows})}
    return {f"train_{scale}.u8": rows}


def _write_arrow(folder: Path, split: ArrowSplit) -> list[str]:
    """`split` saved into `folder` by `datasets`; the files written, relative to it. The fingerprint is
    the content's sha256 (not the random one datasets gives a table built in memory), so the same rows
    write the same bytes on every machine, state.json included."""
    import datasets
    import pyarrow as pa
    from datasets.table import InMemoryTable

    if not split.columns:
        raise ValueError("an ArrowSplit needs at least one column")
    rows = {len(a) for a in split.columns.values()}
    if len(rows) != 1:
        raise ValueError(f"an ArrowSplit's columns differ in length: {sorted(rows)}")
    table, features, h = {}, {}, hashlib.sha256()
    for name, arr in split.columns.items():
        arr = np.ascontiguousarray(arr)
        if arr.ndim < 2 or arr.size == 0:
            raise ValueError(f"column {name}: an [N, ...] array of at least one value, not shape {arr.shape}")
        width = arr.size // len(arr)
        h.update(f"{name}:{arr.dtype.str}:{arr.shape}".encode())
        h.update(arr.tobytes())
        table[name] = pa.FixedSizeListArray.from_arrays(pa.array(arr.reshape(-1)), width)
        features[name] = datasets.List(datasets.Value(str(arr.dtype)), length=width)
    ds = datasets.Dataset(
        InMemoryTable(pa.table(table)),
        info=datasets.DatasetInfo(features=datasets.Features(features)),
        fingerprint=h.hexdigest()[:16],
    )
    was = datasets.utils.logging.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        ds.save_to_disk(str(folder))
    finally:
        if was:
            datasets.enable_progress_bars()
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


def write_splits(dest: Path, files: dict) -> dict:
    """For a grader's materialize, grading_data or the files a repo's prepare step reads: write each
    {name: array} into dest, a name ending in .npy as a NumPy file (np.save: dtype and shape kept, no
    pickle), an ArrowSplit as a `datasets` folder `name/` (its files listed as `name/<file>`), any
    other as the array's raw uint8 bytes; return {name: sha256 of the bytes written}."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    sums = {}
    for name, arr in files.items():
        if isinstance(arr, ArrowSplit):
            for rel in _write_arrow(dest / name, arr):
                sums[f"{name}/{rel}"] = sha256_file(dest / name / rel)
            continue
        raw = _npy(arr) if name.endswith(".npy") else np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
        (dest / name).write_bytes(raw)
        sums[name] = hashlib.sha256(raw).hexdigest()
    return sums
