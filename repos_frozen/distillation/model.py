"""The student and teacher GPTs, and greedy decoding. Protected.

With your own model (byom/, see README) the student is that model's architecture, built from its
config (byom/model/config.json) and wrapped in `OwnStudent`, which speaks the task's token ids:
the teacher, the files and `greedy_generate` stay as they are."""
import hashlib

import torch
import torch.nn.functional as F
from safetensors.torch import load
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from config import BYOM, EOS, MAX_NEW, N_POSITIONS, PAD, TOKEN_IDS, VOCAB, get_scale

# transformers names the key/value cache `cache` (forward's argument, the output's field) from 5.24 and
# `past_key_values` before; later 5.x accept the older name with a warning until 5.40 drops it.
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def _gpt(n_layer: int, n_embd: int, n_head: int) -> GPT2LMHeadModel:
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=N_POSITIONS, n_embd=n_embd, n_layer=n_layer, n_head=n_head,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).float()


class OwnStudent(torch.nn.Module):
    """Your own causal LM (`lm`) as the student, in the task's vocabulary: task token ids in (mapped
    to the model's through TOKEN_IDS, a buffer that is not saved), next-token logits [.., VOCAB]
    out, the model's logits of the task's tokens in task order (the rows of its LM head for them),
    so they compare with the teacher's. Two task tokens on one model token (GPT-2's <bos> is its
    <eos>) read as the later one, <eos>: the earlier one's column is SHADOWED, a constant (finite:
    the grader poisons non-finite logits), never the argmax. Other arguments (the cache,
    use_cache, attention_mask, ...) go to the model; `labels` (task ids, -100 ignored) gives the
    shifted next-token loss."""

    SHADOWED = -1e4

    def __init__(self, lm: torch.nn.Module, token_ids: list):
        super().__init__()
        self.lm = lm
        self.config = lm.config
        self.register_buffer("token_ids", torch.tensor(token_ids, dtype=torch.long), persistent=False)
        shadowed = [t in token_ids[i + 1:] for i, t in enumerate(token_ids)]
        self.register_buffer("shadowed", torch.tensor(shadowed, dtype=torch.bool), persistent=False)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **kw) -> CausalLMOutputWithPast:
        for name in ("cache", "past_key_values"):     # either name of the cache, as this transformers calls it
            if name != CACHE and name in kw:
                kw[CACHE] = kw.pop(name)
        out = self.lm(input_ids=self.token_ids[input_ids], **kw)
        logits = out.logits[..., self.token_ids].masked_fill(self.shadowed, self.SHADOWED)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                                   labels[:, 1:].reshape(-1), ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE: getattr(out, CACHE)})


def build_model(scale: str) -> torch.nn.Module:
    """The student for `scale`: GPT-2, fp32, tied embeddings, no dropout, random init. With your own
    model: its architecture (byom/model), fp32, random init, the same at every scale (OwnStudent)."""
    if TOKEN_IDS is not None:
        cfg = AutoConfig.from_pretrained(BYOM / "model", local_files_only=True)
        return OwnStudent(AutoModelForCausalLM.from_config(cfg).float(), TOKEN_IDS)
    s = get_scale(scale)
    return _gpt(s.n_layer, s.n_embd, s.n_head)


def load_base(model: torch.nn.Module) -> torch.nn.Module:
    """The student's starting weights: the repo's student starts from its random init (returned as
    it is); your own model from its pretrained weights, byom/base.safetensors (made by
    `prepare.py --own-model`), after checking their sha256."""
    if TOKEN_IDS is None:
        return model
    path = BYOM / "base.safetensors"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run the task with task.model_path=PATH (README)")
    raw = path.read_bytes()
    sums = dict(reversed(line.split()) for line in (BYOM / "SHA256SUMS").read_text().splitlines())
    if sums.get(path.name) != hashlib.sha256(raw).hexdigest():
        raise RuntimeError(f"{path}: checksum does not match byom/SHA256SUMS")
    weights, params = load(raw), dict(model.named_parameters())
    if set(weights) != set(params):
        raise RuntimeError(f"{path}: parameter names differ from the model's ({sorted(set(weights) ^ set(params))[:5]})")
    with torch.no_grad():
        for k, p in params.items():
            p.copy_(weights[k])
    return model


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
            res = model(input_ids=nxt[:, None], use_cache=True, **{CACHE: getattr(res, CACHE)})
    return (out, out_logits) if return_logits else out
