"""Checkpoints: weights only, safetensors, written atomically. Protected.

The grader reads `ckpt_{step:08d}.safetensors` from the output folder and chooses among the
last three; it loads exactly the model's parameter keys (tied weights once) in fp32. A model
whose `lm` is wrapped with a peft adapter (config.ADAPTER "lora", your own model) is saved
merged: the adapter folded into a copy of the weights (merge_and_unload), so a checkpoint is
always the model's own parameters.
"""
import copy
import json
import os
from pathlib import Path

import torch
from safetensors.torch import save_file


def save_checkpoint(model: torch.nn.Module, out: str, step: int, keep_last: int = 3,
                    metadata: dict | None = None) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if hasattr(getattr(model, "lm", None), "merge_and_unload"):   # a peft adapter: merged into a copy
        model = copy.deepcopy(model)
        model.lm = model.lm.merge_and_unload()
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
