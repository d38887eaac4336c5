"""Per-scale model size, pretraining and training budget. Protected: the grader reads the same file."""
import json
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


SCALES = {
    "ci": Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=4_096, pretrain_steps=300, pretrain_batch=64),
    "smoke": Scale(n_layer=2, n_embd=64, n_head=4, budget_pairs=32_768, pretrain_steps=600, pretrain_batch=64),
    "full": Scale(n_layer=6, n_embd=384, n_head=6, budget_pairs=16_777_216, pretrain_steps=20_000, pretrain_batch=256),
}


def get_scale(name: str) -> Scale:
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]


def decode(tokens) -> str:
    """A token row as text, padding dropped: e.g. 'bdf|acegehdfaah$'."""
    return "".join(CHARS[int(t)] for t in tokens if int(t) != PAD)
