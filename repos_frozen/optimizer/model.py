"""The model: a small GPT-2 built from a config, random init. Protected."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from config import SEQ_LEN, VOCAB, get_scale


def build_model(scale: str) -> GPT2LMHeadModel:
    """GPT-2 for `scale`, fp32, input and output embeddings tied, no dropout."""
    s = get_scale(scale)
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=s.n_embd, n_layer=s.n_layer,
        n_head=s.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).float()


def next_token_nll(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Per-position -log p(x_t | x_<t) in nats for t = 1..T-1. tokens: [B, T] -> [B, T-1]."""
    logits = model(input_ids=tokens).logits[:, :-1].float()          # [B, T-1, V]
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)          # [B, T-1]
