"""Does serving a task's budget from the meter change what its shipped algorithm trains? And what
does the meter cost?

    python benchmarks/meter_equivalence.py [--tasks optimizer,sft] [--scale ci] [--seed 1000]

For each task with a `meter:` block, the shipped train.py runs twice on the same seed, outside any
sandbox: once on a full copy of the repo with the budget counted in-process (no AI4AI_METER), once
on a copy without the held files, its budget served by a real meter server (ai4ai.repo.meter.serving,
the function grading uses). It prints whether every checkpoint's tensors are identical, both wall
times and their ratio side by side, and the meter's calls. Identical weights are the evidence that
lets anchor records move to the metered task versions without recalibrating.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ai4ai.core.provenance import python_executable  # noqa: E402
from ai4ai.core.task import list_tasks, load_task  # noqa: E402
from ai4ai.repo.meter import read_report, remove_held, serving  # noqa: E402


def digests(out: Path) -> dict[str, str]:
    res = {}
    for p in sorted(out.glob("ckpt_*.safetensors")):
        state = load_file(str(p))
        h = hashlib.sha256()
        for k in sorted(state):
            h.update(k.encode() + state[k].numpy().tobytes())
        res[p.name] = h.hexdigest()[:16]
    return res


def train(task, repo: Path, out: Path, scale: str, seed: int, env: dict) -> float:
    argv = [
        python_executable(),
        "train.py",
        "--out",
        str(out),
        "--seed",
        str(seed),
        "--scale",
        scale,
        "--budget-s",
        "3600",
        "--device",
        "cpu",
    ]
    t0 = time.monotonic()
    r = subprocess.run(argv, cwd=repo, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{task.name}: train.py failed ({r.returncode}): {r.stderr[-1500:]}")
    return time.monotonic() - t0


def one(name: str, scale: str, seed: int, work: Path) -> dict:
    task = load_task(name)
    base_env = {
        "PATH": "/usr/bin:/bin",
        "OMP_NUM_THREADS": "2",
        "MKL_NUM_THREADS": "2",
        "OMP_WAIT_POLICY": "PASSIVE",
        "KMP_BLOCKTIME": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "HF_HUB_OFFLINE": "1",
    }
    plain, metered = work / name / "plain", work / name / "metered"
    for d in (plain, metered):
        shutil.copytree(task.repo, d, ignore=shutil.ignore_patterns("__pycache__"))
    remove_held(task, metered)
    t_plain = train(task, plain, work / name / "out_plain", scale, seed, base_env)
    with serving(task, scale, seed, "cpu", work / name / "meter.log", work / name / "meter.json", threads=2) as s:
        folder = s.mounts[0].host
        env = {**base_env, "AI4AI_METER": str(folder / "meter.sock"), "PYTHONPATH": str(folder / "lib")}
        t_metered = train(task, metered, work / name / "out_metered", scale, seed, env)
    a, b = digests(work / name / "out_plain"), digests(work / name / "out_metered")
    report = read_report(work / name / "meter.json") or {}
    return {
        "task": name,
        "identical": bool(a) and a == b,
        "checkpoints": len(a),
        "plain_s": round(t_plain, 1),
        "metered_s": round(t_metered, 1),
        "ratio": round(t_metered / t_plain, 2),
        "calls": report.get("calls"),
        "served": {k: v for k, v in report.items() if k != "calls"},
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="")
    ap.add_argument("--scale", default="ci")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    names = [t for t in (a.tasks.split(",") if a.tasks else list_tasks()) if load_task(t).meter is not None]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ai4ai-meq-") as tmp:
        for n in names:
            rows.append(one(n, a.scale, a.seed, Path(tmp)))
            r = rows[-1]
            print(
                f"{r['task']:16s} identical={r['identical']!s:5s} ckpts={r['checkpoints']:2d} "
                f"in-process {r['plain_s']:7.1f} s   metered {r['metered_s']:7.1f} s   ratio {r['ratio']:.2f}   "
                f"meter calls {r['calls']}   served {json.dumps(r['served'])}",
                flush=True,
            )
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=2))
    if not all(r["identical"] for r in rows):
        raise SystemExit("some task trained different weights through the meter")


if __name__ == "__main__":
    main()
