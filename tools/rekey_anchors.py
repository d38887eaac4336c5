"""Move anchor records of an older task version to the current one, without recalibrating.

    python tools/rekey_anchors.py TASK OLD_VERSION [OLD_VERSION ...] [--scales ci,smoke]
                                       [--device-class CLASS]

Only for a change that is shown not to move what the shipped algorithm trains (e.g. identical
weights from benchmarks/meter_equivalence.py or benchmarks/ci_sweep.py --compare): the record's
anchors, seeds and timings stay as measured, its key gets the current task_version, and its
provenance says `rekeyed_from`. A record already present for the current version is kept. A brought
model's record (provenance.base_version) is not moved: its version is not the repo's. Nothing is
pruned here (records.store(prune=False)): records of old versions that a later call may still move
stay until `python tools/prune_records.py`.
Afterwards `python -m ai4ai.calibrate task=TASK scale=ci verify=true` retrains the record's seeds and
checks they reproduce (sft's ci record was once carried across a change that moved it: baseline
0.1819 stored where the code gave 0.1930).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ai4ai.core.provenance import task_version  # noqa: E402
from ai4ai.core.task import load_task  # noqa: E402
from ai4ai.grading import (
    records,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("old", nargs="+")
    ap.add_argument("--scales", default="ci,smoke")
    ap.add_argument(
        "--device-class",
        help="only this device class's records (where the change is shown "
        "not to move what the shipped algorithm trains on that class alone)",
    )
    a = ap.parse_args()
    task = load_task(a.task)
    scales = a.scales.split(",")
    path = records.anchors_path(task.grader)
    recs = (yaml.safe_load(path.read_text()) or {}).get("records", [])
    have = {(r["key"]["scale"], r["key"]["task_version"], r["key"]["device_class"]) for r in recs}
    moved = 0
    for r in recs:
        k = r["key"]
        if k["task_version"] not in a.old or k["scale"] not in scales:
            continue
        if a.device_class and k["device_class"] != a.device_class:
            continue
        if "base_version" in (r.get("provenance") or {}):
            print(
                f"{a.task} {k['scale']} {k['device_class']}: a brought model's record ({k['task_version']}); not moved"
            )
            continue
        new = task_version(task, k["scale"])
        if new == k["task_version"] or (k["scale"], new, k["device_class"]) in have:
            print(f"{a.task} {k['scale']} {k['device_class']}: a record for {new} exists; kept")
            continue
        r = json.loads(json.dumps(r))
        r.setdefault("provenance", {})["rekeyed_from"] = k["task_version"]
        r["key"]["task_version"] = new
        records.store(task.grader, r, prune=False, commit=True)
        have.add((k["scale"], new, k["device_class"]))
        moved += 1
        print(f"{a.task} {k['scale']} {k['device_class']}: {k['task_version']} -> {new}")
    print(f"{a.task}: {moved} re-keyed")
    if moved:
        print(f"check them: python -m ai4ai.calibrate task={a.task} scale=<scale> verify=true")


if __name__ == "__main__":
    main()
