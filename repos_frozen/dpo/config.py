"""Vocabulary, sequence length, per-scale model size and training budget. Protected."""
import os
from dataclasses import dataclass

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
        out.append(CHARS[i - 1])
    return "".join(out)


@dataclass(frozen=True)
class Scale:
    n_layer: int
    n_embd: int
    n_head: int
    budget_pairs: int       # preference pairs the training split serves in one run (the data budget)


SCALES = {
    "ci": Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=2_048),
    "smoke": Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=16_384),
    # full, one H200 (estimate; README "Full scale"): 4.8M params, 8,388,608 pairs (two passes over the
    # 4,194,304 the grader materializes), 131,072 steps of 64; 537M tokens through the policy (forward and
    # backward) and the frozen reference (forward): 8*N*D = 2.0e16 FLOPs, dispatch-bound at ~11 ms: ~24 min.
    "full": Scale(n_layer=6, n_embd=256, n_head=8, budget_pairs=8_388_608),
}


# AI4AI_SHRINK set (tests only: tests/test_full_shrunk.py): `full` at CPU sizes, so that every full
# code path (prepare, the cached splits, training under the wall-clock cap, selection, evaluation,
# calibration) runs in seconds. The harness passes the variable unchanged to training, proxy and grading.
SHRUNK_FULL = Scale(n_layer=1, n_embd=32, n_head=2, budget_pairs=256)


def get_scale(name: str) -> Scale:
    if name == "full" and os.environ.get("AI4AI_SHRINK"):
        return SHRUNK_FULL
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]
