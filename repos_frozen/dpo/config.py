"""Vocabulary, sequence length, per-scale model size and training budget. Protected."""
import json
import os
from dataclasses import dataclass
from pathlib import Path

# Character-level vocabulary. Token 0 is PAD and end-of-answer (EOS).
CHARS = " |>!.[]#*-0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
VOCAB = len(CHARS) + 1          # 73
EOS = PAD = 0
SEQ_LEN = 32                    # prompt + answer + EOS, right-padded with PAD
PROMPT_END = ">"                # the prompt ends with this character; the answer follows

_ID = {c: i + 1 for i, c in enumerate(CHARS)}


def encode(text: str) -> list[int]:
    return [_ID[c] for c in text]


def decode(ids) -> str:
    """Characters up to the first EOS."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        out.append(CHARS[i - 1] if TOKEN_IDS is None else _CHAR_OF.get(i, "\x00"))
    return "".join(out)


# Your own model (README, "Your own model"): the harness writes byom/ with the model's config,
# tokenizer and vocab.json, which gives the model's token for each task token: SYMBOLS[i] is
# task token i (<eos>, also the padding, or one character), TOKEN_IDS[i] its id in the model's
# vocabulary. The committed files keep the task ids; data.load_rows maps them through TOKEN_IDS.
SYMBOLS = ["<eos>", *CHARS]
BYOM = Path(__file__).resolve().parent / "byom"
# How your own model is fine-tuned (task.adapter; README "Your own model"): "lora" where the harness
# derived this copy with a LoRA adapter (byom/adapter.json), else "full" (every weight trains).
ADAPTER = json.loads((BYOM / "adapter.json").read_text())["adapter"] if (BYOM / "adapter.json").exists() else "full"
TOKEN_IDS = None
if (BYOM / "vocab.json").exists():
    _own = json.loads((BYOM / "vocab.json").read_text())
    TOKEN_IDS = [int(i) for i in _own["token_ids"]]
    VOCAB = int(_own["vocab_size"])
    EOS = PAD = TOKEN_IDS[0]
    _ID = {c: TOKEN_IDS[i] for c, i in _ID.items()}
    _CHAR_OF = {TOKEN_IDS[i]: c for c, i in zip(CHARS, range(1, len(CHARS) + 1))}


@dataclass(frozen=True)
class Scale:
    n_layer: int
    n_embd: int
    n_head: int
    budget_pairs: int       # preference pairs the training split serves in one run (the data budget)
    bf16: bool = False      # bf16 autocast in training's forward and loss (train.py's Accelerator); on at
                            # quick and full: ci and smoke compute in fp32 exactly as without it


SCALES = {
    "ci": Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=2_048),
    "smoke": Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=16_384),
    # quick, one GPU: full's 4.8M-parameter policy, 196,608 pairs (3,072 steps of 64) at full's measured
    # step (28 ms on an H200, policy and reference): ~1.4 min a seed.
    "quick": Scale(n_layer=6, n_embd=256, n_head=8, budget_pairs=196_608, bf16=True),
    # full, one H200 (estimate; README "Full scale"): 4.8M params, 8,388,608 pairs (two passes over the
    # 4,194,304 the grader materializes), 131,072 steps of 64; 537M tokens through the policy (forward and
    # backward) and the frozen reference (forward): 8*N*D = 2.0e16 FLOPs, dispatch-bound at ~11 ms: ~24 min.
    "full": Scale(n_layer=6, n_embd=256, n_head=8, budget_pairs=8_388_608, bf16=True),
}


# AI4AI_SHRINK set (tests only: tests/test_full_shrunk.py): `quick` and `full` at CPU sizes, so that
# every GPU-tier code path (prepare, the cached splits, training under the wall-clock cap, selection, evaluation,
# calibration) runs in seconds. The harness passes the variable unchanged to training, proxy and grading.
# The policy is ci's size and prepare.py's SFT runs 500 steps (its STEPS: seconds), so that the
# shipped algorithm answers some prompts right, above the no-information model's 0, as calibration requires.
SHRUNK_FULL = Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=256, bf16=True)


SHRUNK = {"quick": SHRUNK_FULL, "full": SHRUNK_FULL}   # both GPU tiers, the same CPU sizes


def get_scale(name: str) -> Scale:
    if name in SHRUNK and os.environ.get("AI4AI_SHRINK"):
        return SHRUNK[name]
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]
