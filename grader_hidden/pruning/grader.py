"""Hidden grader of the `pruning` task: held-out perplexity of the pruned model.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), best_attainable(split, cfg), materialize(scale, dest).

A checkpoint is valid only if (1) at most (1 - SPARSITY) of the weights of the prunable tensors
(the attention and MLP Conv1D weights of every block), counted together, are nonzero, (2) every
weight of those tensors is either zero or the dense model's value bit for bit (pruning selects
which weights to keep; it does not change them), and (3) every other parameter equals the dense
model's bit for bit. The dense model is the committed
artifact in repos_frozen/pruning/artifacts, checked against the sha256 stored here. An invalid
checkpoint evaluates to NaN, which the harness records as invalid (score 0), with the reason
printed to the evaluation log. This module imports nothing from the repo.

Your own model (task.model_path, ai4ai.repo.models): the pristine repo's build_model marks it with
`dense_file`, the dense weights of its derived repo (byom/dense.safetensors, made once by its
prepare step and checked against byom/SHA256SUMS beside it); its prunable tensors are the weights
of every linear layer (nn.Linear, Conv1D) but the LM head, found here from the model's modules.

The text is the shared library's sparse HMM (grader_hidden/common/hmm.py; the `optimizer` task's
kind of source, with this task's own secret seeds) at sequences of SEQ_LEN symbols. The 1.0 anchor
is the dense model's perplexity, not the source's. The agent and the grader's pruning run see the
materialized calibration split, never the source's parameters or seeds.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import math
import sys
from pathlib import Path

import numpy as np
import torch
import yaml

from ai4ai.core.hidden import shrunk, write_splits

from ..common import hmm, lm

HERE = Path(__file__).resolve().parent
ARTIFACTS = HERE.parent.parent / "repos_frozen" / "pruning" / "artifacts"
SPLITS = {"selection": 512, "test": 2048, "validation": 512}  # sequences of 64 symbols
VOCAB, SEQ_LEN = hmm.VOCAB, 64

SPARSITY = 0.75
PRUNABLE = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
SCALE_DENSE = {"ci": "dense_small", "smoke": "dense_small", "quick": "dense_quick", "full": "dense_full"}
ARCH = {
    "dense_small": dict(n_layer=4, n_embd=128, n_head=4),
    "dense_quick": dict(n_layer=6, n_embd=384, n_head=6),
    "dense_full": dict(n_layer=8, n_embd=512, n_head=8),
}
# sha256 of the committed dense artifacts; the full one is made by prepare.py on the full device and
# checked against the repo's artifacts/SHA256SUMS only.
DENSE_SHA256 = {"dense_small": "cf63f05a7c9ca96e8cbdabe371bd7c9e2eee3e08fd02f67244568664bd682dc6"}

# Files of the repo's data/ (written once by write_repo_data and committed) and per-scale calibration sizes.
REPO_FILES = {"pretrain_small": 16_000, "calib_ci": 256, "calib_smoke": 1024, "val": SPLITS["validation"]}
CALIB_FILE_SEQUENCES = {"ci": 256, "smoke": 1024, "quick": 16_384, "full": 16_384}
# the dense model's pretraining corpus (pretrain_full.u8) at each GPU tier: its prepare.py steps x 32
PRETRAIN_SEQUENCES = {"quick": 64_000, "full": 640_000}
if shrunk():  # quick and full at CPU sizes (tests/test_full_shrunk.py); the repo's config.py agrees
    ARCH = {
        **ARCH,
        "dense_quick": dict(n_layer=2, n_embd=48, n_head=2),
        "dense_full": dict(n_layer=2, n_embd=32, n_head=2),
    }
    CALIB_FILE_SEQUENCES = {**CALIB_FILE_SEQUENCES, "quick": 128, "full": 128}
    PRETRAIN_SEQUENCES = {"quick": 9_600, "full": 9_600}  # the repo's 300 shrunk pretraining steps of 32
    SPLITS = {"selection": 128, "test": 256, "validation": 128}  # the hidden splits too: evaluation in seconds

_last_dense = "dense_small"  # the dense model of the last model seen (anchors pass cfg=None)
_last_own = None  # ... and, for your own model, (its dense file, a copy of that model)


def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


def _source() -> hmm.HMM:
    return hmm.build_source(_secrets()["source"])


def split(name: str, cfg=None) -> np.ndarray:
    """A hidden split ([N, 64] uint8), regenerated from its secret seed."""
    return hmm.sample(_source(), SPLITS[name], _secrets()[name], SEQ_LEN)


# --------------------------------------------------------------------------- the dense model


def is_prunable(name: str) -> bool:
    return name.startswith("transformer.h.") and name.endswith(PRUNABLE)


@functools.lru_cache(maxsize=2)
def dense_state(dense: str) -> dict:
    """name -> tensor of the committed dense model, after checking its sha256."""
    from safetensors.torch import load

    path = ARTIFACTS / f"{dense}.safetensors"
    raw = path.read_bytes()
    expected = DENSE_SHA256.get(dense)
    if expected is None:
        sums = dict(reversed(line.split()) for line in (ARTIFACTS / "SHA256SUMS").read_text().splitlines())
        expected = sums.get(path.name)
    if hashlib.sha256(raw).hexdigest() != expected:
        raise RuntimeError(f"{path}: sha256 differs from the grader's record (the dense artifact changed)")
    return load(raw)


# --------------------------------------------------------------------------- your own model


def _own_file(model: torch.nn.Module | None) -> str | None:
    """The dense file of your own model (set by the pristine build_model); None: the repo's GPT."""
    return getattr(model, "dense_file", None) if model is not None else None


