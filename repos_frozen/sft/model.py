"""The model: a small GPT-2 built from a config, and the prepared base weights. Protected.

With your own model (byom/, see README) it is that model's architecture, built from its config
(byom/model/config.json), and the base weights are byom/base.safetensors."""
import hashlib
from pathlib import Path

import torch
from safetensors.torch import load
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel

from config import BYOM, SEQ_LEN, TOKEN_IDS, VOCAB, get_scale

REPO = Path(__file__).resolve().parent
ARTIFACTS = REPO / "artifacts"


def build_model(scale: str) -> GPT2LMHeadModel:
    """GPT-2 for `scale`, fp32, input and output embeddings tied, no dropout, random init."""
    if TOKEN_IDS is not None:
        return build_own_model()
    s = get_scale(scale)
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=s.n_embd, n_layer=s.n_layer,
        n_head=s.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).float()


def build_own_model() -> torch.nn.Module:
    """Your own model's architecture from its config (byom/model), fp32, random init, the same at
    every scale. `task_token_ids` (task token -> model token) tells the grader how to talk to it."""
    cfg = AutoConfig.from_pretrained(BYOM / "model", local_files_only=True)
    model = AutoModelForCausalLM.from_config(cfg).float()
    model.task_token_ids = list(TOKEN_IDS)
    return model


def base_path(scale: str) -> Path:
    return BYOM / "base.safetensors" if TOKEN_IDS is not None else ARTIFACTS / f"base_{scale}.safetensors"


def load_base(model: torch.nn.Module, scale: str) -> torch.nn.Module:
    """Load the prepared base model (made by prepare.py) into `model`, after checking its sha256."""
    path = base_path(scale)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python prepare.py --scale {scale}`")
    raw = path.read_bytes()
    sums = dict(reversed(line.split()) for line in (path.parent / "SHA256SUMS").read_text().splitlines())
    if sums.get(path.name) != hashlib.sha256(raw).hexdigest():
        raise RuntimeError(f"{path}: checksum does not match artifacts/SHA256SUMS")
    weights = load(raw)
    names = {k for k, _ in model.named_parameters()}      # tied lm_head.weight is stored once (as wte)
    if set(weights) != names:
        raise RuntimeError(f"{path}: parameter names differ from the model's ({sorted(set(weights) ^ names)[:5]})")
    model.load_state_dict(weights, strict=False)
    return model
