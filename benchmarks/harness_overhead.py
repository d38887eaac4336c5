"""Harness overhead: `ai4ai.run ... agent=baseline` against the same training and evaluation
run directly (no sandbox, no workspace, no records), side by side in one run.

    python benchmarks/harness_overhead.py [--scale ci|smoke] [--repeats 1]

Prints both wall times and their ratio (goal: under 1.10). Needs anchors for the scale
(otherwise the harness run would include a calibration; the script refuses).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ai4ai.core.provenance import device_class, task_version, torch_minor  # noqa: E402
from ai4ai.core.task import load_task  # noqa: E402
from ai4ai.grading import records  # noqa: E402
from ai4ai.grading.context import Key  # noqa: E402

DIRECT_EVAL = """
import sys, json, math
sys.path.insert(0, {repo!r})
from pathlib import Path
import torch
from safetensors.torch import load_file
from model import build_model
from ai4ai.core.hidden import load_grader
torch.set_num_threads({threads})
g = load_grader('optimizer', Path({grader!r}))
sel, test = g.split('selection'), g.split('test')
best = None
for c in sorted(Path({out!r}).glob('ckpt_*.safetensors'))[-3:]:
    m = build_model({scale!r}); m.load_state_dict(load_file(str(c)), strict=False); m.eval()
    v = g.evaluate(m, sel)
    if best is None or v < best[0]:
        best = (v, m)
print('test', g.evaluate(best[1], test))
"""


def direct(task, scale: str, seeds: list[int], threads: int) -> float:
    t0 = time.monotonic()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    for seed in seeds:
        with tempfile.TemporaryDirectory() as out:
            subprocess.run(
                [
                    sys.executable,
                    "train.py",
                    "--out",
                    out,
                    "--seed",
                    str(seed),
                    "--scale",
                    scale,
                    "--budget-s",
                    "3600",
                    "--device",
                    "cpu",
                ],
                cwd=task.repo,
                env=env,
                check=True,
                capture_output=True,
            )
            code = DIRECT_EVAL.format(
                repo=str(task.repo), grader=str(task.grader), out=out, scale=scale, threads=threads
            )
            subprocess.run([sys.executable, "-c", code], cwd=out, env=env, check=True, capture_output=True)
    return time.monotonic() - t0


def harness(scale: str, outputs: str) -> float:
    t0 = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "ai4ai.run",
            "task=optimizer",
            "agent=baseline",
            f"scale={scale}",
            f"outputs={outputs}",
            "progress=false",
            "skip_done=false",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return time.monotonic() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scale", default="ci")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
    task = load_task("optimizer")
    b = task.scale(args.scale)
    threads = min(b.threads, os.cpu_count() or b.threads)
    key = Key("optimizer", args.scale, task_version(task), device_class("cpu", threads), torch_minor())
    if records.find(task.grader, key) is None:
        sys.exit(f"no anchors for {args.scale}: run python -m ai4ai.calibrate task=optimizer scale={args.scale} first")
    seeds = list(b.grader_seeds)
    print(f"scale {args.scale}, grader seeds {seeds}, {threads} threads")
    print(f"{'repeat':>6} {'direct_s':>9} {'harness_s':>10} {'ratio':>6}")
    for i in range(args.repeats):
        with tempfile.TemporaryDirectory() as outputs:
            d = direct(task, args.scale, seeds, threads)
            h = harness(args.scale, outputs)
        print(f"{i:>6} {d:>9.1f} {h:>10.1f} {h / d:>6.3f}", flush=True)


if __name__ == "__main__":
    main()
