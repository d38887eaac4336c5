"""Hidden grader of the `unlearning` task: forget the forget set, keep every other fact.

Interface (see ai4ai/core/hidden.py): SPLITS, split(name, cfg), evaluate(model, split, cfg),
evaluate_with_noise, uninformative(model), materialize(scale, dest), plus prepare_data(dest)
for the repo's prepare step.

Metric: the harmonic mean of forget efficacy (1 - greedy exact-match accuracy on forget facts)
and retain accuracy (greedy exact match on held-out retain facts the training run never sees),
and 0 when the perplexity of hidden general text exceeds PPL_BOUND times the prepared model's.

Your own model (task.model_path, ai4ai.repo.models): the pristine repo's build_model wraps it in the
repo's OwnLM, which takes the task's symbols and gives the model's logits of their tokens (so the
greedy value and the text perplexity are over the task's VOCAB symbols, as for the repo's GPT-2),
and marks it with `memorised_file`, the memorised weights of its derived repo
(byom/memorised.safetensors, made once by its prepare step and checked against byom/SHA256SUMS
beside it): the perplexity bound is relative to that model.
"""

from __future__ import annotations

import hashlib
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
import yaml
from safetensors.torch import load_file

from ai4ai.core.hidden import write_splits

from . import source

HERE = Path(__file__).resolve().parent
ARTIFACTS = HERE.parent.parent / "repos_frozen" / "unlearning" / "artifacts"
# the prepared models the bound is relative to, pinned (ci and smoke share memorised_small)
ARTIFACT_SHA256 = {"memorised_small": "e6a59782b1c7a581266e23c0056101ef05a93f59976a151ff2510e5f95e683e2"}
PPL_BOUND = 1.5  # general-text perplexity above 1.5 x the prepared model's scores 0
TEXT_SEQUENCES = {"selection": 256, "test": 512, "validation": 256}
# sizes in facts (forget + held-out retain)
# The forget set is given to the algorithm and is scored whole in every split; the retain facts
# of the splits are disjoint: selection and validation held out, test = held out + the visible ones.
SPLITS = {
    "selection": source.GROUPS["forget"] + source.GROUPS["retain_selection"],
    "test": source.GROUPS["forget"] + source.GROUPS["retain_test"] + source.GROUPS["retain"],
    "validation": source.GROUPS["forget"] + source.GROUPS["retain_validation"],
}
TEXT_TRAIN_SEQUENCES = 20_000


@lru_cache(maxsize=1)
def _secrets() -> dict:
    return yaml.safe_load((HERE / "secrets.yaml").read_text())


@lru_cache(maxsize=1)
def _facts() -> dict:
    return source.all_facts(_secrets()["facts"])


@lru_cache(maxsize=1)
def _lexicon():
    return source.lexicon(_secrets()["lexicon"])


def _text(name: str, n: int) -> np.ndarray:
    return source.general_text(n, _lexicon(), _secrets()[name])


def split(name: str, cfg=None) -> dict:
    """A hidden split: forget facts, retain facts and general text, regenerated from secret seeds."""
    f = _facts()
    retain = {
        "selection": f["retain_selection"],
        "validation": f["retain_validation"],
        "test": np.concatenate([f["retain_test"], f["retain"]]),
    }[name]
    return {"name": name, "forget": f["forget"], "retain": retain, "text": _text(f"text_{name}", TEXT_SEQUENCES[name])}


# ------------------------------------------------------------------------------ measurement


def _t(a: np.ndarray, device) -> torch.Tensor:
    return torch.from_numpy(a.astype(np.int64)).to(device)


@torch.no_grad()
def _correct(model: torch.nn.Module, facts: np.ndarray, batch: int = 1024) -> np.ndarray:
    """Per fact: 1 if the greedy completion of its prompt is its value (argmax over every symbol)."""
    device = next(model.parameters()).device
    x = _t(facts, device)
    out = []
    for i in range(0, len(x), batch):
        b = x[i : i + batch]
        if _own_file(model):
            logits = model(input_ids=b[:, : source.VALUE_POS], logits_to_keep=1).logits[:, -1].double()
        else:
            h = model.transformer(input_ids=b[:, : source.VALUE_POS]).last_hidden_state[:, -1]
            logits = model.lm_head(h).double()
        ok = (logits.argmax(-1) == b[:, source.VALUE_POS]) & torch.isfinite(logits).all(-1)
        out.append(ok.cpu().numpy())
    return np.concatenate(out).astype(np.float64)


@torch.no_grad()
def _ppl(model: torch.nn.Module, text: np.ndarray, batch: int = 128) -> float:
    device = next(model.parameters()).device
    x = _t(text, device)
    total = 0.0
    for i in range(0, len(x), batch):
        b = x[i : i + batch]
        logp = torch.log_softmax(model(input_ids=b).logits[:, :-1].float(), -1)
        total += float(-logp.gather(-1, b[:, 1:, None]).double().sum())
    v = math.exp(total / (x.shape[0] * (x.shape[1] - 1))) if math.isfinite(total) else math.inf
    return v


_REF: dict = {}


def _own_file(model: torch.nn.Module) -> str | None:
    """The memorised weights of your own model (set by the pristine build_model); None: the repo's GPT-2."""
    return getattr(model, "memorised_file", None)


