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

`write_splits` is the helper a grader's materialize or grading_data may write its files with.
"""
from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np

REQUIRED = ("SPLITS", "split", "evaluate", "uninformative")


def load_grader(task_name: str, grader_dir: Path) -> ModuleType:
    name = f"ai4ai_hidden_{task_name}"
    if name in sys.modules:
        return sys.modules[name]
    init = Path(grader_dir) / "__init__.py"
    if not init.exists():
        raise FileNotFoundError(f"{init} is missing: a hidden grader is a package exporting {REQUIRED}")
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(grader_dir)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    missing = [a for a in REQUIRED if not hasattr(mod, a)]
    if missing:
        raise AttributeError(f"hidden grader {grader_dir} lacks {missing}")
    return mod


def write_splits(dest: Path, files: dict) -> dict:
    """For a grader's materialize or grading_data: write each {name: uint8 array} into dest as its raw
    bytes; return {name: sha256}."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    sums = {}
    for name, arr in files.items():
        raw = np.ascontiguousarray(arr, dtype=np.uint8).tobytes()
        (dest / name).write_bytes(raw)
        sums[name] = hashlib.sha256(raw).hexdigest()
    return sums
