"""Prepare the teacher: train it on the ground-truth set, deterministically. Protected.

    python prepare.py --scale smoke      # writes artifacts/teacher_smoke.safetensors + SHA256SUMS
    python prepare.py --own-model PATH   # your own model as the student (byom/, see README): its weights
                                         # are the student's start, byom/base.safetensors + SHA256SUMS

The teacher is a larger GPT (config.py: teacher_*) trained with next-token cross-entropy on
the answers of data/teacher_train.u8 (a labelled set that only this step reads), AdamW with
warmup and cosine decay, fixed seed, one thread. It is good but not perfect. The committed
artifacts for ci and smoke are what training and the grader use; rerunning this on another
machine may give different bits, and then the checksum no longer matches. The teacher is the
same with your own model as the student: only the student changes.
"""
import argparse
import hashlib
import math
import time
from pathlib import Path

import torch
from safetensors.torch import save_file

from config import BYOM, VOCAB, get_scale
from data import join, load_labelled
from model import build_model, build_teacher, greedy_generate

REPO = Path(__file__).resolve().parent
LR, BATCH, WARMUP, SEED = 5e-3, 64, 100, 0


def train_teacher(scale: str, device: str = "cpu") -> torch.nn.Module:
    torch.manual_seed(SEED)
    prompts, answers = load_labelled("teacher_train")
    tokens, targets = join(prompts, answers)
    model = build_teacher(scale).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.98), weight_decay=0.01)
    steps = get_scale(scale).teacher_steps
    g = torch.Generator().manual_seed(SEED)
    t0 = time.process_time()
    for step in range(steps):
        f = min(1.0, (step + 1) / WARMUP) * 0.5 * (1 + math.cos(math.pi * step / steps))
        for group in opt.param_groups:
            group["lr"] = LR * f
        idx = torch.randint(0, len(tokens), (BATCH,), generator=g)
        logits = model(input_ids=tokens[idx].to(device)).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), targets[idx].to(device).reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if (step + 1) % 250 == 0 or step + 1 == steps:
            print(f"step {step + 1}/{steps} loss {loss.item():.4f} cpu {time.process_time() - t0:.1f}s", flush=True)
    return model.cpu().eval()


def own_base(source: str) -> None:
    """Your own model's pretrained weights as the student's start (model.load_base), unchanged, fp32,
    in the student's layout (OwnStudent: `lm.` + the model's names): byom/base.safetensors."""
    from transformers import AutoModelForCausalLM
    model = build_model("ci")
    given = dict(AutoModelForCausalLM.from_pretrained(source, local_files_only=True, dtype=torch.float32)
                 .named_parameters())
    params = dict(model.lm.named_parameters())
    if set(given) != set(params):
        raise SystemExit(f"{source}: its parameters differ from the model its config builds")
    name = "base.safetensors"
    save_file({f"lm.{k}": given[k].detach().float().contiguous() for k in params}, str(BYOM / name))
    sums = {name: hashlib.sha256((BYOM / name).read_bytes()).hexdigest()}
    (BYOM / "SHA256SUMS").write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
    print(f"wrote {BYOM / name} ({sums[name][:16]})")


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--scale")
    p.add_argument("--device", default="cpu")   # cuda at full (python -m ai4ai.prepare)
    p.add_argument("--own-model", help="folder of your own model (byom/ must be set up by the harness)")
    args = p.parse_args()
    torch.set_num_threads(1)
    if (args.scale is None) == (args.own_model is None):
        p.error("give --scale or --own-model")
    if args.own_model is not None:
        if not (BYOM / "vocab.json").exists():
            p.error("--own-model needs byom/vocab.json: run the task with task.model_path=PATH (README)")
        own_base(args.own_model)
        raise SystemExit(0)
    model = train_teacher(args.scale, args.device)
    vp, va = load_labelled("val")
    acc = (greedy_generate(model, vp) == va).all(1).float().mean().item()
    print(f"teacher {args.scale}: validation exact match {acc:.4f}")
    out = REPO / "artifacts"
    out.mkdir(exist_ok=True)
    name = f"teacher_{args.scale}.safetensors"
    save_file({k: v.detach().float().contiguous() for k, v in model.named_parameters()}, str(out / name))
    (out / name).chmod(0o644)
    sums_path = out / "SHA256SUMS"
    sums = dict(reversed(line.split()) for line in sums_path.read_text().splitlines()) if sums_path.exists() else {}
    sums[name] = hashlib.sha256((out / name).read_bytes()).hexdigest()
    sums_path.write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))
