"""Prepare the base LM: pretrain the backbone by next-token prediction on the unlabelled responses. Protected.

    python prepare.py --scale {ci,smoke,full}
    python prepare.py --own-model PATH     # your own model (byom/, see README): its weights are the base

Deterministic (fixed seed, one CPU thread): writes artifacts/base_<scale>.safetensors (the
backbone's weights, `GPT2Model` keys) and its sha256 into artifacts/SHA256SUMS. The ci and smoke
artifacts are committed; training loads them with model.load_base, which checks the sha256.
"""
import argparse
import hashlib
import os
import time

import torch
from safetensors.torch import save_file

from config import PAD, get_scale
from data import load_unlabelled
from config import TOKEN_IDS
from model import ARTIFACTS, base_path, build_lm, build_model

LR = 3e-3
SEED = 0


def pretrain(scale: str, device: str = "cpu") -> dict:
    s = get_scale(scale)
    torch.manual_seed(SEED)
    seqs = load_unlabelled()
    lm = build_lm(scale).to(device)
    opt = torch.optim.AdamW(lm.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    order = torch.Generator().manual_seed(SEED)
    perm = torch.randperm(len(seqs), generator=order)
    t0 = time.time()
    for step in range(s.pretrain_steps):
        lr = LR * min(1.0, (step + 1) / 100) * (1.0 - step / s.pretrain_steps)   # warmup, linear decay
        for g in opt.param_groups:
            g["lr"] = lr
        idx = perm[(step * s.pretrain_batch) % len(seqs):][:s.pretrain_batch]
        x = seqs[idx].to(device)
        labels = x.masked_fill(x == PAD, -100)                     # no loss on padding
        loss = lm(input_ids=x, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 100 == 0 or step + 1 == s.pretrain_steps:
            print(f"pretrain {scale} step {step + 1}/{s.pretrain_steps} loss {loss.item():.4f} "
                  f"elapsed {time.time() - t0:.1f}s", flush=True)
    return {k: v.detach().float().cpu().contiguous() for k, v in lm.transformer.named_parameters()}


def own_base(source: str) -> dict:
    """Your own model as the base, unchanged: the reward model's backbone is the pretrained model
    without its LM head (a head is put on it, as on a real base LM). Its weights, fp32."""
    from transformers import AutoModel
    names = {k for k, _ in build_model("ci").backbone.named_parameters()}
    weights = {k: v.detach().float().contiguous()
               for k, v in AutoModel.from_pretrained(source, local_files_only=True, dtype=torch.float32).named_parameters()}
    if set(weights) != names:
        raise SystemExit(f"{source}: its parameters differ from the backbone its config builds")
    return weights


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scale")
    p.add_argument("--own-model", help="folder of your own model (byom/ must be set up by the harness)")
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    if (args.scale is None) == (args.own_model is None):
        p.error("give --scale or --own-model")
    if args.own_model is not None and TOKEN_IDS is None:
        p.error("--own-model needs byom/vocab.json: run the task with task.model_path=PATH (README)")
    if args.device == "cpu":
        torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    weights = pretrain(args.scale, args.device) if args.own_model is None else own_base(args.own_model)
    path = base_path(args.scale)
    path.parent.mkdir(exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    save_file(weights, str(tmp))
    os.replace(tmp, path)
    sums_path = path.parent / "SHA256SUMS"
    sums = {}
    if sums_path.exists():
        sums = {name: digest for digest, name in (line.split() for line in sums_path.read_text().splitlines())}
    sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    sums_path.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
    print(f"wrote {path} sha256 {sums[path.name]}")
