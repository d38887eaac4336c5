"""Per-scale model size, pretraining and training budget. Protected: the grader reads the same file."""
import json
import os
from dataclasses import dataclass
from pathlib import Path

# Characters: token 0 pad, 1 '|' (after the prompt), 2 '$' (end of the response), 3.. 'a'-'h'.
CHARS = "_|$abcdefgh"
VOCAB = len(CHARS)
PAD, SEP, END = 0, 1, 2
SEQ_LEN = 24        # every sequence: "prompt|response$" right-padded with token 0 to this length

# Your own model (README, "Your own model"): the harness writes byom/ with the model's config,
# tokenizer and vocab.json, which gives the model's token for each task token: SYMBOLS[i] is
# task token i (<pad> or one character), TOKEN_IDS[i] its id in the model's vocabulary. Data and
# the grader keep the task's ids; the reward model maps them at its input (model.RewardModel).
SYMBOLS = ["<pad>", *CHARS[1:]]
BYOM = Path(__file__).resolve().parent / "byom"
# How your own model is fine-tuned (task.adapter; README "Your own model"): "lora" where the harness
# derived this copy with a LoRA adapter (byom/adapter.json), else "full" (every weight trains).
ADAPTER = json.loads((BYOM / "adapter.json").read_text())["adapter"] if (BYOM / "adapter.json").exists() else "full"
TOKEN_IDS = None
if (BYOM / "vocab.json").exists():
    TOKEN_IDS = [int(i) for i in json.loads((BYOM / "vocab.json").read_text())["token_ids"]]


@dataclass(frozen=True)
class Scale:
    n_layer: int
    n_embd: int
    n_head: int
    budget_pairs: int       # preference pairs the training split serves in one run (the data budget)
    pretrain_steps: int     # prepare.py: LM steps on the unlabelled responses (the base model)
    pretrain_batch: int
    bf16: bool = False      # bf16 autocast in training's forward and loss (train.py's Accelerator); on at
                            # quick and full: ci and smoke compute in fp32 exactly as without it


SCALES = {
    "ci": Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=4_096, pretrain_steps=300, pretrain_batch=64),
    "smoke": Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=32_768, pretrain_steps=600, pretrain_batch=64),
    # quick, one GPU: full's 10.7M-parameter model, 131,072 pairs (4,096 steps of 32) at full's measured
    # step (21.5 ms on an H200): ~1.5 min a seed; its base pretrained 2,000 steps.
    "quick": Scale(n_layer=6, n_embd=384, n_head=6, budget_pairs=131_072, pretrain_steps=2_000, pretrain_batch=256, bf16=True),
    # full, one H200 (estimate; README "Full scale"): 10.7M params, 8,388,608 pairs (two passes over the
    # 4,194,304 the grader materializes), 262,144 steps of 32; 403M tokens, 6*N*D = 2.6e16 FLOPs,
    # dispatch-bound at ~8 ms a step: ~35 min. prepare.py's 20,000 pretraining steps: ~3 min.
    "full": Scale(n_layer=6, n_embd=384, n_head=6, budget_pairs=8_388_608, pretrain_steps=20_000, pretrain_batch=256, bf16=True),
}


# AI4AI_SHRINK set (tests only: tests/test_full_shrunk.py): `quick` and `full` at CPU sizes, so that
# every GPU-tier code path (prepare, the cached splits, training under the wall-clock cap, selection, evaluation,
# calibration) runs in seconds. The harness passes the variable unchanged to training, proxy and grading.
# 4,096 pairs (128 steps, four passes over the 1,024 the shrunk grader writes) on a base pretrained 200 steps
# (seconds), so that the shipped reward model ranks the pairs above chance (the no-information model's
# 0.5) by more than the noise, as calibration requires. 1,024 pairs (32 steps) did so on the visible rule
# but not on the graded instance (0.47-0.53 over 5 seeds).
SHRUNK_FULL = Scale(n_layer=1, n_embd=32, n_head=2, budget_pairs=4_096, pretrain_steps=200, pretrain_batch=16,
                    bf16=True)


SHRUNK = {"quick": SHRUNK_FULL, "full": SHRUNK_FULL}   # both GPU tiers, the same CPU sizes


def get_scale(name: str) -> Scale:
    if name in SHRUNK and os.environ.get("AI4AI_SHRINK"):
        return SHRUNK[name]
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]


def decode(tokens) -> str:
    """A token row as text, padding dropped: e.g. 'bdf|acegehdfaah$'."""
    return "".join(CHARS[int(t)] for t in tokens if int(t) != PAD)
