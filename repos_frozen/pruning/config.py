"""Per-scale model size, sparsity and calibration budget. Protected: the grader uses the same values."""
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

VOCAB = 32          # symbols of the source; the text is symbol-level, no tokenizer
SEQ_LEN = 64        # every pretraining, calibration, validation and test sequence is this long

# The pruning target: at most (1 - SPARSITY) of the weights of the prunable tensors, counted
# together over all of them, may be nonzero. How the zeros are spread over the tensors is up to
# the algorithm (uniform per tensor, per layer, per row, ...). A kept weight keeps its dense
# value bit for bit (pruning chooses the mask; it does not update weights), and every other
# tensor stays exactly (bit for bit) as in the dense model.
SPARSITY = 0.75
PRUNABLE = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

# Your own model (README, "Your own model"): the harness writes byom/ with the model's config,
# tokenizer and vocab.json, which gives the model's token for each of the 32 symbols: SYMBOLS[i] is
# symbol i written as a character (the base-32 digits), TOKEN_IDS[i] its id in the model's
# vocabulary. The files keep the symbols; the model (model.build_model) maps its input through
# TOKEN_IDS and predicts over the 32 symbols. Its prunable tensors are the weights of every linear
# layer (nn.Linear, GPT-2's Conv1D) but the LM head: model.prunable_parameters.
SYMBOLS = list("0123456789ABCDEFGHIJKLMNOPQRSTUV")
BYOM = Path(__file__).resolve().parent / "byom"
TOKEN_IDS = None
if (BYOM / "vocab.json").exists():
    TOKEN_IDS = [int(i) for i in json.loads((BYOM / "vocab.json").read_text())["token_ids"]]


@dataclass(frozen=True)
class Scale:
    n_layer: int
    n_embd: int
    n_head: int
    dense: str                  # artifacts/<dense>.safetensors: the prepared dense model
    calib_sequences: int        # sequences the calibration split serves in one run (the data budget)
    pretrain_steps: int         # prepare.py: optimizer steps of 32 sequences


SCALES = {
    # ci and smoke prune the same dense model; ci only has a smaller calibration budget.
    "ci": Scale(n_layer=4, n_embd=128, n_head=4, dense="dense_small", calib_sequences=32, pretrain_steps=500),
    "smoke": Scale(n_layer=4, n_embd=128, n_head=4, dense="dense_small", calib_sequences=128, pretrain_steps=500),
    # quick, one GPU: a 10.6M-parameter GPT (an architecture of its own: the grader tells the dense models
    # apart by it), its dense model pretrained 2,000 steps; magnitude pruning takes seconds, so the cap's
    # floor (cap_min_s, 2 min) is the budget.
    "quick": Scale(n_layer=6, n_embd=384, n_head=6, dense="dense_quick", calib_sequences=1024, pretrain_steps=2_000),
    # full, one H200 (estimate; README "Full scale"): 25.3M params; magnitude pruning takes seconds, so the
    # cap's floor (cap_min_s, 20 min) is the budget a submission gets (Wanda, SparseGPT, recovery).
    # prepare.py's dense model: 20,000 steps of 32 x 64 tokens (41M tokens, 6.2e15 FLOPs): ~4 min.
    "full": Scale(n_layer=8, n_embd=512, n_head=8, dense="dense_full", calib_sequences=1024, pretrain_steps=20_000),
}


# AI4AI_SHRINK set (tests only: tests/test_full_shrunk.py): `quick` and `full` at CPU sizes, so that
# every GPU-tier code path (prepare, the cached splits, training under the wall-clock cap, selection, evaluation,
# calibration) runs in seconds. The harness passes the variable unchanged to training, proxy and grading.
# The dense model is pretrained for 300 steps (seconds), so that it and the pruned model beat the
# uniform predictor, as calibration requires (20 steps, all warmup, left it near random).
SHRUNK_FULL = Scale(n_layer=2, n_embd=32, n_head=2, dense="dense_full", calib_sequences=64, pretrain_steps=300)


SHRUNK = {"quick": replace(SHRUNK_FULL, dense="dense_quick", n_embd=48), "full": SHRUNK_FULL}  # distinct architectures, as above


def get_scale(name: str) -> Scale:
    if name in SHRUNK and os.environ.get("AI4AI_SHRINK"):
        return SHRUNK[name]
    if name not in SCALES:
        raise SystemExit(f"unknown scale {name!r}; choose one of {sorted(SCALES)}")
    return SCALES[name]


def is_prunable(name: str) -> bool:
    """Whether parameter `name` (e.g. transformer.h.0.mlp.c_fc.weight) of the repo's GPT counts toward
    the sparsity (your own model's: model.prunable_parameters)."""
    return name.startswith("transformer.h.") and name.endswith(PRUNABLE)
