"""Anchor records: where they are stored, how one is found for a run's key, and how storing one
keeps the store current.

Records live in grader_hidden/<task>/anchors.yaml, keyed by (task, scale, task version, device
class, torch minor version) (context.Key), each with a calibration detail file in
grader_hidden/<task>/calibration/. Those are the committed records, read-only at run time: what a
machine measures is stored in its own store (layout.local_records_dir: outputs/records/grader_hidden/
<task>/, same files), read on top of the committed ones (a local record replaces the committed one of
its key), so that a run leaves the checkout as it was. `commit=True` (tools/promote_records.py, the
maintenance tools) writes the committed store. At the metered scales (ci, smoke) a record from another CPU with
the same thread count is accepted when no exact one exists (`match: metered-cpu`); at `full` only
an exact match counts.

Records stay current: storing one removes, under the same lock, the records of its task and scale
(any device class) that no current version can use, their calibration detail files and the stale
brought-model registry entries beside them (`store` says the rule, brought models included);
tools/prune_records.py applies it to every scale at once (`prune`). `ai4ai.grading.anchors`
calibrates the records and derives a run's caps from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import yaml

from ai4ai.core.layout import file_lock, local_records_dir, write_json
from ai4ai.core.scoring import Anchors
from ai4ai.grading.context import Key
from ai4ai.repo import registry

METERED_SCALES = ("ci", "smoke")


@dataclass(frozen=True)
class Record:
    key: Key
    anchors: Anchors
    validation: Anchors | None
    phi_std: float
    train_wall_s: float
    match: str  # exact | metered-cpu
    raw: dict  # the whole stored record, for provenance
    train_cpu_s: float | None = None  # max CPU seconds of a shipped seed (records before CPU accounting: None)


def anchors_path(grader_dir: Path) -> Path:
    return Path(grader_dir) / "anchors.yaml"


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return (yaml.safe_load(path.read_text()) or {}).get("records", [])


def stores(grader_dir: Path) -> list[Path]:
    """The folders holding a grader folder's records, in reading order: this machine's own store
    first (when the grader folder is the checkout's), then the grader folder (the committed records)."""
    local = local_records_dir(grader_dir)
    return [local, Path(grader_dir)] if local is not None else [Path(grader_dir)]


def store_dir(grader_dir: Path, commit: bool = False) -> Path:
    """Where a record is written: this machine's own store, or with `commit` the grader folder itself."""
    local = None if commit else local_records_dir(grader_dir)
    return local if local is not None else Path(grader_dir)


def all_records(grader_dir: Path) -> list[dict]:
    """Every record of a grader folder as a run reads them: this machine's, then the committed ones
    whose key it has no record of."""
    seen, out = set(), []
    for d in stores(grader_dir):
        for r in _records(anchors_path(d)):
            k = json.dumps(r["key"], sort_keys=True)
            if k not in seen:
                seen.add(k)
                out.append(r)
    return out


def _threads(device_class: str) -> str:
    return device_class.rsplit(":", 1)[-1]


def _model(device_class: str) -> str:
    return device_class.split(":")[1]


def find(grader_dir: Path, key: Key) -> Record | None:
    exact, loose = None, None
    for r in all_records(grader_dir):
        k = r["key"]
        if (k["task"], k["scale"], k["task_version"], k["torch"]) != (key.task, key.scale, key.task_version, key.torch):
            continue
        if k["device_class"] == key.device_class:
            exact = r
        elif (
            key.scale in METERED_SCALES
            and k["device_class"].startswith("cpu:")
            and key.device_class.startswith("cpu:")
            and _threads(k["device_class"]) == _threads(key.device_class)
        ):
            # of another class's records, one of the same CPU model (another instruction set, or a
            # label from before the instruction set was part of it) comes nearest
            if loose is None or _model(k["device_class"]) == _model(key.device_class):
                loose = r
    r, match = (exact, "exact") if exact else (loose, "metered-cpu") if loose else (None, None)
    if r is None:
        return None
    a = r["anchors"]
    v = r.get("validation")
    return Record(
        key=Key(**r["key"]),
        anchors=Anchors(a["no_info"], a["baseline"], a["best"]),
        # a numeric metric.best is the same on every split (records before that was stored say None)
        validation=Anchors(v["no_info"], v["baseline"], a["best"] if v["best"] is None else v["best"]) if v else None,
        phi_std=float(r["phi_std"]),
        train_wall_s=float(r["train_wall_s"]["max"]),
        match=match,
        raw=r,
        train_cpu_s=float(r["train_cpu_s"]["max"]) if r.get("train_cpu_s") else None,
    )


def train_walls(grader_dir: Path, task: str, scale: str) -> list[float]:
    """Mean shipped training wall time of every record of this task and scale, on any key."""
    return [
        float(r["train_wall_s"]["mean"])
        for r in all_records(grader_dir)
        if r["key"]["task"] == task and r["key"]["scale"] == scale
    ]


def detail_path(grader_dir: Path, key: dict) -> Path:
    """The calibration detail file of a record's key (the record and its seeds' whole results)."""
    slug = key["device_class"].replace(":", "_").replace(" ", "_").replace("/", "_")
    return Path(grader_dir) / "calibration" / f"{key['scale']}__{slug}__{key['task_version']}.json"


def store(
    grader_dir: Path,
    record: dict,
    replaces: dict | None = None,
    detail: dict | None = None,
    prune: bool = True,
    commit: bool = False,
) -> Path:
    """Add or replace the record with the same key (and the one keyed `replaces`, when given: a record
    relabelled to another key), with its calibration detail file when `detail` is given (the record
    and `detail`, in calibration/, detail_path), and remove what no current version can use; all
    under one lock (anchors.lock), safe against concurrent writers.

    Records that stay current: the record stored is current (it was measured on the code as it is),
    and so defines, for its task and scale, the current base version: provenance.base_version, the
    task's version without a brought model (record_base). Storing it removes the records of the same
    task and scale, on any device class and torch, whose base version is another (stale), their
    detail files, and the registry entries of brought models (models.yaml) that it shows stale
    (registry.stale_entry); records of other scales or tasks are left. A brought model's record
    carries its base version in its provenance (its own version folds in the model and the repo
    derived for it, which the repo alone cannot recompute): it stays while that base version is
    current, whatever model it is. A record without that field (every record before it) is judged by
    its own version, as the repo's own model's; except while the registry keeps an entry from before
    the field (registry.is_legacy): then such a record might be a brought model's, and only a
    record of the current version is told apart; the rest stay. A detail file is judged like its
    record, and stays too while a kept record has its calibration (provenance calibrated_at and host:
    the record it details, re-keyed or relabelled since). `prune=False` (tools/rekey_anchors.py,
    relabel_device_class.py, which move records of other versions one by one) stores only;
    tools/prune_records.py prunes with every scale's current version (prune), by the same rule.

    Where: this machine's own store (store_dir), or with `commit` the grader folder's committed one;
    pruning touches only the store written."""
    grader_dir = store_dir(grader_dir, commit)
    grader_dir.mkdir(parents=True, exist_ok=True)
    path = anchors_path(grader_dir)
    with file_lock(path.with_suffix(".lock")):
        recs = [r for r in _records(path) if r["key"] not in (record["key"], replaces)]
        recs.append(record)
        _write_records(path, recs)
        if detail is not None:
            dp = detail_path(grader_dir, record["key"])
            dp.parent.mkdir(exist_ok=True)
            write_json(dp, {**record, **detail})
        if prune:
            k = record["key"]
            _prune(Path(grader_dir), k["task"], {k["scale"]: record_base(record)}, None, None, False)
    return path


def _write_records(path: Path, recs: list[dict]) -> None:
    recs = sorted(recs, key=lambda r: (r["key"]["scale"], r["key"]["device_class"], r["key"]["task_version"]))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(
        "# Written by `python -m ai4ai.calibrate`; one record per (task, scale, task version,\n"
        "# device class, torch minor). Recompute any of them and compare.\n"
        + yaml.safe_dump({"records": recs}, sort_keys=False, width=120)
    )
    tmp.replace(path)


def record_base(record: dict) -> str:
    """A record's base version (provenance.base_version): stored in its provenance for a brought model;
    its own task version for the repo's own model."""
    base = (record.get("provenance") or {}).get("base_version")
    return base if base is not None else record["key"]["task_version"]


def stale(record: dict, task: str, current: dict, legacy_models: bool = False) -> bool:
    """Whether no current version can use `record` (store's rule): of `task`, at a scale of `current`
    (scale -> the current base version; None: the task has no such scale any more), and of another
    base version. `legacy_models`: the registry keeps a legacy entry (registry.is_legacy); a record
    without a base version that is not of the current version may then be a brought model's: it stays."""
    k = record["key"]
    if k["task"] != task or k["scale"] not in current:
        return False
    now = current[k["scale"]]
    if now is None:
        return True
    if "base_version" in (record.get("provenance") or {}):
        return record["provenance"]["base_version"] != now
    return k["task_version"] != now and not legacy_models


def _calibration(record: dict) -> tuple:
    p = record.get("provenance") or {}
    return (record["key"]["scale"], p.get("calibrated_at"), p.get("host"))


@dataclass(frozen=True)
class Pruned:
    records: list  # keys of the anchors.yaml records removed
    details: list  # calibration detail files removed
    models: list  # models.yaml entries removed


def prune(
    grader_dir: Path,
    task: str,
    current: dict,
    whole: str | None = None,
    frozen: str | None = None,
    dry_run: bool = False,
) -> Pruned:
    """Remove (dry_run: only list) what no current version can use, by store's rule, given every scale's
    current base version (`current`, scale -> version; a scale the task no longer has -> None), and
    for the registry its scale-less version `whole` and the frozen repo's hash `frozen`
    (tools/prune_records.py)."""
    with file_lock(anchors_path(grader_dir).with_suffix(".lock")):
        return _prune(Path(grader_dir), task, current, whole, frozen, dry_run)


def _prune(grader_dir: Path, task: str, current: dict, whole, frozen, dry_run: bool) -> Pruned:
    """prune's work (and store's), under anchors.lock, which the caller holds."""
    models = registry.prune_registry(grader_dir, current, whole, frozen, dry_run)
    # a registry entry from before base_version that stays: a record without one may be its model's
    legacy = any(registry.is_legacy(e) for e in registry.entries(grader_dir) if e not in models)
    path = anchors_path(grader_dir)
    recs = _records(path)
    gone = [r for r in recs if stale(r, task, current, legacy)]
    kept = [r for r in recs if r not in gone]
    if gone and not dry_run:
        _write_records(path, kept)
    calibrated = {_calibration(r) for r in kept if (r.get("provenance") or {}).get("calibrated_at")}
    details = []
    for f in sorted((Path(grader_dir) / "calibration").glob("*.json")):
        try:
            d = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        k = d.get("key") if isinstance(d, dict) else None
        if not (isinstance(k, dict) and {"task", "scale", "task_version"} <= k.keys()):
            continue  # not a detail file of this store: left as it is
        if stale(d, task, current, legacy) and _calibration(d) not in calibrated:
            details.append(f)
    if not dry_run:
        for f in details:
            f.unlink()
    return Pruned(records=[r["key"] for r in gone], details=details, models=models)
