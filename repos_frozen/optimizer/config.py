"""Per-scale model size and training budget. Protected: the grader reads the same file."""
from dataclasses import dataclass

VOCAB = 32          # symbols of the source; the text is symbol-level, no tokenizer
SEQ_LEN = 128       # every training, validation and test sequence is this long


@dataclass(frozen=True)
class Scale:
    n_layer: int
    n_embd: int
    n_head: int
    budget_sequences: int   # sequences the training split serves in one run (the data budget)


SCALES = {
    "ci": Scale(n_layer=2, n_embd=64, n_head=4, budget_sequences=2_048),
    "smoke": Scale(n_layer=2, n_embd=64, n_head=4, budget_sequences=16_384),
    "full": Scale(n_layer=6, n_embd=384, n_head=6, budget_sequences=4_194_304),
}


def get_scale(name: str) -> Scale:
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]
