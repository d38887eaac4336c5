"""Where a run's wall clock goes: the baseline run README's first command makes, split into what
happens before grading, each seed's process start-up, its training loop, its selection and
evaluation, and the gaps, against the seeds' training loops alone.

    python benchmarks/run_overhead.py [--task optimizer] [--scale smoke] [--run DIR]

Without --run it runs `python -m ai4ai.run task=T scale=S agent=baseline` in a fresh folder and
times it from outside; with --run it splits an existing run's folder (the command's own wall clock
then unknown: the split starts at the run's first file). Run it on an idle machine: the figures
move several-fold with load on a shared CPU. The goal (issue: a first run that trains) is a
ratio of the whole to the training loops of at most 1.15.

The training loop's time is the last `elapsed Ns` its train.log prints (every shipped train.py
prints one); a seed's process time is its result's train_s (the sandboxed process from start to
exit); its selection and evaluation run from train.log's last write to its eval/eval_result.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ELAPSED = re.compile(r"elapsed ([0-9.]+)s")


def loop_s(log: Path) -> float | None:
    found = ELAPSED.findall(log.read_text(errors="replace")) if log.exists() else []
    return float(found[-1]) if found else None


def split(run: Path, started: float | None, ended: float | None) -> dict:
    result = json.loads((run / "result.json").read_text())
    seeds = {s["seed"]: s for s in result["checkpoints"]["per_seed"]}
    rows = []
    for d in sorted((run / "grade").glob("seed_*"), key=lambda p: int(p.name.split("_")[1])):
        n = int(d.name.split("_")[1])
        log, ev = d / "train.log", d / "eval" / "eval_result.json"
        train_s = float(seeds.get(n, {}).get("train_s") or 0.0)
        loop = loop_s(log)
        end_train = log.stat().st_mtime if log.exists() else None
        rows.append(
            dict(
                seed=n,
                start=end_train - train_s if end_train else None,
                process_s=train_s,
                loop_s=loop,
                startup_s=train_s - loop if loop is not None else None,
                eval_s=ev.stat().st_mtime - end_train if ev.exists() and end_train else None,
                end=ev.stat().st_mtime if ev.exists() else end_train,
            )
        )
    first = min((r["start"] for r in rows if r["start"]), default=None)
    t0 = started if started is not None else min(p.stat().st_mtime for p in run.iterdir())
    t1 = ended if ended is not None else (run / "result.json").stat().st_mtime
    return dict(rows=rows, before_s=(first - t0) if first else None, total_s=t1 - t0, t0=t0, t1=t1)


def show(s: dict) -> float | None:
    print(f"before grading (start-up, workspace, agent, anchors, copies): {s['before_s']:.1f} s")
    prev_end = None
    for r in s["rows"]:
        gap = (r["start"] - prev_end) if prev_end and r["start"] else None

        def f(v):
            return f"{v:6.1f}" if v is not None else "     ?"

        print(
            f"seed {r['seed']}: gap {f(gap)} s  process start-up {f(r['startup_s'])} s  training loop {f(r['loop_s'])} s"
            f"  selection+evaluation {f(r['eval_s'])} s"
        )
        prev_end = r["end"]
    after = s["t1"] - prev_end if prev_end else None
    loops = sum(r["loop_s"] or 0.0 for r in s["rows"])
    print(f"after the last seed (scoring, result, database): {after:.1f} s" if after is not None else "")
    print(f"whole run {s['total_s']:.1f} s; training loops {loops:.1f} s")
    if loops:
        ratio = s["total_s"] / loops
        print(f"ratio whole / training loops: {ratio:.2f} (goal: at most 1.15)")
        return ratio
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--task", default="optimizer")
    ap.add_argument("--scale", default="smoke")
    ap.add_argument("--run", help="split this existing run folder instead of making one")
    a = ap.parse_args(argv)
    if a.run:
        run, started, ended = Path(a.run), None, None
        if not (run / "result.json").exists():
            print(f"run_overhead: {run} holds no result.json: pass a finished run's folder", file=sys.stderr)
            return 2
    else:
        run = Path(tempfile.mkdtemp(prefix="ai4ai_overhead_")) / "run"
        cmd = [
            sys.executable,
            "-m",
            "ai4ai.run",
            f"task={a.task}",
            f"scale={a.scale}",
            "agent=baseline",
            f"hydra.run.dir={run}",
            f"outputs={run.parent}",
        ]
        print("$", " ".join(cmd[1:]), flush=True)
        started = time.time()
        subprocess.run(cmd, cwd=ROOT, check=True)
        ended = time.time()
    show(split(run, started, ended))
    return 0


if __name__ == "__main__":
    sys.exit(main())
