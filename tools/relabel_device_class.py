"""Give records of a task's current version the device class they were measured on.

    python tools/relabel_device_class.py TASK FROM_CLASS TO_CLASS [--scales ci,smoke]

A CPU's device class once named its model and threads only ("cpu:AMD EPYC:1"); it now names the
instruction set of torch's kernels too ("cpu:AMD EPYC:AVX512:1", provenance.cpu_capability). A
record measured before that is relabelled only after `python -m ai4ai.calibrate task=TASK scale=S
verify=true` reproduced its seeds on a host of TO_CLASS (run with ATEN_CPU_CAPABILITY=avx2 to
reproduce an AVX2 host's on an AVX-512 one). The record's anchors, seeds and timings stay; its
provenance says `relabelled_from`. A record already present for (version, TO_CLASS) is kept.
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
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--scales", default="ci,smoke")
    a = ap.parse_args()
    task = load_task(a.task)
    path = records.anchors_path(task.grader)
    recs = (yaml.safe_load(path.read_text()) or {}).get("records", [])
    moved = 0
    for r in recs:
        k = r["key"]
        if (
            k["device_class"] != a.old
            or k["scale"] not in a.scales.split(",")
            or k["task_version"] != task_version(task, k["scale"])
        ):
            continue
        if any(o["key"] == {**k, "device_class": a.new} for o in recs):
            print(f"{a.task} {k['scale']}: a {a.new} record exists; kept")
            continue
        new = json.loads(json.dumps(r))
        new["key"]["device_class"] = a.new
        new.setdefault("provenance", {})["relabelled_from"] = a.old
        records.store(task.grader, new, replaces=k, prune=False, commit=True)  # a relabelling removes nothing else
        moved += 1
        print(f"{a.task} {k['scale']}: {a.old} -> {a.new}")
    print(f"{a.task}: {moved} relabelled")


if __name__ == "__main__":
    main()
