"""The model: a small GPT-2 built from a config, and the prepared dense weights. Protected."""
import hashlib
from pathlib import Path

import torch
from safetensors.torch import load

from config import SEQ_LEN, VOCAB, get_scale, is_prunable
from transformers import GPT2Config, GPT2LMHeadModel

REPO = Path(__file__).resolve().parent


def build_model(scale: str) -> GPT2LMHeadModel:
    """GPT-2 for `scale`, fp32, random init, input and output embeddings tied, no dropout."""
    s = get_scale(scale)
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=s.n_embd, n_layer=s.n_layer,
        n_head=s.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).float()


def dense_path(scale: str) -> Path:
    return REPO / "artifacts" / f"{get_scale(scale).dense}.safetensors"


def dense_state(scale: str) -> dict:
    """The prepared dense weights of `scale` (name -> fp32 tensor), after checking their sha256."""
    path = dense_path(scale)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python prepare.py --scale {scale}`")
    raw = path.read_bytes()
    sums = dict(reversed(line.split()) for line in (REPO / "artifacts" / "SHA256SUMS").read_text().splitlines())
    if hashlib.sha256(raw).hexdigest() != sums.get(path.name):
        raise RuntimeError(f"{path}: checksum does not match artifacts/SHA256SUMS")
    return load(raw)


def load_dense(scale: str) -> GPT2LMHeadModel:
    """The dense model every pruning run starts from."""
    model = build_model(scale)
    model.load_state_dict(dense_state(scale), strict=False)   # lm_head.weight is tied to wte
    return model.eval()


def prunable_parameters(model: torch.nn.Module) -> dict:
    """name -> parameter of the tensors that count toward the sparsity target (the Conv1D weights
    of attention and MLP; GPT-2's Conv1D stores them as [in_features, out_features])."""
    return {n: p for n, p in model.named_parameters() if is_prunable(n)}


def next_token_nll(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Per-position -log p(x_t | x_<t) in nats for t = 1..T-1. tokens: [B, T] -> [B, T-1]."""
    logits = model(input_ids=tokens).logits[:, :-1].float()          # [B, T-1, V]
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)          # [B, T-1]
