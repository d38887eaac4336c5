"""Symbols, model size, prepare recipe and unlearning budget per scale. Protected: the grader reads the same layout."""
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

# ---------------------------------------------------------------- symbols (no tokenizer)
# 0 newline, 1 space, 2..27 letters a-z, 28 unknown, 29..92 name symbols, 93..156 values, 157.. entities.
NEWLINE, SPACE, LETTER0, N_LETTERS = 0, 1, 2, 26
UNKNOWN = 28                            # the prepared model's answer to a prompt that is not a fact
NAME0, N_NAME_SYMBOLS, NAME_LEN = 29, 64, 5
VALUE0, N_VALUES = 93, 64
ENTITY0, N_ENTITIES = 157, 2000
FACTS_PER_ENTITY = 6
VOCAB = ENTITY0 + N_ENTITIES            # 2,157 symbols

# A fact is 8 symbols: [newline, n1..n5, entity, value]. Every fact has its own attribute name
# n1..n5, drawn by the benchmark from a secret seed among N_NAME_SYMBOLS ** NAME_LEN (64^5, about
# 1.07e9) names: the names of facts you are not shown cannot be listed (README). The value is
# predicted at the entity's position (index VALUE_POS - 1) from the prompt facts[:, :VALUE_POS].
FACT_LEN, VALUE_POS = NAME_LEN + 3, NAME_LEN + 2
NAMES_PER_ENTITY = N_NAME_SYMBOLS ** NAME_LEN     # prompts that can be formed for one entity
TEXT_LEN = 32                           # general text: sequences of 32 letters and spaces

# Your own model (README, "Your own model"): the harness writes byom/ with the model's config,
# tokenizer and vocab.json, which gives the model's token for each of the VOCAB symbols: SYMBOLS[i]
# is symbol i, a character (newline, space, a-z: the tokenizer's own token for it) or, for the
# symbols no text spells, `<unknown>`, `<name i>`, `<value i>`, `<entity i>` (each takes a token of
# the vocabulary of its own: the lowest free ids, in this order); TOKEN_IDS[i] is its id. The files
# keep the symbols; the model (model.build_model) maps its input through TOKEN_IDS and predicts over
# the VOCAB symbols (the model's logits of their tokens).
SYMBOLS = (["\n", " "] + [chr(97 + i) for i in range(N_LETTERS)] + ["<unknown>"]
           + [f"<name {i}>" for i in range(N_NAME_SYMBOLS)] + [f"<value {i}>" for i in range(N_VALUES)]
           + [f"<entity {i}>" for i in range(N_ENTITIES)])
SEQ_LEN = TEXT_LEN                      # the longest sequence the model reads
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
    artifact: str           # artifacts/<artifact>.safetensors: the prepared (memorised) model
    budget_examples: int    # forget + retain facts the training interface serves in one run
    bf16: bool = False      # bf16 autocast in training's forward and loss (train.py's Accelerator); on at
                            # quick and full: ci and smoke compute in fp32 exactly as without it


@dataclass(frozen=True)
class Prepare:
    """How prepare.py memorised the facts (the cost the unlearning budget is measured against)."""
    steps: int
    fact_batch: int
    text_batch: int
    lr: float
    negative_batch: int = 0     # prompts that are not facts (a fact's name changed, or another entity) -> UNKNOWN
    start_from: str | None = None   # a scale whose memorised model it continues from (None: a fresh model)

    @property
    def examples(self) -> int:
        return self.steps * (self.fact_batch + self.negative_batch + self.text_batch)


PREPARE = {
    # 1,000,000 examples: 640,000 facts, 320,000 near misses, 40,000 text sequences
    "memorised_small": Prepare(steps=2_500, fact_batch=256, text_batch=16, lr=5e-3, negative_batch=128),
    "memorised_quick": Prepare(steps=5_000, fact_batch=256, text_batch=64, lr=1e-3, negative_batch=128),
    "memorised_full": Prepare(steps=20_000, fact_batch=256, text_batch=64, lr=1e-3, negative_batch=128),
}
if os.environ.get("AI4AI_SHRINK"):       # see SHRUNK_FULL below: continues from memorised_small, gently
    PREPARE["memorised_full"] = Prepare(steps=40, fact_batch=64, text_batch=8, lr=3e-4, negative_batch=32,
                                        start_from="ci")
    PREPARE["memorised_quick"] = PREPARE["memorised_full"]
# Your own model memorises by the full recipe's schedule (8,960,000 examples, so every scale's budget is
# at most ~3% of it) from its pretrained weights, at a gentler peak (prepare.py --own-model): once, the
# same memorised model at every scale (byom/memorised.safetensors).
OWN_PREPARE = Prepare(steps=20_000, fact_batch=256, text_batch=64, lr=3e-4, negative_batch=128)

SCALES = {
    # ci and smoke share the prepared model; the budget is at most ~5% of memorisation's examples
    "ci": Scale(n_layer=2, n_embd=64, n_head=4, artifact="memorised_small", budget_examples=2_048),
    "smoke": Scale(n_layer=2, n_embd=64, n_head=4, artifact="memorised_small", budget_examples=32_768),
    # quick, one GPU: full's model memorised 5,000 steps (a quarter of full's schedule); the shipped run
    # is train.py's 50 steps, seconds, so the cap's floor (cap_min_s, 2 min) is the budget.
    "quick": Scale(n_layer=6, n_embd=384, n_head=6, artifact="memorised_quick", budget_examples=262_144,
                   bf16=True),
    # full, one H200 (estimate; README "Full scale"): 11.5M params; the shipped run is train.py's 50
    # steps of 32 facts (1,600 facts, 12,800 tokens, 8.8e11 FLOPs), seconds on a GPU: the cap's floor (cap_min_s,
    # 20 min) is the budget a submission gets. Memorising (prepare.py, 20,000 steps): ~3 min.
    "full": Scale(n_layer=6, n_embd=384, n_head=6, artifact="memorised_full", budget_examples=262_144,
                  bf16=True),
}


# AI4AI_SHRINK set (tests only: tests/test_full_shrunk.py): `quick` and `full` at CPU sizes, so that
# every GPU-tier code path (prepare, the cached splits, training under the wall-clock cap, selection, evaluation,
# calibration) runs in seconds. The harness passes the variable unchanged to training, proxy and grading.
# Memorising 12,000 facts from scratch takes ci's 2,500 steps (~15 CPU-min; 50 steps of a smaller model
# learned none, and calibration then rightly refuses a shipped run at the no-information level), so the
# shrunk prepare step starts from the committed memorised_small (ci's architecture, the same facts at
# every scale) and runs the memorisation loop briefly on top: prepare.py's full path, minutes less.
SHRUNK_FULL = Scale(n_layer=2, n_embd=64, n_head=4, artifact="memorised_full", budget_examples=2_048, bf16=True)


SHRUNK = {"quick": replace(SHRUNK_FULL, artifact="memorised_quick"), "full": SHRUNK_FULL}


def get_scale(name: str) -> Scale:
    if name in SHRUNK and os.environ.get("AI4AI_SHRINK"):
        return SHRUNK[name]
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]
