"""Checkpoints: weights only, safetensors, written atomically; and the prepared policy. Protected.

The grader reads `ckpt_{step:08d}.safetensors` from the output folder and chooses among the
last three; it loads exactly the model's parameter keys (tied weights once) in fp32. A model wrapped
with a peft adapter (config.ADAPTER "lora") is saved merged: its adapter folded into a copy of the
weights (merge_and_unload), so a checkpoint is always the model's own parameters.
"""
import copy
import hashlib
import json
import os
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from config import BYOM, TOKEN_IDS
from model import build_model

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


def policy_path(scale: str) -> Path:
    """The prepared policy: artifacts/policy_<scale>.safetensors, or byom/policy.safetensors (one for
    every scale) with your own model."""
    return BYOM / "policy.safetensors" if TOKEN_IDS is not None else ARTIFACTS / f"policy_{scale}.safetensors"


def save_checkpoint(model: torch.nn.Module, out: str, step: int, keep_last: int = 3,
                    metadata: dict | None = None) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(model, "merge_and_unload"):          # a peft model: the adapter merged into a copy
        model = copy.deepcopy(model).merge_and_unload()
    # named_parameters() yields each tied tensor once (lm_head.weight is transformer.wte.weight)
    weights = {k: v.detach().float().cpu().contiguous() for k, v in model.named_parameters()}
    path = out / f"ckpt_{step:08d}.safetensors"
    tmp = out / f".{path.name}.tmp"
    save_file(weights, str(tmp))
    os.replace(tmp, path)
    if metadata is not None:
        meta_tmp = out / f".ckpt_{step:08d}.json.tmp"
        meta_tmp.write_text(json.dumps({"step": step, **metadata}))
        os.replace(meta_tmp, out / f"ckpt_{step:08d}.json")
    for old in sorted(out.glob("ckpt_*.safetensors"))[:-keep_last]:
        old.unlink()
        old.with_suffix(".json").unlink(missing_ok=True)
    return path


def load_policy(scale: str) -> torch.nn.Module:
    """The prepared policy of `scale` (artifacts/policy_<scale>.safetensors, made by prepare.py),
    after checking its sha256 against artifacts/SHA256SUMS. It is the DPO reference."""
    path = policy_path(scale)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing: run `python prepare.py --scale {scale}`")
    sums = dict(reversed(line.split()) for line in (path.parent / "SHA256SUMS").read_text().splitlines())
    if sums.get(path.name) != hashlib.sha256(path.read_bytes()).hexdigest():
        raise RuntimeError(f"{path}: checksum does not match artifacts/SHA256SUMS")
    model = build_model(scale)
    model.load_state_dict(load_file(str(path)), strict=False)   # strict except the tied lm_head
    return model
