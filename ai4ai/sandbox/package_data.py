"""Data files shipped inside installed packages, to be hidden from the training and agent sandboxes.

A sandbox binds the interpreter's folders read-only, and with them every dataset a package ships:
scikit-learn's digits are the very images diffusion_rl's budget meters (half of them are its
hidden scorer's), and a submission that trains on them directly buys data outside the budget.
`hidden_paths` finds such data by scanning the package folders, so that a new package or version
is covered without a list to keep; the sandbox mounts an empty tmpfs over each folder it returns
and /dev/null over each file (`bwrap_args`). Nothing here is needed to import or run a package:
what is hidden is a package's bundled datasets and sample data, and the data of its own tests.
The hidden evaluation is not sandboxed this way: it reads the digits from scikit-learn itself.
"""

from __future__ import annotations

import os
import site
import sys
from functools import lru_cache
from pathlib import Path

# What a dataset is stored as: tables, arrays, pickles, images, audio, archives.
DATA_SUFFIXES = (
    ".csv",
    ".tsv",
    ".arff",
    ".data",
    ".dat",
    ".svmlight",
    ".libsvm",
    ".jsonl",
    ".parquet",
    ".feather",
    ".orc",
    ".h5",
    ".hdf5",
    ".mat",
    ".npy",
    ".npz",
    ".pkl",
    ".pickle",
    ".joblib",
    ".pt",
    ".safetensors",
    ".idx",
    ".ubyte",
    ".png",
    ".jpg",
    ".jpeg",
    ".gif",
    ".bmp",
    ".tif",
    ".tiff",
    ".pgm",
    ".ppm",
    ".ima",
    ".wav",
    ".aif",
    ".aiff",
    ".au",
    ".flac",
    ".mp3",
    ".ogg",
    ".gz",
    ".bz2",
    ".xz",
    ".zip",
    ".tar",
)
# Datasets a package serves through its API (load_digits, get_sample_data, graph_atlas): hidden
# whatever they hold. Descriptions (.rst) go with them: they say what the data is and where.
DATASETS = (
    "sklearn/datasets/data",
    "sklearn/datasets/descr",
    "sklearn/datasets/images",
    "matplotlib/mpl-data/sample_data",
    "networkx/generators/atlas.dat.gz",
)
# Package data a package reads at run time, not a dataset: left readable, or the package breaks
# (scipy.stats.qmc.Sobol, dateutil.tz, botocore's service models, matplotlib's toolbar icons).
RUNTIME = (
    "scipy/stats/_sobol_direction_numbers.npz",
    "dateutil/zoneinfo",
    "botocore/data",
    "matplotlib/mpl-data/images",
    "matplotlib/mpl-data/fonts",
)
TEST_DIRS = {"tests", "test"}  # a package's own test suite; never imported by training
MIN_DATA_BYTES = 16_384  # a folder with less data than this outside tests is left alone


def python_dirs() -> list[Path]:
    """The folders a sandbox binds for the interpreter (sandbox.py binds the same ones)."""
    dirs = {Path(sys.base_prefix), Path(sys.prefix), *map(Path, site.getsitepackages())}
    return sorted(d for d in dirs if d.is_dir())


def _is_data(name: str) -> bool:
    return name.lower().endswith(DATA_SUFFIXES)


def _package_path(path: Path) -> str | None:
    """`path` relative to the site-packages folder it is in (the name the lists above use)."""
    parts = path.parts
    for i in range(len(parts) - 1, 0, -1):
        if parts[i] in ("site-packages", "dist-packages"):
            return "/".join(parts[i + 1 :])
    return None


def scan(roots: list[Path]) -> dict[Path, str]:
    """{path to hide: why} under `roots`; a folder hides everything below it, so nothing under a
    hidden folder is listed again."""
    found: dict[Path, str] = {}
    roots = [r for r in roots if not any(o != r and r.is_relative_to(o) for o in roots)]
    for root in roots:
        for dirpath, dirnames, filenames in os.walk(root):
            here = Path(dirpath)
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            rel = _package_path(here)
            if rel is not None and any(rel == k or rel.startswith(k + "/") for k in RUNTIME):
                dirnames[:] = []
                continue
            if rel is not None and rel in DATASETS:
                found[here] = "a package's bundled dataset"
                dirnames[:] = []
                continue
            for f in sorted(filenames):
                frel = f"{rel}/{f}" if rel else None
                if frel in DATASETS:
                    found[here / f] = "a package's bundled dataset"
            if here.name in TEST_DIRS:
                if _holds_data(here):
                    found[here] = "a package's test data"
                    dirnames[:] = []
                continue
            if here in roots or any(f.endswith((".py", ".so", ".pyd")) for f in filenames):
                continue  # a package (or the root itself): its code must stay importable
            data = [
                f for f in filenames if _is_data(f) and not (rel and f"{rel}/{f}" in RUNTIME) and here / f not in found
            ]
            size = sum(_size(here / f) for f in data)
            if size >= MIN_DATA_BYTES:
                found[here] = f"{len(data)} data files, {size:,} bytes"
                dirnames[:] = []
    return found


def _size(p: Path) -> int:
    try:
        return p.lstat().st_size
    except OSError:
        return 0


def _holds_data(folder: Path) -> bool:
    for _, _, filenames in os.walk(folder):
        if any(_is_data(f) for f in filenames):
            return True
    return False


@lru_cache(maxsize=4)
def _cached(roots: tuple[Path, ...]) -> tuple[Path, ...]:
    return tuple(sorted(scan(list(roots))))


def hidden_paths(roots: list[Path] | None = None) -> list[Path]:
    """Host paths to hide in the training and agent sandboxes (folders and single files)."""
    return list(_cached(tuple(roots or python_dirs())))


def bwrap_args(paths: list[Path], inside=str) -> list[str]:
    """bwrap arguments hiding `paths`, to follow the binds of the interpreter's folders: an empty
    tmpfs over a folder, /dev/null over a file; `inside` maps a host path to where it is bound."""
    out = []
    for p in paths:
        out += ["--tmpfs", inside(str(p))] if p.is_dir() else ["--ro-bind", "/dev/null", inside(str(p))]
    return out