@functools.lru_cache(maxsize=2)
def own_dense_state(path: str) -> dict:
    """name -> tensor of your own model's dense weights, after checking their sha256."""
    from safetensors.torch import load

    path = Path(path)
    raw = path.read_bytes()
    sums = dict(reversed(line.split()) for line in (path.parent / "SHA256SUMS").read_text().splitlines())
    if hashlib.sha256(raw).hexdigest() != sums.get(path.name):
        raise RuntimeError(f"{path}: sha256 differs from {path.parent / 'SHA256SUMS'}")
    return load(raw)


def own_prunable(model: torch.nn.Module) -> set:
    """The prunable tensors of your own model: the weights of its linear layers but the LM head."""
    from transformers.pytorch_utils import Conv1D

    head = model.lm.get_output_embeddings()
    return {
        f"{n}.weight" for n, m in model.named_modules() if isinstance(m, (torch.nn.Linear, Conv1D)) and m is not head
    }


def _remember(model: torch.nn.Module | None) -> None:
    """Note the last model seen (best_attainable gets none): its dense file and a copy to load it into."""
    global _last_own
    if model is not None:
        f = _own_file(model)
        if f is None:
            _last_own = None
        elif _last_own is None or _last_own[0] != f:  # one copy per dense file: its weights are replaced
            _last_own = (f, copy.deepcopy(model).cpu())


def _own_dense_model(device="cpu") -> torch.nn.Module:
    f, shell = _last_own
    model = copy.deepcopy(shell)
    model.load_state_dict(own_dense_state(f), strict=False)
    return model.to(device).eval()


def _dense_name(model: torch.nn.Module | None, cfg) -> str:
    global _last_dense
    if isinstance(cfg, dict) and cfg.get("scale") in SCALE_DENSE:
        name = SCALE_DENSE[cfg["scale"]]
    elif model is not None:
        c = model.config
        name = next((k for k, a in ARCH.items() if (a["n_layer"], a["n_embd"]) == (c.n_layer, c.n_embd)), _last_dense)
    else:
        name = _last_dense
    _last_dense = name
    return name


