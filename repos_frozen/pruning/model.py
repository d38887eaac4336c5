"""The model: a small GPT-2 built from a config, and the prepared dense weights. Protected.

With your own model (byom/, see README) it is that model's architecture, built from its config
(byom/model/config.json) and wrapped in `OwnLM`, which speaks the 32 symbols; the dense weights
are byom/dense.safetensors (prepare.py --own-model)."""
import hashlib
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load

from config import BYOM, SEQ_LEN, TOKEN_IDS, VOCAB, get_scale, is_prunable
from transformers import AutoConfig, AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel
from transformers.modeling_outputs import CausalLMOutputWithPast
from transformers.pytorch_utils import Conv1D

# transformers names the key/value cache `cache` (forward's argument, the output's field) from 5.24 and
# `past_key_values` before; later 5.x accept the older name with a warning until 5.40 drops it.
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"

REPO = Path(__file__).resolve().parent


class OwnLM(torch.nn.Module):
    """Your own causal LM (`lm`) over the task's symbols: symbol ids in (mapped to the model's tokens
    through TOKEN_IDS, a buffer that is not saved), next-symbol logits [.., VOCAB] out: the model's
    logits of the 32 symbols' tokens (the rows of its LM head for them). Other arguments go to the
    model; `labels` (symbol ids) gives the shifted next-token loss. `dense_file` tells the grader
    which dense weights this model was pruned from."""

    def __init__(self, lm: torch.nn.Module, token_ids: list):
        super().__init__()
        self.lm = lm
        self.config = lm.config
        self.dense_file = str(BYOM / "dense.safetensors")
        self.register_buffer("token_ids", torch.tensor(token_ids, dtype=torch.long), persistent=False)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None, **kw) -> CausalLMOutputWithPast:
        for name in ("cache", "past_key_values"):     # either name of the cache, as this transformers calls it
            if name != CACHE and name in kw:
                kw[CACHE] = kw.pop(name)
        out = self.lm(input_ids=self.token_ids[input_ids], **kw)
        logits = out.logits[..., self.token_ids]
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1))
        return CausalLMOutputWithPast(loss=loss, logits=logits, **{CACHE: getattr(out, CACHE)})


def build_model(scale: str) -> torch.nn.Module:
    """GPT-2 for `scale`, fp32, random init, input and output embeddings tied, no dropout. With your
    own model: its architecture (byom/model), fp32, random init, the same at every scale (OwnLM)."""
    if TOKEN_IDS is not None:
        cfg = AutoConfig.from_pretrained(BYOM / "model", local_files_only=True)
        return OwnLM(AutoModelForCausalLM.from_config(cfg).float(), TOKEN_IDS)
    s = get_scale(scale)
    cfg = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=s.n_embd, n_layer=s.n_layer,
        n_head=s.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, tie_word_embeddings=True,
    )
    return GPT2LMHeadModel(cfg).float()


def dense_path(scale: str) -> Path:
    if TOKEN_IDS is not None:
        return BYOM / "dense.safetensors"
    return REPO / "artifacts" / f"{get_scale(scale).dense}.safetensors"


def dense_state(scale: str) -> dict:
    """The prepared dense weights of `scale` (name -> fp32 tensor), after checking their sha256."""
    path = dense_path(scale)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python prepare.py --scale {scale}`")
    raw = path.read_bytes()
    sums = dict(reversed(line.split()) for line in (path.parent / "SHA256SUMS").read_text().splitlines())
    if hashlib.sha256(raw).hexdigest() != sums.get(path.name):
        raise RuntimeError(f"{path}: checksum does not match {path.parent.name}/SHA256SUMS")
    return load(raw)


def load_dense(scale: str) -> torch.nn.Module:
    """The dense model every pruning run starts from."""
    model = build_model(scale)
    model.load_state_dict(dense_state(scale), strict=False)   # lm_head.weight is tied to wte
    return model.eval()


def prunable_parameters(model: torch.nn.Module) -> dict:
    """name -> parameter of the tensors that count toward the sparsity target (the Conv1D weights
    of attention and MLP; GPT-2's Conv1D stores them as [in_features, out_features]). Your own
    model's: the weight of every linear layer (nn.Linear, Conv1D) but its LM head, in module order
    (nn.Linear stores [out_features, in_features])."""
    if isinstance(model, OwnLM):
        head = model.lm.get_output_embeddings()
        return {f"{n}.weight": m.weight for n, m in model.named_modules()
                if isinstance(m, (torch.nn.Linear, Conv1D)) and m is not head}
    return {n: p for n, p in model.named_parameters() if is_prunable(n)}


def next_token_nll(model: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """Per-position -log p(x_t | x_<t) in nats for t = 1..T-1. tokens: [B, T] -> [B, T-1]."""
    logits = model(input_ids=tokens).logits[:, :-1].float()          # [B, T-1, V]
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, tokens[:, 1:, None]).squeeze(-1)          # [B, T-1]
