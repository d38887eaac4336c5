"""Per-scale model size, diffusion schedule and sample budget. Protected: the grader reads the same file."""
import os
from dataclasses import dataclass

IMAGE_DIM = 64          # 8x8 grey images, pixels scaled to [-1, 1]
N_STEPS = 20            # denoising steps of the sampler (training and sampling use the same chain)
N_PROMPTS = 10          # prompts: the ten digits; the model is conditioned on the prompt
# The reward for prompt c asks for the digit c drawn with thin strokes: mean ink (pixels mapped to
# [0, 1]) below INK_THRESHOLDS[c]. Real digits have mean ink from about 0.24 to 0.39 (5% and 95% quantiles per digit), so
# the prompts range from hard (0: 0.22, thinner than almost every real 0) to easy (9: 0.31).
INK_THRESHOLDS = (0.22, 0.30, 0.23, 0.29, 0.24, 0.28, 0.25, 0.27, 0.26, 0.31)
INK_TEMPERATURE = 0.01  # softness of the thin-stroke term
VALIDATION_SEED = 20240601   # public noise seed of the proxy evaluation (evaluate.py)
VALIDATION_SAMPLES = 2560     # ten batches of 256, one per prompt


@dataclass(frozen=True)
class Scale:
    width: int              # hidden width of the MLP denoiser
    depth: int              # residual blocks
    prepare_steps: int      # DDPM pretraining steps in prepare.py (batch 128)
    budget_samples: int     # sampled trajectories one RL run may draw (the budget)


SCALES = {
    "ci": Scale(width=128, depth=2, prepare_steps=1500, budget_samples=1_024),
    "smoke": Scale(width=256, depth=2, prepare_steps=3000, budget_samples=6_144),
    # quick, one GPU: full's denoiser, 98,304 sampled trajectories (3,072 iterations of 32) at ~25 ms
    # an iteration (estimate): ~1.3 min a seed; prepare.py's DDPM trained 3,000 steps.
    "quick": Scale(width=512, depth=3, prepare_steps=3_000, budget_samples=98_304),
    # full, one H200 (estimate; README "Full scale"): 1.66M params, 2,097,152 sampled trajectories =
    # 65,536 iterations of 32 (train.py's BATCH_SIZE; 20 sampling passes, 20 passes with gradients, the backward): 5.5e14 FLOPs,
    # dispatch-bound at ~25 ms an iteration: ~27 min. prepare.py's 20,000 DDPM steps: minutes.
    "full": Scale(width=512, depth=3, prepare_steps=20_000, budget_samples=2_097_152),
}


# AI4AI_SHRINK set (tests only: tests/test_full_shrunk.py): `quick` and `full` at CPU sizes, so that
# every GPU-tier code path (prepare, the cached splits, training under the wall-clock cap, selection, evaluation,
# calibration) runs in seconds. The harness passes the variable unchanged to training, proxy and grading.
# The prepared DDPM is ci's (width 128, 1,500 steps: seconds), so that its samples earn a hidden score
# above the no-information model's, as calibration requires (20 steps gave noise, scored 0 like it).
SHRUNK_FULL = Scale(width=128, depth=2, prepare_steps=1500, budget_samples=256)


SHRUNK = {"quick": SHRUNK_FULL, "full": SHRUNK_FULL}   # both GPU tiers, the same CPU sizes


def get_scale(name: str) -> Scale:
    if name in SHRUNK and os.environ.get("AI4AI_SHRINK"):
        return SHRUNK[name]
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]
