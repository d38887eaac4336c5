"""The model: a small GPT-2 over the task's symbols, built from config, random init. Protected.

The memorised weights are loaded by training code from the prepared artifact (data.load_prepared).

With your own model (byom/, see README) it is that model's architecture, built from its config
(byom/model/config.json) and wrapped in `OwnLM`, which speaks the task's symbols; the memorised
weights are byom/memorised.safetensors (prepare.py --own-model).
"""
import torch
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from config import BYOM, TEXT_LEN, TOKEN_IDS, VALUE_POS, VOCAB, get_scale


class OwnLM(torch.nn.Module):
    """Your own causal LM (`lm`) over the task's symbols: symbol ids in (mapped to the model's tokens
    through TOKEN_IDS, a buffer that is not saved), next-symbol logits [.., VOCAB] out: the model's
    logits of the VOCAB symbols' tokens (the rows of its LM head for them). `logits_to_keep` and the
    other arguments go to the model. `memorised_file` tells the grader which memorised weights the
    perplexity bound is relative to."""

    def __init__(self, lm: torch.nn.Module, token_ids: list):
        super().__init__()
        self.lm = lm
        self.config = lm.config
        self.memorised_file = str(BYOM / "memorised.safetensors")
        self.register_buffer("token_ids", torch.tensor(token_ids, dtype=torch.long), persistent=False)

    def forward(self, input_ids: torch.Tensor, **kw) -> CausalLMOutputWithPast:
        kw.setdefault("use_cache", False)
        out = self.lm(input_ids=self.token_ids[input_ids], **kw)
        return CausalLMOutputWithPast(logits=out.logits[..., self.token_ids])


def build_model(scale: str) -> torch.nn.Module:
    """GPT-2 for `scale`, fp32, input and output embeddings tied, no dropout, random init. With your
    own model: its architecture (byom/model), fp32, random init, the same at every scale (OwnLM)."""
    if TOKEN_IDS is not None:
        cfg = AutoConfig.from_pretrained(BYOM / "model", local_files_only=True)
        return OwnLM(AutoModelForCausalLM.from_config(cfg).float(), TOKEN_IDS)
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
    if isinstance(model, OwnLM):
        return model(input_ids=facts[:, :VALUE_POS], logits_to_keep=1).logits[:, -1].float()
    hidden = model.transformer(input_ids=facts[:, :VALUE_POS]).last_hidden_state[:, -1]
    return model.lm_head(hidden).float()


def text_nll(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Per-position -log p(x_t | x_<t) in nats for t = 1..T-1. tokens: [B, T] -> [B, T-1]."""
    logits = model(input_ids=tokens).logits[:, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)
