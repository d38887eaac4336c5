"""Proxy evaluation: exact match of greedy answers on the visible validation split. Protected.

    python evaluate.py DIR_OR_CKPT --scale smoke

The model reads each validation prompt (<bos> ... ':') and writes greedily until <eos> (or
SEQ_LEN); the answer is the value after the last '>'. A problem counts when that value is
exactly right. The benchmark's score uses hidden problems the agent never sees (same
distribution); the validation split here is for development only and is absent from the
grader's training run.
"""
import argparse
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file
from transformers.modeling_outputs import CausalLMOutputWithPast

from config import ANSWER_MARK, EOS, SEQ_LEN, decode
from data import load_sequences, prompt_lengths
from model import build_model

# transformers names the key/value cache `cache` (forward's argument, the output's field) from 5.24 and
# `past_key_values` before; later 5.x accept the older name with a warning until 5.40 drops it.
CACHE = "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def load_checkpoint(path: str, scale: str) -> torch.nn.Module:
    model = build_model(scale)
    model.load_state_dict(load_file(path), strict=False)
    return model.eval()


@torch.no_grad()
def greedy_complete(model: torch.nn.Module, prompts: torch.Tensor, batch: int = 1024) -> list[str]:
    """prompts: [N, SEQ_LEN] token rows (anything after the prompt is ignored) -> completions as text."""
    lens = prompt_lengths(prompts)
    out = [""] * len(prompts)
    for L in sorted(set(lens.tolist())):                      # equal prompt lengths: no padding needed
        rows = torch.nonzero(lens == L).flatten()
        for i in range(0, len(rows), batch):
            idx = rows[i:i + batch]
            res = model(input_ids=prompts[idx, :L], use_cache=True)
            toks = []
            for t in range(SEQ_LEN - L):
                nxt = res.logits[:, -1].argmax(-1, keepdim=True)
                toks.append(nxt)
                if t + 1 == SEQ_LEN - L or bool((torch.cat(toks, 1) == EOS).any(1).all()):
                    break
                res = model(input_ids=nxt, use_cache=True, **{CACHE: getattr(res, CACHE)})
            gen = torch.cat(toks, 1)
            for j, r in zip(idx.tolist(), gen):
                out[j] = decode(r)
    return out


def answer_of(sequence: torch.Tensor) -> str:
    """The reference answer of a full validation row: the value after '>'."""
    row = sequence.tolist()
    return decode(row[row.index(ANSWER_MARK) + 1:])


def exact_match(model: torch.nn.Module, rows: torch.Tensor) -> float:
    done = greedy_complete(model, rows)
    ok = [c.rfind(">") >= 0 and c[c.rfind(">") + 1:] == answer_of(r) for c, r in zip(done, rows)]
    return float(np.mean(ok))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("path")
    p.add_argument("--scale", required=True)
    args = p.parse_args()
    torch.set_num_threads(1)
    path = Path(args.path)
    ckpts = sorted(path.glob("ckpt_*.safetensors")) if path.is_dir() else [path]
    val = load_sequences("val")
    for ckpt in ckpts:
        print(f"{ckpt.name}  validation exact match {exact_match(load_checkpoint(str(ckpt), args.scale), val):.4f}")
