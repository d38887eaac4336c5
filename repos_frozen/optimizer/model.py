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


def train_autocast(scale: str, device) -> torch.autocast:
    """The precision of training's forward and loss at `scale` (config.Scale.bf16): bf16 autocast at
    `quick` and `full`, as a research repo trains on a GPU (on any device type, so that the shrunk GPU-tier tests run
    this path on a CPU); a disabled context at ci and smoke, where training is fp32 exactly as without
    it. Parameters, gradients, optimizer state and checkpoints stay fp32 (the grader loads fp32 only);
    evaluation never enters it and runs in fp32 with TF32 off."""
    return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16,
                          enabled=get_scale(scale).bf16)
