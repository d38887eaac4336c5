"""Graph sizes, model size, diffusion steps and training budget per scale. Protected."""
import os
from dataclasses import dataclass, replace

N_NODES = 8                                 # every graph has 8 nodes
N_PAIRS = N_NODES * (N_NODES - 1) // 2      # 28 node pairs, each with a bond order
N_TYPES = 4                                 # node types
N_BONDS = 3                                 # bond orders: 0 none, 1 single, 2 double
STEPS = 50                                  # diffusion steps T (the bound sums over all of them)


@dataclass(frozen=True)
class Scale:
    width: int
    depth: int
    split: str              # the training split's file, data/<split>.u8
    budget_graphs: int      # training graphs the split serves in one run (repeats count again)


SCALES = {
    "ci": Scale(width=256, depth=3, split="train_smoke", budget_graphs=98_304),
    "smoke": Scale(width=256, depth=3, split="train_smoke", budget_graphs=196_608),
    # quick, one GPU: full's denoiser, 4,194,304 graphs (16 passes over the 262,144 the grader
    # materializes; 16,384 steps of 256) at ~5 ms a step (estimate): ~1.4 min a seed.
    "quick": Scale(width=1024, depth=6, split="train_quick", budget_graphs=4_194_304),
    # full, one H200 (estimate; README "Full scale"): 5.5M params, 100,663,296 graphs (24 passes over the
    # 4,194,304 the grader materializes), 393,216 steps of 256; 6*N*graphs = 3.3e15 FLOPs, dispatch-bound
    # (noise sampling on the host, a 6-layer MLP) at ~5 ms a step: ~33 min.
    "full": Scale(width=1024, depth=6, split="train_full", budget_graphs=100_663_296),
}


# AI4AI_SHRINK set (tests only: tests/test_full_shrunk.py): `quick` and `full` at CPU sizes, so that
# every GPU-tier code path (prepare, the cached splits, training under the wall-clock cap, selection, evaluation,
# calibration) runs in seconds. The harness passes the variable unchanged to training, proxy and grading.
# ci's model and budget (384 steps of 256 graphs on a 3-layer MLP of width 256: seconds), with which the
# shipped bound beats the uniform model's at ci (34.5 nats against 42.3), as calibration requires (at
# shrunk full, 4 steps of width 32 gave 172 nats and 256 steps of width 128 gave 44.8).
SHRUNK_FULL = Scale(width=256, depth=3, split="train_full", budget_graphs=98_304)


SHRUNK = {"quick": replace(SHRUNK_FULL, split="train_quick"), "full": SHRUNK_FULL}


def get_scale(name: str) -> Scale:
    if name in SHRUNK and os.environ.get("AI4AI_SHRINK"):
        return SHRUNK[name]
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]
