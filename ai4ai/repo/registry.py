"""The registry of brought models (`models.yaml` beside a task's anchors): which model each task
version was made from, with the version of the task without it, so that `ai4ai.list` can show it
and stale entries can go (`stale_entry`, applied by `register` and by `records.store`).

Like the anchor records, an entry made by a run goes to this machine's own store
(layout.local_records_dir), read on top of the committed models.yaml: a run leaves the checkout as it was.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from ai4ai import PROJECT_ROOT
from ai4ai.core.layout import file_lock, local_records_dir
from ai4ai.core.provenance import base_version, task_version, tree_sha256
from ai4ai.core.task import Task

CACHE_ROOT = PROJECT_ROOT / "outputs" / ".cache" / "own_models"
REGISTRY = "models.yaml"  # beside anchors.yaml: which model each task version was made from
REGISTRY_LOCK = "models.lock"


def register(task: Task, info, frozen_repo: str) -> None:
    """Note which model (`info`: a models.ModelInfo) a task version was made from, beside the task's anchors (ai4ai.list shows it),
    with its version per scale (`task_versions`: what its anchor records are keyed by) and the version of the
    task without the model (`base_version`, and per scale `base_versions`);
    entries no current version can use go (stale_entry)."""
    base = task.base_task or replace(task, model_path=None)
    version, whole = task_version(task), base_version(task)
    scales = {s: base_version(task, s) for s in task.scales}
    # anchor records are keyed by the version at their scale (grading.context): list them per scale
    versions = {s: task_version(task, s) for s in task.scales}
    where = local_records_dir(task.grader) or Path(task.grader)
    where.mkdir(parents=True, exist_ok=True)
    with file_lock(where / REGISTRY_LOCK):
        old = entries(where)
        kept = [e for e in old if not stale_entry(e, scales, whole, tree_sha256(base.repo)[:16])]
        if not any(e.get("task_version") == version for e in kept):
            kept.append(
                {
                    "task_version": version,
                    "frozen_repo": frozen_repo,
                    "model_sha256": info.sha256,
                    "path": info.path,
                    "architecture": info.architecture,
                    "n_params": info.n_params,
                    "vocab_size": info.vocab_size,
                    "base_version": whole,
                    "base_versions": scales,
                    "task_versions": versions,
                }
            )
        if kept != old:
            _write_entries(where, kept)


def entries(grader_dir: Path) -> list[dict]:
    """The registry's entries (models.yaml beside the anchors), oldest first."""
    path = Path(grader_dir) / REGISTRY
    return (yaml.safe_load(path.read_text()) or {}).get("models", []) if path.exists() else []


def _write_entries(grader_dir: Path, rows: list[dict]) -> None:
    path = Path(grader_dir) / REGISTRY
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        "# Written by ai4ai.repo.models: the models brought with task.model_path, by task version.\n"
        + yaml.safe_dump({"models": rows}, sort_keys=False)
    )
    tmp.replace(path)


def stale_entry(entry: dict, current: dict, whole: str | None = None, frozen: str | None = None) -> bool:
    """Whether no current version of the task can use a registry entry, so that it goes.

    `current`: scale -> the task's version without a brought model now (None: the task has no such
    scale any more), for the scales the caller knows (records.store: the one it stores at); `whole`:
    the same without a scale, `frozen`: the frozen repo's tree hash (16 digits), where known. An
    entry with `base_version` is stale when that differs from `whole`, or, `whole` unknown, when
    one of its `base_versions` differs from `current`'s; an entry from before those fields (legacy)
    only when its `frozen_repo` differs from `frozen` (a repo edit moves every version); else it stays."""
    if "base_version" in entry:
        if whole is not None:
            return entry["base_version"] != whole
        bv = entry.get("base_versions") or {}
        return any(s in bv and bv[s] != v for s, v in current.items())
    return frozen is not None and entry.get("frozen_repo") != frozen


def is_legacy(entry: dict) -> bool:
    """An entry from before `base_version`: its model's anchor records carry no base version either, and
    cannot be told from stale records of the repo's own model (records.stale keeps them while it stays)."""
    return "base_version" not in entry


def prune_registry(
    grader_dir: Path, current: dict, whole: str | None = None, frozen: str | None = None, dry_run: bool = False
) -> list[dict]:
    """Remove (or, dry_run, only list) the registry entries stale_entry judges stale; returns them."""
    if not (Path(grader_dir) / REGISTRY).exists():
        return []
    with file_lock(Path(grader_dir) / REGISTRY_LOCK):
        old = entries(grader_dir)
        gone = [e for e in old if stale_entry(e, current, whole, frozen)]
        if gone and not dry_run:
            _write_entries(grader_dir, [e for e in old if e not in gone])
    return gone


def registered(task: Task, current: bool = True) -> dict:
    """task_version -> registry entry, for the models brought to this task (`current`: only those
    derived from the frozen repo as it is now; an edit to it makes new task versions)."""
    local = local_records_dir(task.grader)
    rows = [e for d in ([Path(task.grader)] + ([local] if local else [])) for e in entries(d)]
    if not rows:
        return {}
    frozen = tree_sha256(task.repo)[:16] if current and CACHE_ROOT not in Path(task.repo).parents else None
    # this machine's entries come last, so that they replace a committed one of the same version
    return {e["task_version"]: e for e in rows if frozen is None or e.get("frozen_repo") == frozen}
