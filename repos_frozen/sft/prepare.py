"""Prepare the base model: pretrain the GPT on worked solutions of short chains. Protected.

    python prepare.py --scale smoke        # writes artifacts/base_smoke.safetensors + SHA256SUMS
    python prepare.py --own-model PATH     # your own model (byom/, see README): its weights are the base

Deterministic (fixed seed, one thread, fixed order) from the committed data/pretrain.u8;
under a minute on one CPU thread at smoke. The ci and smoke bases are committed, so the
training code only loads them (model.load_base checks their sha256). The corpus holds 8,192
worked problems of 1 to 6 operators (Zipf operator frequencies, exponent 1.5); loss on the worked steps and
the answer. In 1,000 steps the base learns the format and how to follow a chain, and the facts
of the common operators; it solves about 3% of 6-operator problems.
"""
import argparse
import hashlib
import math
import time

import torch
from safetensors.torch import save_file

from config import PAD, STOI, get_scale
from data import load_sequences
from model import ARTIFACTS, BYOM, base_path, build_model

LR, WARMUP, BATCH = 3e-3, 100, 32


def pretrain(scale: str, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(0)
    steps = get_scale(scale).pretrain_steps
    corpus = load_sequences("pretrain")
    model = build_model(scale).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.0)
    order = torch.Generator().manual_seed(0)
    eq = STOI["="]
    t0 = time.time()
    for step in range(steps):
        x = corpus[torch.randint(0, len(corpus), (BATCH,), generator=order)].to(device)
        lr = LR * min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for g in opt.param_groups:
            g["lr"] = lr
        after = (x == eq).cumsum(1) > 0                                   # from the completion's first '=' on
        labels = x.masked_fill(~after | (x == PAD), -100)                  # loss on the worked steps and answer
        loss = model(input_ids=x, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 250 == 0 or step + 1 == steps:
            print(f"pretrain step {step + 1}/{steps} loss {loss.item():.4f} {time.time() - t0:.1f}s", flush=True)
    return model.cpu()


def own_base(source: str) -> torch.nn.Module:
    """Your own model as the base, unchanged: SFT starts from the pretrained model, as OpenR1 starts
    from Qwen (the pretraining corpus stays free to use). Its weights, fp32, in this repo's layout."""
    from transformers import AutoModelForCausalLM
    model = build_model("ci")
    given = AutoModelForCausalLM.from_pretrained(source, local_files_only=True, dtype=torch.float32)
    weights = dict(given.named_parameters())
    if set(weights) != {k for k, _ in model.named_parameters()}:
        raise SystemExit(f"{source}: its parameters differ from the model its config builds")
    with torch.no_grad():
        for k, p in model.named_parameters():
            p.copy_(weights[k])
    return model


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scale")
    p.add_argument("--device", default="cpu")   # cuda at full (python -m ai4ai.prepare)
    p.add_argument("--own-model", help="folder of your own model (byom/ must be set up by the harness)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if (args.scale is None) == (args.own_model is None):
        p.error("give --scale or --own-model")
    if args.own_model is not None and not (BYOM / "vocab.json").exists():
        p.error("--own-model needs byom/vocab.json: run the task with task.model_path=PATH (README)")
    model = pretrain(args.scale, args.device) if args.own_model is None else own_base(args.own_model)
    folder = ARTIFACTS if args.own_model is None else BYOM
    folder.mkdir(exist_ok=True)
    path = base_path(args.scale)
    tmp = path.with_suffix(".tmp")
    save_file({k: v.detach().cpu().contiguous() for k, v in model.named_parameters()}, str(tmp))
    tmp.replace(path)
    sums_path = folder / "SHA256SUMS"
    sums = dict(reversed(ln.split()) for ln in sums_path.read_text().splitlines()) if sums_path.exists() else {}
    sums[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    sums_path.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
    print(f"wrote {path} ({sums[path.name][:16]})")
