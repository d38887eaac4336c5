"""Remove the anchor records, calibration detail files and brought-model registry entries that no
current version of their task can use.

    python tools/prune_records.py [TASK ...] [--dry-run]

For each task (all by default): every scale's current base version (the task's version without a
brought model, provenance.task_version at that scale), the scale-less one and the frozen repo's
tree hash are computed from the checkout as it is, and `ai4ai.grading.records.prune` applies the
rule `records.store` applies at each store (its docstring says it whole): a record of another
base version at a scale of the task, or at a scale the task no longer has, goes, on any device
class and torch; a brought model's record goes when the base version it carries is stale; a
detail file goes with its record (one whose calibration a kept record has, re-keyed or
relabelled since, stays). Nothing else of grader_hidden/ is touched. Git keeps what it removes.
This machine's own store of records (outputs/records/, layout.local_records_dir) is pruned the same way.

Re-key first (tools/rekey_anchors.py): records of an old version that a change did not move
are carried to the current one there, and are then current here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ai4ai.core.provenance import task_version, tree_sha256
from ai4ai.core.task import list_tasks, load_task
from ai4ai.grading import records


def scales_in_records(grader: Path, task: str) -> set[str]:
    """The scales this task's stored records and detail files name (a scale the config dropped included)."""
    out = {r["key"]["scale"] for r in records._records(records.anchors_path(grader)) if r["key"]["task"] == task}
    out |= {f.name.split("__", 1)[0] for f in (grader / "calibration").glob("*__*.json")}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tasks", nargs="*", help="tasks to prune (default: every task)")
    ap.add_argument("--dry-run", action="store_true", help="list what would be removed; change nothing")
    a = ap.parse_args(argv)
    total = {"records": 0, "details": 0, "models": 0}
    for name, task, store in [
        (n, t, d) for n in a.tasks or list_tasks() for t in [load_task(n)] for d in records.stores(t.grader)
    ]:
        if not records.anchors_path(store).exists() and not (store / "calibration").exists():
            continue  # no local store yet
        current = {s: None for s in scales_in_records(store, name)}
        current.update({s: task_version(task, s) for s in task.scales})
        res = records.prune(
            store, name, current, whole=task_version(task), frozen=tree_sha256(task.repo)[:16], dry_run=a.dry_run
        )
        verb = "would remove" if a.dry_run else "removed"
        print(
            f"{name}{'' if store == task.grader else ' (this machine: ' + str(store) + ')'}: {verb} {len(res.records)} record(s), {len(res.details)} detail file(s), "
            f"{len(res.models)} registry entr{'y' if len(res.models) == 1 else 'ies'} "
            f"(current: {', '.join(f'{s} {v}' for s, v in sorted(current.items()) if v)})"
        )
        for k in res.records:
            print(f"  record  {k['scale']:5s} {k['task_version']} {k['device_class']} torch {k['torch']}")
        for f in res.details:
            print(f"  detail  {f.relative_to(store)}")
        for e in res.models:
            print(f"  model   {e.get('task_version')} {e.get('path')}")
        total["records"] += len(res.records)
        total["details"] += len(res.details)
        total["models"] += len(res.models)
    print(
        f"total: {total['records']} record(s), {total['details']} detail file(s), {total['models']} registry "
        f"entries {'would go' if a.dry_run else 'removed'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
