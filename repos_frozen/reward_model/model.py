"""The reward model: a small GPT-2 backbone and a scalar head. Protected.

`build_model(scale)` builds the architecture from config.py with random init (the grader calls
it too, then loads a checkpoint into it). The prepared base LM (artifacts/base_<scale>.safetensors,
made by prepare.py) is loaded into the backbone by the training code with `load_base`. With your
own model (byom/, see README) the backbone is that model's architecture without its LM head, built
from byom/model/config.json, and its base weights are byom/base.safetensors.
"""
import hashlib
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModel, GPT2Config, GPT2LMHeadModel, GPT2Model

from config import BYOM, END, SEQ_LEN, TOKEN_IDS, VOCAB, get_scale

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def gpt2_config(scale: str) -> GPT2Config:
    s = get_scale(scale)
    return GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ_LEN, n_embd=s.n_embd, n_layer=s.n_layer, n_head=s.n_head,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=None, eos_token_id=None,
        tie_word_embeddings=True,
        activation_function="gelu_pytorch_tanh",   # GPT-2's tanh GELU as one fused op (1.5x faster on CPU)
    )


class RewardModel(torch.nn.Module):
    """reward(prompt, response) = head(hidden state of the final '$' token): one float per sequence."""

    def __init__(self, cfg: GPT2Config, token_ids: list | None = None):
        super().__init__()
        self.backbone = GPT2Model(cfg) if token_ids is None else AutoModel.from_config(cfg)
        self.head = torch.nn.Linear(cfg.hidden_size, 1)
        if token_ids is None:
            self.token_ids = None
        else:           # your own model: task token -> its token (a buffer from pristine code, not saved)
            self.register_buffer("token_ids", torch.tensor(token_ids, dtype=torch.int64), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [B, SEQ_LEN] int64 (each row has one END) -> rewards [B] fp32."""
        ids = tokens if self.token_ids is None else self.token_ids[tokens]
        h = self.backbone(input_ids=ids).last_hidden_state                # [B, T, C]
        last = (tokens == END).int().argmax(dim=1)                         # position of '$'
        return self.head(h[torch.arange(tokens.shape[0], device=tokens.device), last]).squeeze(-1).float()


def build_model(scale: str) -> RewardModel:
    """The reward model for `scale`, fp32, random init (your own model's: the same at every scale)."""
    if TOKEN_IDS is not None:
        return RewardModel(AutoConfig.from_pretrained(BYOM / "model", local_files_only=True), TOKEN_IDS).float()
    return RewardModel(gpt2_config(scale)).float()


def build_lm(scale: str) -> GPT2LMHeadModel:
    """The language model prepare.py pretrains; its `transformer` is the reward model's backbone."""
    return GPT2LMHeadModel(gpt2_config(scale)).float()


def base_path(scale: str) -> Path:
    return BYOM / "base.safetensors" if TOKEN_IDS is not None else ARTIFACTS / f"base_{scale}.safetensors"


def load_base(model: RewardModel, scale: str) -> RewardModel:
    """Load the prepared base LM into `model.backbone` after checking its sha256 (artifacts/SHA256SUMS)."""
    path = base_path(scale)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python prepare.py --scale {scale}`")
    sums = dict(reversed(line.split()) for line in (path.parent / "SHA256SUMS").read_text().splitlines())
    if sums.get(path.name) != hashlib.sha256(path.read_bytes()).hexdigest():
        raise RuntimeError(f"{path}: checksum does not match artifacts/SHA256SUMS")
    model.backbone.load_state_dict(load_file(str(path)), strict=True)
    return model
