"""The policy: a small GPT-2 over the character vocabulary, built from config, random init. Protected.

The prepared policy (the DPO reference) is loaded by the training code from artifacts/ (see
prepare.py and artifacts.py); build_model itself only builds the architecture. With your own model
(byom/, see README) it is that model's architecture, built from byom/model/config.json.
"""
import torch
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from config import BYOM, EOS, SEQ_LEN, TOKEN_IDS, VOCAB, get_scale

# transformers names the key/value cache `cache` (forward's argument, the output's field) from 5.24 and
# `past_key_values` before; later 5.x accept the older name with a warning until 5.40 drops it.
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def build_model(scale: str) -> GPT2LMHeadModel:
    """GPT-2 for `scale`, fp32, input and output embeddings tied, no dropout."""
    if TOKEN_IDS is not None:
        return build_own_model()
    s = get_scale(scale)
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=s.n_embd, n_layer=s.n_layer,
        n_head=s.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        activation_function="gelu", bos_token_id=None, eos_token_id=None, pad_token_id=None,
        tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).float()


def build_own_model() -> torch.nn.Module:
    """Your own model's architecture from its config (byom/model), fp32, random init, the same at
    every scale. `task_token_ids` (task token -> model token) tells the grader how to talk to it."""
    cfg = AutoConfig.from_pretrained(BYOM / "model", local_files_only=True)
    model = AutoModelForCausalLM.from_config(cfg).float()
    model.task_token_ids = list(TOKEN_IDS)
    return model


def token_logps(model: torch.nn.Module, seqs: torch.Tensor) -> torch.Tensor:
    """log p(x_t | x_<t) for t = 1..T-1. seqs: [B, T] int64 -> [B, T-1] float32."""
    logits = model(input_ids=seqs).logits[:, :-1].float()
    return torch.log_softmax(logits, -1).gather(-1, seqs[:, 1:, None]).squeeze(-1)


def answer_mask(seqs: torch.Tensor, prompt_lens: torch.Tensor) -> torch.Tensor:
    """[B, T-1] mask of the positions of token_logps that score the answer and its EOS."""
    B, T = seqs.shape
    pos = torch.arange(1, T, device=seqs.device)[None]                    # target position t
    is_eos = (seqs == EOS).long()
    # the first EOS at or after the prompt ends the answer (it is scored, the padding after it is not)
    after = torch.arange(T, device=seqs.device)[None] >= prompt_lens[:, None]
    first_eos = torch.where(after & (is_eos == 1), torch.arange(T, device=seqs.device)[None], T).min(1).values
    return (pos >= prompt_lens[:, None]) & (pos <= first_eos[:, None])


@torch.no_grad()
def greedy_generate(model: torch.nn.Module, prompts: torch.Tensor, max_len: int = SEQ_LEN) -> torch.Tensor:
    """Greedy continuation of equal-length prompts [B, P] up to `max_len` tokens in all.

    Returns [B, max_len - P] generated tokens; after a sequence's first EOS everything is EOS.
    Ties go to the lowest token id (torch.argmax), so all-equal logits give EOS.
    """
    model.eval()
    B, P = prompts.shape
    out = torch.zeros(B, max_len - P, dtype=torch.long, device=prompts.device)
    done = torch.zeros(B, dtype=torch.bool, device=prompts.device)
    res = model(input_ids=prompts, use_cache=True)
    past = getattr(res, CACHE)
    for t in range(max_len - P):
        nxt = res.logits[:, -1].float().argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, EOS), nxt)
        out[:, t] = nxt
        done |= nxt == EOS
        if bool(done.all()) or t == max_len - P - 1:
            break
        res = model(input_ids=nxt[:, None], use_cache=True, **{CACHE: past})
        past = getattr(res, CACHE)
    return out
