"""The calibrated anchors a task's tests compare against (degenerate outputs must not beat the shipped
algorithm, the 0 anchor must be what the grader computes, ...).

Only records of the task's current version count: a record of an older version describes a repo
or grader that no longer exists. Prefer the record this machine would use (same device class and
torch minor, as `python -m ai4ai.run` looks it up); any record of the current version will do
as a comparison bar on another machine or torch.
"""

from __future__ import annotations

from ai4ai.core.provenance import task_version
from ai4ai.core.scoring import Anchors
from ai4ai.core.task import load_task
from ai4ai.grading import records as record_store
from ai4ai.grading.context import anchor_key


def records(task_name: str, scale: str = "smoke") -> list[dict]:
    """Every stored record (as written in anchors.yaml) of the task's current version at `scale`."""
    task = load_task(task_name)
    version = task_version(task, scale)
    return [
        r
        for r in record_store._records(record_store.anchors_path(task.grader))
        if r["key"]["scale"] == scale and r["key"]["task_version"] == version
    ]


def record(task_name: str, scale: str = "smoke") -> tuple[Anchors, float]:
    """(anchors, seed std of phi) of the task's current version at `scale`."""
    task = load_task(task_name)
    key = anchor_key(task, scale, "cpu", task.scale(scale).threads)
    rec = record_store.find(task.grader, key)
    if rec is not None:
        return rec.anchors, rec.phi_std
    for r in records(task_name, scale):
        a = r["anchors"]
        return Anchors(a["no_info"], a["baseline"], a["best"]), float(r["phi_std"])
    raise AssertionError(
        f"{task_name} has no {scale} anchors for its current version {task_version(task, scale)} (the repo, "
        f"grader or task config changed since calibration): run "
        f"`python -m ai4ai.calibrate task={task_name} scale={scale}`"
    )


def anchors(task_name: str, scale: str = "smoke") -> Anchors:
    return record(task_name, scale)[0]


def baseline(task_name: str, scale: str = "smoke") -> float:
    """The shipped algorithm's calibrated metric (raw units) at `scale`."""
    return anchors(task_name, scale).baseline
