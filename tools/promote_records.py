"""Promote records this machine measured into the committed ones, to be committed.

    python tools/promote_records.py [TASK ...] [--scales ci,smoke] [--dry-run]

A run stores what it calibrates in this machine's own store (outputs/records/grader_hidden/<task>/,
ai4ai.core.layout.local_records_dir), read on top of the committed records, so that the checkout
stays clean. This moves each local record of the given tasks and scales (all by default) into
grader_hidden/<task>/anchors.yaml, with its calibration detail file and the registry entry of the
brought model it was made with (models.yaml), by `records.store(commit=True)`, which also prunes
what no current version can use there; the moved record leaves the local store. Then `git add
grader_hidden/<task>` and commit.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ai4ai.core.layout import file_lock, local_records_dir
from ai4ai.core.task import list_tasks, load_task
from ai4ai.grading import records
from ai4ai.repo import registry


def promote(task_name: str, scales: list[str] | None, dry_run: bool = False) -> list[dict]:
    """Move the local records of one task (at `scales`, None: all) into its committed store; the keys moved."""
    task = load_task(task_name)
    local = local_records_dir(task.grader)
    if local is None or not records.anchors_path(local).exists():
        return []
    path = records.anchors_path(local)
    with file_lock(path.with_suffix(".lock")):
        recs = records._records(path)
        chosen = [r for r in recs if r["key"]["task"] == task_name and (scales is None or r["key"]["scale"] in scales)]
        if dry_run or not chosen:
            return [r["key"] for r in chosen]
        models = registry.entries(local)
        for r in chosen:
            dp = records.detail_path(local, r["key"])
            detail = json.loads(dp.read_text()) if dp.exists() else None
            # the brought model's entry first: storing the record prunes by the registry it finds
            mine = [
                e
                for e in models
                if r["key"]["task_version"] in {e["task_version"], *e.get("task_versions", {}).values()}
            ]
            if mine:
                committed = Path(task.grader)
                with file_lock(committed / registry.REGISTRY_LOCK):
                    have = registry.entries(committed)
                    new = [e for e in mine if e not in have]
                    if new:
                        registry._write_entries(committed, have + new)
            records.store(task.grader, r, detail=detail, commit=True)
            if dp.exists():
                dp.unlink()
        records._write_records(path, [r for r in recs if r not in chosen])
    return [r["key"] for r in chosen]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="*", help="tasks whose local records to promote (default: every task)")
    ap.add_argument("--scales", help="comma-separated scales (default: all)")
    ap.add_argument("--dry-run", action="store_true", help="list what would move; change nothing")
    a = ap.parse_args(argv)
    scales = a.scales.split(",") if a.scales else None
    total = 0
    for name in a.tasks or list_tasks():
        for k in promote(name, scales, a.dry_run):
            total += 1
            print(f"{name} {k['scale']:5s} {k['device_class']} {k['task_version']} torch {k['torch']}")
    verb = "would move" if a.dry_run else "moved"
    print(f"{total} record(s) {verb} into grader_hidden/; then: git add grader_hidden && git commit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
