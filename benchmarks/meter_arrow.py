"""What serving the largest training split costs the meter: the optimizer task's `full` split
(4,194,304 sequences of 128 symbols, 512 MiB) served by the repo's own `data.TrainingSplit` from
the raw file the CPU tiers commit (`train_full.u8`, read whole and widened to int64) and from the
`datasets` folder the GPU tiers now prepare (`train_full/`, memory-mapped), side by side.

    python benchmarks/meter_arrow.py [--sequences 4194304] [--batch 32] [--gets 2000]

Each format runs in a fresh process, as the meter server does: the time to construct the split
(checksums included), the resident memory after it and at the peak, and the rate of `get` over
random batches of indices. The rows are random bytes of the full split's size (what is served does
not depend on their values). CPU figures, on a shared machine: compare the two columns of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ai4ai.core.hidden import ArrowSplit, write_splits  # noqa: E402
from ai4ai.repo.preparing import write_sums  # noqa: E402

SEQ_LEN = 128

PROBE = r"""
import json, resource, sys, time
import psutil, torch
t0 = time.perf_counter()
import data
split = data.TrainingSplit("full")
built = time.perf_counter() - t0
rss_built = psutil.Process().memory_info().rss
split.budget = 1 << 62                       # the budget is not what is measured here
rng = torch.Generator().manual_seed(0)
batch, gets = int(sys.argv[1]), int(sys.argv[2])
idx = [torch.randint(0, len(split), (batch,), generator=rng) for _ in range(gets)]
first = split.get(idx[0])
t1 = time.perf_counter()
for i in idx:
    rows = split.get(i)
served = time.perf_counter() - t1
print("RESULT " + json.dumps({
    "construct_s": built, "rss_after_construct_mib": rss_built / 2**20,
    "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "gets_per_s": gets / served, "sequences_per_s": gets * batch / served,
    "dtype": str(rows.dtype), "shape": list(rows.shape), "checksum": int(first.sum()),
}))
"""


def measure(data_dir: Path, batch: int, gets: int) -> dict:
    env = {**os.environ, "OPTIMIZER_DATA_DIR": str(data_dir), "PYTHONPATH": str(ROOT / "repos_frozen" / "optimizer")}
    env.pop("AI4AI_METER", None)
    r = subprocess.run(
        [sys.executable, "-c", PROBE, str(batch), str(gets)],
        cwd=ROOT / "repos_frozen" / "optimizer",
        env=env,
        capture_output=True,
        text=True,
    )
    if r.returncode != 0:
        raise SystemExit(f"the probe failed in {data_dir}:\n{r.stderr[-2000:]}")
    return json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequences", type=int, default=4_194_304, help="rows of the split (full: 4,194,304)")
    ap.add_argument("--batch", type=int, default=32, help="sequences a get (the shipped train.py's batch)")
    ap.add_argument("--gets", type=int, default=2000)
    a = ap.parse_args()
    tokens = np.random.default_rng(0).integers(0, 256, (a.sequences, SEQ_LEN), dtype=np.uint8)
    with tempfile.TemporaryDirectory(prefix="meter-arrow-") as tmp:
        raw, arrow = Path(tmp, "raw"), Path(tmp, "arrow")
        write_sums(raw, write_splits(raw, {"train_full.u8": tokens}))
        write_sums(arrow, write_splits(arrow, {"train_full": ArrowSplit({"tokens": tokens})}))
        del tokens
        size = sum(p.stat().st_size for p in arrow.rglob("*.arrow")) / 2**20
        res = {"raw .u8": measure(raw, a.batch, a.gets), "datasets folder": measure(arrow, a.batch, a.gets)}
    if len({r["checksum"] for r in res.values()}) != 1:
        raise SystemExit(f"the two formats served different rows: {res}")
    print(f"optimizer full split: {a.sequences:,} sequences x {SEQ_LEN}, arrow files {size:.0f} MiB; batch {a.batch}")
    rows = [
        ("construct (s)", "construct_s", "{:.2f}"),
        ("RSS after construct (MiB)", "rss_after_construct_mib", "{:.0f}"),
        ("peak RSS (MiB)", "peak_rss_mib", "{:.0f}"),
        ("gets a second", "gets_per_s", "{:.0f}"),
        ("sequences a second", "sequences_per_s", "{:,.0f}"),
    ]
    a_, b_ = res["raw .u8"], res["datasets folder"]
    print(f"{'':28}{'raw .u8':>14}{'datasets':>14}{'datasets/raw':>14}")
    for label, k, fmt in rows:
        print(f"{label:28}{fmt.format(a_[k]):>14}{fmt.format(b_[k]):>14}{b_[k] / a_[k]:>14.2f}")
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
