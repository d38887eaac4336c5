"""Train the GPT on the training split. Editable: this is the training algorithm.

    python train.py --out DIR --seed N --scale {ci,smoke,full} --budget-s T --device {cpu,cuda}

Writes DIR/ckpt_{step:08d}.safetensors (the last three are kept; the grader picks among them).
The data budget is metered by data.TrainingSplit; the wall clock (--budget-s) is a safety
net at ci/smoke and the binding cap at full, where the grader stops the run at T seconds.
"""
import argparse
import time

import torch
from accelerate import Accelerator

from checkpoint import save_checkpoint
from config import get_scale
from data import TrainingSplit
from model import build_model
from optim import build_optimizer, lr_at

BATCH_SIZE = 32      # sequences per optimizer step
GRAD_ACCUM = 1       # batches whose gradients make one optimizer step (accelerate); the loop counts batches
N_SAVES = 8          # checkpoints over the run (the last three are kept)

# ----------------------------------------------------------------------------- setup
p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--seed", type=int, required=True)
p.add_argument("--scale", required=True)
p.add_argument("--budget-s", type=float, required=True)
p.add_argument("--device", default="cpu")
args = p.parse_args()

torch.manual_seed(args.seed)
# device placement, precision (bf16 autocast at quick and full, config.Scale.bf16; fp32 at ci and smoke)
# and gradient accumulation
accelerator = Accelerator(mixed_precision="bf16" if get_scale(args.scale).bf16 else "no",
                          gradient_accumulation_steps=GRAD_ACCUM, cpu=args.device == "cpu")
device = accelerator.device
split = TrainingSplit(args.scale)
model = build_model(args.scale)
optimizer = build_optimizer(model)
model, optimizer = accelerator.prepare(model, optimizer)
total_steps = split.budget // BATCH_SIZE
save_every = max(1, total_steps // N_SAVES)
order = torch.Generator().manual_seed(args.seed)
print(f"training {sum(p.numel() for p in model.parameters()):,} parameters for {total_steps} steps "
      f"of {BATCH_SIZE} sequences", flush=True)

# ----------------------------------------------------------------------------- loop
t0 = time.time()
perm = torch.randperm(len(split), generator=order)
for step in range(total_steps):
    if time.time() - t0 > args.budget_s:
        break
    idx = perm[(step * BATCH_SIZE) % len(split):][:BATCH_SIZE]
    batch = split.get(idx).to(device)                                  # [B, T]
    for group in optimizer.param_groups:
        group["lr"] = lr_at(step, total_steps)
    with accelerator.accumulate(model):
        with accelerator.autocast():
            loss = model(input_ids=batch, labels=batch).loss           # mean next-token NLL
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    done = step + 1
    if done % save_every == 0 or done == total_steps:
        save_checkpoint(model, args.out, done, metadata={"tokens_seen": split.served * batch.shape[1]})
    if done % 20 == 0 or done == total_steps:
        print(f"step {done}/{total_steps} loss {loss.item():.4f} "
              f"elapsed {time.time() - t0:.1f}s", flush=True)
