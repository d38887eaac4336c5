"""Anchors and their calibration records: grader_hidden/<task>/anchors.yaml.

A record is keyed by (task, scale, task version, device class, torch minor version). DESIGN.md
keys anchors by the global benchmark version; the task version (provenance.task_version) is
that hash restricted to what this task depends on, so adding an eleventh task does not void
the anchors of the other ten.
At the metered scales (ci, smoke) the budget is counted in data served, not seconds, so a
record from another CPU with the same thread count is accepted when no exact one exists;
the result says so (`provenance.match: metered-cpu`). At `full` only an exact match counts.
"""
from __future__ import annotations

import fcntl
from dataclasses import dataclass
from pathlib import Path

import yaml

from .scoring import Anchors

METERED_SCALES = ("ci", "smoke")


@dataclass(frozen=True)
class Key:
    task: str
    scale: str
    task_version: str
    device_class: str
    torch: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Record:
    key: Key
    anchors: Anchors
    validation: Anchors | None
    phi_std: float
    train_wall_s: float
    match: str                 # exact | metered-cpu
    raw: dict                  # the whole stored record, for provenance
    train_cpu_s: float | None = None    # max CPU seconds of a shipped seed (records before CPU accounting: None)


def anchors_path(grader_dir: Path) -> Path:
    return Path(grader_dir) / "anchors.yaml"


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return (yaml.safe_load(path.read_text()) or {}).get("records", [])


def _threads(device_class: str) -> str:
    return device_class.rsplit(":", 1)[-1]


def find(grader_dir: Path, key: Key) -> Record | None:
    exact, loose = None, None
    for r in _records(anchors_path(grader_dir)):
        k = r["key"]
        if (k["task"], k["scale"], k["task_version"], k["torch"]) != (key.task, key.scale, key.task_version, key.torch):
            continue
        if k["device_class"] == key.device_class:
            exact = r
        elif (key.scale in METERED_SCALES and k["device_class"].startswith("cpu:") and key.device_class.startswith("cpu:")
              and _threads(k["device_class"]) == _threads(key.device_class)):
            loose = r
    r, match = (exact, "exact") if exact else (loose, "metered-cpu") if loose else (None, None)
    if r is None:
        return None
    a = r["anchors"]
    v = r.get("validation")
    return Record(key=Key(**r["key"]), anchors=Anchors(a["no_info"], a["baseline"], a["best"]),
                  # a numeric metric.best is the same on every split (records before that was stored say None)
                  validation=Anchors(v["no_info"], v["baseline"], a["best"] if v["best"] is None else v["best"])
                  if v else None,
                  phi_std=float(r["phi_std"]), train_wall_s=float(r["train_wall_s"]["max"]), match=match, raw=r,
                  train_cpu_s=float(r["train_cpu_s"]["max"]) if r.get("train_cpu_s") else None)


def train_walls(grader_dir: Path, task: str, scale: str) -> list[float]:
    """Mean shipped training wall time of every record of this task and scale, on any key."""
    return [float(r["train_wall_s"]["mean"]) for r in _records(anchors_path(grader_dir))
            if r["key"]["task"] == task and r["key"]["scale"] == scale]


def store(grader_dir: Path, record: dict) -> Path:
    """Add or replace the record with the same key; safe against concurrent writers."""
    path = anchors_path(grader_dir)
    # The lock file stays: unlinking it would let a writer that opened the old file and one that
    # creates a new one each hold "the" lock at once, and one's records would overwrite the other's.
    lock = path.with_suffix(".lock")
    with open(lock, "a") as lf:
        fcntl.flock(lf, fcntl.LOCK_EX)
        recs = [r for r in _records(path) if r["key"] != record["key"]]
        recs.append(record)
        recs.sort(key=lambda r: (r["key"]["scale"], r["key"]["device_class"], r["key"]["task_version"]))
        tmp = path.with_suffix(".tmp")
        tmp.write_text("# Written by `python -m ai4ai.calibrate`; one record per (task, scale, task version,\n"
                       "# device class, torch minor). Recompute any of them and compare.\n"
                       + yaml.safe_dump({"records": recs}, sort_keys=False, width=120))
        tmp.replace(path)
    return path
