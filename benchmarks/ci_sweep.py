"""Grade the shipped algorithm of every task at `ci` with one fixed run secret, and print a table.

    python benchmarks/ci_sweep.py OUT_DIR [--nonce HEX] [--tasks optimizer,sft] [--scale ci]
    python benchmarks/ci_sweep.py --compare OLD_OUT NEW_OUT

The run secret (.harness/nonce) decides every training process's --seed, so two checkouts swept
with the same nonce train on the same seeds: a change to the harness that keeps behaviour gives
the same raw metric and score per task (up to the CPU's own float nondeterminism, which the
table shows). It runs `python -m ai4ai.grade` of whichever checkout it lies in, so it also works
on an older commit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TASKS = (
    "optimizer",
    "sft",
    "agentic_rl",
    "distillation",
    "reward_model",
    "dpo",
    "diffusion_rl",
    "unlearning",
    "graph_diffusion",
    "pruning",
)


def sweep(out: Path, nonce: str, tasks: list[str], scale: str) -> dict:
    rows = {}
    for t in tasks:
        d = out / t
        (d / ".harness").mkdir(parents=True, exist_ok=True)
        (d / ".harness" / "nonce").write_text(nonce)
        t0 = time.monotonic()
        r = subprocess.run(
            [
                sys.executable,
                "-m",
                "ai4ai.grade",
                f"task={t}",
                f"scale={scale}",
                "progress=false",
                f"results_db={out / 'results.sqlite'}",
                f"hydra.run.dir={d}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        res = json.loads((d / "result.json").read_text()) if (d / "result.json").exists() else {}
        rows[t] = {
            "status": res.get("status"),
            "raw": (res.get("raw") or {}).get("per_seed"),
            "score": res.get("score"),
            "training_seeds": [c.get("training_seed") for c in (res.get("checkpoints") or {}).get("per_seed", [])],
            "weights_sha256": [c.get("weights_sha256") for c in (res.get("checkpoints") or {}).get("per_seed", [])],
            "wall_s": round(time.monotonic() - t0, 1),
            "exit": r.returncode,
        }
        print(
            f"{t:16s} {rows[t]['status']}  raw {rows[t]['raw']}  score {rows[t]['score']}  ({rows[t]['wall_s']} s)",
            flush=True,
        )
        if r.returncode != 0:
            print(r.stdout[-2000:] + r.stderr[-2000:])
    (out / "sweep.json").write_text(json.dumps(rows, indent=1))
    return rows


def compare(old: Path, new: Path) -> int:
    a, b = (json.loads((p / "sweep.json").read_text()) for p in (old, new))
    print(
        "| task | old raw | new raw | old score | new score | same weights, raw and score |\n|---|---|---|---|---|---|"
    )
    bad = 0
    for t in a:
        same = all(a[t][k] == b.get(t, {}).get(k) for k in ("raw", "score", "weights_sha256"))
        bad += not same
        print(
            f"| {t} | {a[t]['raw']} | {b.get(t, {}).get('raw')} | {a[t]['score']} | {b.get(t, {}).get('score')} | "
            f"{'yes' if same else 'NO'} |"
        )
    return 1 if bad else 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?")
    ap.add_argument("--nonce", default="0123456789abcdef0123456789abcdef")
    ap.add_argument("--tasks", default=",".join(TASKS))
    ap.add_argument("--scale", default="ci")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    args = ap.parse_args()
    if args.compare:
        sys.exit(compare(Path(args.compare[0]), Path(args.compare[1])))
    if not args.out:
        ap.error("give OUT_DIR (or --compare OLD NEW)")
    sweep(Path(args.out).resolve(), args.nonce, args.tasks.split(","), args.scale)


if __name__ == "__main__":
    main()
