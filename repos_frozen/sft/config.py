"""Vocabulary, sequence format and per-scale sizes and budgets. Protected: the grader reads the same.

A problem starts from a value and applies a chain of 6 operators; the model writes one
worked step per operator, then the final answer:

    <bos> Chcabch:Ch=7;7c=5;5a=5;5b=1;1c=8;8h=5;>5 <eos>
          prompt |completion (starts after ':')

Values are 0-9A-Z (36); each operator `a`..`z` is a fixed permutation of the values (one
"x op = y;" fact per value and operator, 936 in all; operators differ in frequency). The
prepared base model learned the format and the common facts from data/pretrain.u8. Every sequence is padded with <pad> to SEQ_LEN.
"""
import json
import os
from dataclasses import dataclass
from pathlib import Path

PAD, BOS, EOS = 0, 1, 2
VALUES = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
OPERATORS = "abcdefghijklmnopqrstuvwxyz"
CHARS = VALUES + OPERATORS + "=;:>"       # ':' ends the prompt, '>' precedes the final answer
VOCAB = 3 + len(CHARS)                    # 69 tokens: <pad> <bos> <eos> then CHARS
SEQ_LEN = 64
STOI = {c: i + 3 for i, c in enumerate(CHARS)}
ITOS = {i + 3: c for i, c in enumerate(CHARS)}
PROMPT_END = STOI[":"]
ANSWER_MARK = STOI[">"]


def encode(text: str) -> list[int]:
    return [STOI[c] for c in text]


def decode(ids) -> str:
    """Token ids -> text, stopping at <eos>; <pad>/<bos> show as '_'."""
    out = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        out.append(ITOS.get(i, "_"))
    return "".join(out)


# Your own model (README, "Your own model"): the harness writes byom/ with the model's config,
# tokenizer and vocab.json, which gives the model's token for each task token: SYMBOLS[i] is
# task token i (a special or one character), TOKEN_IDS[i] its id in the model's vocabulary. The
# committed splits keep the task ids; data.load_sequences maps them through TOKEN_IDS.
SYMBOLS = ["<pad>", "<bos>", "<eos>", *CHARS]
BYOM = Path(__file__).resolve().parent / "byom"
# How your own model is fine-tuned (task.adapter; README "Your own model"): "lora" where the harness
# derived this copy with a LoRA adapter (byom/adapter.json), else "full" (every weight trains).
ADAPTER = json.loads((BYOM / "adapter.json").read_text())["adapter"] if (BYOM / "adapter.json").exists() else "full"
TOKEN_IDS = None
if (BYOM / "vocab.json").exists():
    _own = json.loads((BYOM / "vocab.json").read_text())
    TOKEN_IDS = [int(i) for i in _own["token_ids"]]
    VOCAB = int(_own["vocab_size"])
    PAD, BOS, EOS = TOKEN_IDS[:3]
    STOI = {c: TOKEN_IDS[i] for c, i in STOI.items()}
    ITOS = {TOKEN_IDS[i]: c for i, c in ITOS.items()}
    PROMPT_END, ANSWER_MARK = STOI[":"], STOI[">"]


@dataclass(frozen=True)
class Scale:
    n_layer: int
    n_embd: int
    n_head: int
    budget_examples: int    # worked solutions the training split serves in one run (the data budget)
    pretrain_steps: int     # prepare.py: steps of the base model's pretraining (batches of 32)
    bf16: bool = False      # bf16 autocast in training's forward and loss (train.py's Accelerator); on at
                            # quick and full: ci and smoke compute in fp32 exactly as without it


SCALES = {
    "ci": Scale(n_layer=2, n_embd=64, n_head=4, budget_examples=4_096, pretrain_steps=1_000),
    "smoke": Scale(n_layer=2, n_embd=64, n_head=4, budget_examples=16_384, pretrain_steps=1_000),
    # quick, one GPU: full's 10.7M-parameter model, 16,384 examples (4,096 steps of 4, 1M tokens) at
    # full's measured step (23.5 ms on an H200): ~1.6 min a seed; its base pretrained 2,000 steps.
    "quick": Scale(n_layer=6, n_embd=384, n_head=6, budget_examples=16_384, pretrain_steps=2_000, bf16=True),
    # full, one H200 (estimate; README "Full scale"): 10.7M params, 1,048,576 examples (a quarter of the
    # grader's 4,194,304-example split) = 67M tokens, 262,144 steps of 4 (train.py's BATCH_SIZE, the
    # smoke sweep's choice); 6*N*D = 4.3e15 FLOPs (seconds at 30% MFU), dispatch-bound at ~8.5 ms a
    # step: ~37 min. prepare.py's 20,000 pretraining steps: ~3 min.
    "full": Scale(n_layer=6, n_embd=384, n_head=6, budget_examples=1_048_576, pretrain_steps=20_000, bf16=True),
}


# AI4AI_SHRINK set (tests only: tests/test_full_shrunk.py): `quick` and `full` at CPU sizes, so that
# every GPU-tier code path (prepare, the cached splits, training under the wall-clock cap, selection, evaluation,
# calibration) runs in seconds. The harness passes the variable unchanged to training, proxy and grading.
SHRUNK_FULL = Scale(n_layer=1, n_embd=32, n_head=2, budget_examples=512, pretrain_steps=20, bf16=True)


SHRUNK = {"quick": SHRUNK_FULL, "full": SHRUNK_FULL}   # both GPU tiers, the same CPU sizes


def get_scale(name: str) -> Scale:
    if name in SHRUNK and os.environ.get("AI4AI_SHRINK"):
        return SHRUNK[name]
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]
