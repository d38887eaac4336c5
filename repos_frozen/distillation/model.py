"""The student and teacher GPTs, and greedy decoding. Protected."""
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from config import EOS, MAX_NEW, N_POSITIONS, PAD, VOCAB, get_scale


def _gpt(n_layer: int, n_embd: int, n_head: int) -> GPT2LMHeadModel:
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=N_POSITIONS, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).float()


def build_model(scale: str) -> GPT2LMHeadModel:
    """The student for `scale`: GPT-2, fp32, tied embeddings, no dropout, random init."""
    s = get_scale(scale)
    return _gpt(s.n_layer, s.n_embd, s.n_head)


def build_teacher(scale: str) -> GPT2LMHeadModel:
    """The teacher's architecture (its weights come from artifacts/, see teacher.py)."""
    s = get_scale(scale)
    return _gpt(s.teacher_layer, s.teacher_embd, s.teacher_head)


@torch.no_grad()
def greedy_generate(model: torch.nn.Module, prompts: torch.Tensor, max_new: int = MAX_NEW,
                    return_logits: bool = False, batch: int = 1024):
    """Greedy completion of left-padded prompts [B, PROMPT_W] (int64).

    Returns tokens [B, max_new] (int64, <pad> after the first <eos>) and, if asked, the logits
    [B, max_new, VOCAB] (float32) of each decoding step (zeros after <eos>). Uses the KV cache.
    """
    device = next(model.parameters()).device
    B = prompts.shape[0]
    out = torch.full((B, max_new), PAD, dtype=torch.long)
    out_logits = torch.zeros(B, max_new, VOCAB) if return_logits else None
    for i in range(0, B, batch):
        x = prompts[i:i + batch].to(device)
        done = torch.zeros(x.shape[0], dtype=torch.bool, device=device)
        res = model(input_ids=x, use_cache=True)
        for t in range(max_new):
            logits = res.logits[:, -1].float()
            nxt = torch.where(done, torch.full_like(done, PAD, dtype=torch.long), logits.argmax(-1))
            out[i:i + batch, t] = nxt.cpu()
            if return_logits:
                out_logits[i:i + batch, t] = torch.where(done[:, None], 0.0, logits).cpu()
            done = done | (nxt == EOS)
            if bool(done.all()) or t == max_new - 1:
                break
            res = model(input_ids=nxt[:, None], past_key_values=res.past_key_values, use_cache=True)
    return (out, out_logits) if return_logits else out
