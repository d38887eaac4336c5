"""Graph sizes, model size, diffusion steps and training budget per scale. Protected."""
from dataclasses import dataclass

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
    # full, one H200 (estimate; README "Full scale"): 5.5M params, 100,663,296 graphs (24 passes over the
    # 4,194,304 the grader materializes), 393,216 steps of 256; 6*N*graphs = 3.3e15 FLOPs, dispatch-bound
    # (noise sampling on the host, a 6-layer MLP) at ~5 ms a step: ~33 min.
    "full": Scale(width=1024, depth=6, split="train_full", budget_graphs=100_663_296),
}


def get_scale(name: str) -> Scale:
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]