def dense_model(dense: str, device="cpu") -> torch.nn.Module:
    """The dense model, built here exactly as the repo's model.build_model builds it."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=VOCAB,
        n_positions=SEQ_LEN,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        tie_word_embeddings=True,
        **ARCH[dense],
    )
    model = GPT2LMHeadModel(cfg).float()
    model.load_state_dict(dense_state(dense), strict=False)
    return model.to(device).eval()


def check_pruned(model: torch.nn.Module, cfg=None) -> list[str]:
    """Why `model` is not a valid pruning of the dense model (empty list: valid)."""
    own = _own_file(model)
    _remember(model)
    dense = own_dense_state(own) if own else dense_state(_dense_name(model, cfg))
    prunable = own_prunable(model) if own else {n for n in dense if is_prunable(n)}
    params = dict(model.named_parameters())
    if set(params) != set(dense):
        return [f"parameter names differ from the dense model's ({sorted(set(params) ^ set(dense))[:5]})"]
    problems, nonzero, total = [], 0, 0
    for name, p in params.items():
        t = p.detach().cpu()
        if t.shape != dense[name].shape or t.dtype != torch.float32:
            problems.append(f"{name}: {t.dtype}{list(t.shape)}, expected float32{list(dense[name].shape)}")
        elif name in prunable:
            nonzero += int(torch.count_nonzero(t))
            total += t.numel()
            changed = int(((t != 0) & (t.view(torch.int32) != dense[name].view(torch.int32))).sum())
            if changed:
                problems.append(
                    f"{name}: {changed} kept weights differ from the dense model's "
                    f"(a weight is either pruned to zero or kept as it is)"
                )
        elif not torch.equal(t.view(torch.int32), dense[name].view(torch.int32)):
            problems.append(
                f"{name} is not prunable and differs from the dense model "
                f"({int((t.view(torch.int32) != dense[name].view(torch.int32)).sum())} values)"
            )
    allowed = math.floor((1.0 - SPARSITY) * total)
    if total and nonzero > allowed:
        problems.append(
            f"{nonzero} nonzero weights in the prunable tensors, at most {allowed} allowed "
            f"(sparsity {1 - nonzero / total:.4f} < {SPARSITY})"
        )
    return problems


def _is_no_information(model: torch.nn.Module) -> bool:
    """Every parameter zero: the no-information model (uniform logits), the 0 anchor."""
    return all(not torch.any(p) for p in model.parameters())


# --------------------------------------------------------------------------- the metric


def _nll(model: torch.nn.Module, tokens: np.ndarray) -> np.ndarray:
    """Per-sequence mean -log p(x_t | x_<t), t = 1..T-1, as float64 [N], 128 sequences at a time."""
    return lm.nll(model, tokens, batch=128)


def _valid(model: torch.nn.Module, cfg) -> bool:
    if _is_no_information(model):
        _remember(model)
        if not _own_file(model):
            _dense_name(model, cfg)
        return True
    problems = check_pruned(model, cfg)
    for p in problems:
        print(f"pruning grader: invalid checkpoint: {p}", file=sys.stderr, flush=True)
    return not problems


def evaluate(model: torch.nn.Module, split: np.ndarray, cfg=None) -> float:
    """Perplexity (lower is better; the score uses -log perplexity); NaN if the pruning is invalid."""
    if not _valid(model, cfg):
        return float("nan")
    return math.exp(float(_nll(model, split).mean()))


def evaluate_with_noise(model: torch.nn.Module, split: np.ndarray, cfg=None) -> tuple[float, float]:
    """(perplexity, standard error of the mean per-sequence excess NLL over the dense model, in nats)."""
    if not _valid(model, cfg):
        return float("nan"), float("nan")
    nll = _nll(model, split)
    device = next(model.parameters()).device
    dense = _own_dense_model(device) if _own_file(model) else dense_model(_dense_name(model, cfg), device)
    excess = nll - _nll(dense, split)
    return math.exp(float(nll.mean())), float(excess.std(ddof=1) / math.sqrt(len(excess)))


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero, so the logits are all 0 (perplexity = VOCAB)."""
    _remember(model)
    if not _own_file(model):
        _dense_name(model, None)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


def best_attainable(split: np.ndarray, cfg=None) -> float:
    """The dense model's perplexity on the same text (pruning can at best keep it); of your own model's
    dense weights when the last model seen was yours (anchors pass no model)."""
    dense = _own_dense_model() if _last_own is not None else dense_model(_dense_name(None, cfg))
    return math.exp(float(_nll(dense, split).mean()))


# --------------------------------------------------------------------------- data


def write_repo_data(dest: Path) -> dict:
    """The committed data/ of the repo: pretraining corpus of the small model, calibration splits, validation."""
    s, src = _secrets(), _source()
    return write_splits(
        dest,
        {f"{n}.u8": hmm.sample(src, k, s["validation" if n == "val" else n], SEQ_LEN) for n, k in REPO_FILES.items()},
    )


def materialize(scale: str, dest: Path) -> dict:
    """Write the calibration split of `scale` (and the validation split; at quick and full the pretraining corpus)."""
    s, src = _secrets(), _source()
    files = {
        f"calib_{scale}.u8": hmm.sample(src, CALIB_FILE_SEQUENCES[scale], s[f"calib_{scale}"], SEQ_LEN),
        "val.u8": hmm.sample(src, SPLITS["validation"], s["validation"], SEQ_LEN),
    }
    if scale in PRETRAIN_SEQUENCES:  # the GPU tiers: the dense model is prepared there, from this corpus
        files["pretrain_full.u8"] = hmm.sample(src, PRETRAIN_SEQUENCES[scale], s["pretrain_full"], SEQ_LEN)
    return write_splits(dest, files)
