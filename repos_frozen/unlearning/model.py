"""The model: a small GPT-2 over the task's symbols, built from config, random init. Protected.

The memorised weights are loaded by training code from the prepared artifact (data.load_prepared).
"""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from config import TEXT_LEN, VALUE_POS, VOCAB, get_scale


def build_model(scale: str) -> GPT2LMHeadModel:
    """GPT-2 for `scale`, fp32, input and output embeddings tied, no dropout, random init."""
    s = get_scale(scale)
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=TEXT_LEN, n_embd=s.n_embd, n_layer=s.n_layer,
        n_head=s.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).float()


def value_logits(model: torch.nn.Module, facts: torch.Tensor) -> torch.Tensor:
    """Logits over every symbol for each fact's value, from its prompt. facts: [B, FACT_LEN] -> [B, VOCAB].

    Greedy completion of a fact = argmax of these logits (the value is a single symbol).
    """
    hidden = model.transformer(input_ids=facts[:, :VALUE_POS]).last_hidden_state[:, -1]
    return model.lm_head(hidden).float()


def text_nll(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Per-position -log p(x_t | x_<t) in nats for t = 1..T-1. tokens: [B, T] -> [B, T-1]."""
    logits = model(input_ids=tokens).logits[:, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)