def _own_reference(model: torch.nn.Module, path: str) -> torch.nn.Module:
    """Your own model's memorised weights (checked against the SHA256SUMS beside them) in a copy of `model`."""
    import copy

    from safetensors.torch import load

    path = Path(path)
    raw = path.read_bytes()
    sums = dict(reversed(line.split()) for line in (path.parent / "SHA256SUMS").read_text().splitlines())
    if hashlib.sha256(raw).hexdigest() != sums.get(path.name):
        raise RuntimeError(f"{path}: sha256 differs from {path.parent / 'SHA256SUMS'}")
    ref = copy.deepcopy(model)
    ref.load_state_dict(load(raw), strict=False)
    return ref.eval()


def _reference_ppl(model: torch.nn.Module, text: np.ndarray) -> float:
    """Perplexity of the prepared (memorised) model with the same architecture on `text`."""
    import copy

    own = _own_file(model)
    if own:
        key = (own, hashlib.sha256(text.tobytes()).hexdigest())
        if key not in _REF:
            _REF[key] = _ppl(_own_reference(model, own), text)
        return _REF[key]
    shapes = {k: tuple(v.shape) for k, v in model.named_parameters()}
    key = (tuple(sorted(shapes.items())), hashlib.sha256(text.tobytes()).hexdigest())
    if key not in _REF:
        for path in sorted(ARTIFACTS.glob("*.safetensors")):
            pinned = ARTIFACT_SHA256.get(path.stem)
            if pinned is not None and hashlib.sha256(path.read_bytes()).hexdigest() != pinned:
                raise RuntimeError(f"{path} does not match its pinned sha256")
            sd = load_file(str(path))
            if {k: tuple(v.shape) for k, v in sd.items()} == shapes:
                ref = copy.deepcopy(model)
                ref.load_state_dict(sd, strict=False)
                _REF[key] = _ppl(ref.eval(), text)
                break
        else:
            raise FileNotFoundError(f"no prepared artifact in {ARTIFACTS} matches the model's shapes")
    return _REF[key]


def _measure(model: torch.nn.Module, split: dict) -> dict:
    fc, rc = _correct(model, split["forget"]), _correct(model, split["retain"])
    ppl = _ppl(model, split["text"])
    ref = _reference_ppl(model, split["text"])
    return {"forget": fc, "retain": rc, "ppl": ppl, "ref_ppl": ref, "valid": ppl <= PPL_BOUND * ref}


def harmonic(forget_efficacy: float, retain_acc: float) -> float:
    s = forget_efficacy + retain_acc
    return 0.0 if s <= 0 else 2.0 * forget_efficacy * retain_acc / s


def score(forget_acc: float, retain_acc: float, ppl: float, ref_ppl: float) -> float:
    """The raw metric from its parts: harmonic mean, or 0 past the perplexity bound (or non-finite)."""
    if not (math.isfinite(ppl) and ppl <= PPL_BOUND * ref_ppl):
        return 0.0
    return harmonic(1.0 - forget_acc, retain_acc)


def evaluate(model: torch.nn.Module, split: dict, cfg=None) -> float:
    """Harmonic mean of forget efficacy and retain accuracy; 0 past the perplexity bound."""
    m = _measure(model, split)
    return score(m["forget"].mean(), m["retain"].mean(), m["ppl"], m["ref_ppl"])


def evaluate_with_noise(model: torch.nn.Module, split: dict, cfg=None) -> tuple[float, float]:
    """(metric, its standard error from sampling the facts), by the delta method.

    The best predictor scores 1 on every fact, so the per-fact excess is the miss indicator;
    the harmonic mean's standard error combines the two means' errors with its partial derivatives.
    """
    m = _measure(model, split)
    f, r = 1.0 - m["forget"].mean(), m["retain"].mean()
    raw = score(m["forget"].mean(), r, m["ppl"], m["ref_ppl"])
    s = f + r
    if s <= 0:
        return raw, 0.0
    df, dr = 2 * r * r / s**2, 2 * f * f / s**2
    var = df**2 * m["forget"].var(ddof=1) / len(m["forget"]) + dr**2 * m["retain"].var(ddof=1) / len(m["retain"])
    return raw, float(math.sqrt(var))


def details(model: torch.nn.Module, split: dict) -> dict:
    """Forget and retain accuracy, perplexity and its bound (for tests and diagnosis)."""
    m = _measure(model, split)
    return {
        "forget_acc": float(m["forget"].mean()),
        "retain_acc": float(m["retain"].mean()),
        "ppl": m["ppl"],
        "ref_ppl": m["ref_ppl"],
        "valid": bool(m["valid"]),
        "metric": score(m["forget"].mean(), m["retain"].mean(), m["ppl"], m["ref_ppl"]),
    }


def uninformative(model: torch.nn.Module) -> torch.nn.Module:
    """The no-information model: every parameter zero (all logits 0: it recalls nothing)."""
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model


# ------------------------------------------------------------------------------ files


def materialize(scale: str, dest: Path) -> dict:
    """The repo's data files (the same at every scale): forget set, visible retain subset, validation."""
    f = _facts()
    val = split("validation")
    return write_splits(
        dest,
        {
            "forget.npy": f["forget"],
            "retain.npy": f["retain"],
            "val_retain.npy": val["retain"],
            "val_text.npy": val["text"],
        },
    )


def prepare_data(dest: Path) -> dict:
    """What prepare.py memorises: every fact, and a general-text corpus. Never committed to the repo."""
    f = _facts()
    return write_splits(
        dest,
        {
            "facts_all.npy": np.concatenate(list(f.values())),
            "text_train.npy": _text("general_train", TEXT_TRAIN_SEQUENCES),
        },
    )
