"""Commit a task's graded-instance prepared models for CPU scales beside its hidden grader.

    python tools/commit_graded_artifacts.py TASK SCALE [SCALE ...]

A task graded on a fresh instance (data.grading) whose prepared models depend on that instance
(data.grading_artifacts: sft's base model, distillation's teacher) gets them from the repo's own
prepare step. On a CPU that step rounds by the host's kernels, so two hosts make different models and
the shipped run's score moves with the machine. This script runs the prepare step here (the same path
a grading takes, preparing.graded_artifacts with committed=False) and copies what it made into
<grader>/prepared/<SCALE>/ with a SHA256SUMS; gradings at SCALE then use those bytes on every host.

The files move the task version (they are part of the hidden grader): recalibrate SCALE afterwards,
or, where the committed bytes are the ones this host class already graded with, re-key only this
class's records (tools/rekey_anchors.py --device-class).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ai4ai.core.provenance import device_class, task_version  # noqa: E402
from ai4ai.core.task import load_task  # noqa: E402
from ai4ai.repo import preparing  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("task")
    ap.add_argument("scales", nargs="+", choices=["ci", "smoke"])
    a = ap.parse_args()
    task = load_task(a.task)
    if not task.grading_artifacts or task.artifacts is None:
        raise SystemExit(f"{a.task} has no graded-instance prepared models (data.grading_artifacts): nothing to commit")
    for scale in a.scales:
        before = task_version(task, scale)
        made = preparing.graded_artifacts(task, scale, "cpu", committed=False)
        dest = Path(task.grader) / "prepared" / scale
        if dest.exists():
            shutil.rmtree(dest)
        shutil.copytree(made, dest, ignore=shutil.ignore_patterns(".complete"))  # the files and their SHA256SUMS
        sums = preparing.read_sums(dest)
        problems = preparing.verify(dest)
        if problems:
            raise SystemExit(f"{dest}: {problems}")
        for rel, digest in sums.items():
            print(f"{a.task} {scale}: {rel} {digest[:16]} (made on {device_class('cpu', 1)})")
        print(
            f"{a.task} {scale}: task version {before} -> {task_version(task, scale)}; recalibrate "
            f"(python -m ai4ai.calibrate task={a.task} scale={scale})"
        )


if __name__ == "__main__":
    main()
