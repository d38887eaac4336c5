"""Unlearn the forget set from the prepared model. Editable: this is the unlearning algorithm.

    python train.py --out DIR --seed N --scale {ci,smoke,full} --budget-s T --device {cpu,cuda}

Starts from the prepared model (which memorised every fact) and writes
DIR/ckpt_{step:08d}.safetensors (the last three are kept; the grader picks among them).
The data budget is metered by data.UnlearningData; the wall clock (--budget-s) is a safety
net at ci/smoke and the binding cap at full, where the grader stops the run at T seconds.

Shipped algorithm: gradient ascent on the forget set (maximise the value's cross-entropy),
AdamW at a small constant learning rate for a fixed, small number of steps, so that the model
forgets without collapsing.
"""
import argparse
import time

import torch
from accelerate import Accelerator

from checkpoint import save_checkpoint
from config import ADAPTER, VALUE_POS, get_scale
from data import UnlearningData, load_prepared
from model import build_model, value_logits

# Sweep at smoke on the prepared model of the secret-name design (seed 0, validation metric every 20
# steps at LR 5e-5): 20 -> 0.19, 40 -> 0.46, 60 -> 0.40, 80 -> 0.11, 100 -> 0.02, 120 on 0 (forget and
# retain facts fall together, then the perplexity bound); the old design's 150 steps collapse it.
LR = 5e-5
BATCH_SIZE = 32      # forget facts per step
STEPS = 50           # gradient-ascent steps (fewer when the scale's budget is smaller): the last three
                     # checkpoints (40, 45, 50) bracket the peak
N_SAVES = 10         # checkpoints over the run (the last three are kept; the grader picks among them)
LORA_RANK = 16       # with config.ADAPTER "lora" (your own model, task.adapter=lora): the adapter's rank,
LORA_ALPHA = 32      # its scale, on every linear layer of your model but its output head (peft's "all-linear")

# ----------------------------------------------------------------------------- setup
p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--seed", type=int, required=True)
p.add_argument("--scale", required=True)
p.add_argument("--budget-s", type=float, required=True)
p.add_argument("--device", default="cpu")
args = p.parse_args()

torch.manual_seed(args.seed)
# device placement and precision (bf16 autocast at quick and full, config.Scale.bf16; fp32 at ci and smoke)
accelerator = Accelerator(mixed_precision="bf16" if get_scale(args.scale).bf16 else "no", cpu=args.device == "cpu")
device = accelerator.device
data = UnlearningData(args.scale)
model = load_prepared(build_model(args.scale), args.scale).train()
if ADAPTER == "lora":   # your model stays frozen under the adapter; the checkpoint writer merges it
    from peft import LoraConfig, get_peft_model
    lora = LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear")
    model.lm = get_peft_model(model.lm, lora)
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), weight_decay=0.0)
model, optimizer = accelerator.prepare(model, optimizer)
total_steps = min(STEPS, data.budget // BATCH_SIZE)
save_every = max(1, total_steps // N_SAVES)
order = torch.Generator().manual_seed(args.seed)
print(f"gradient ascent on {data.n_forget} forget facts: {total_steps} steps of {BATCH_SIZE}", flush=True)

# ----------------------------------------------------------------------------- loop
t0 = time.time()
perm = torch.randperm(data.n_forget, generator=order)
for step in range(total_steps):
    if time.time() - t0 > args.budget_s:
        break
    start = (step * BATCH_SIZE) % len(perm)
    if start + BATCH_SIZE > len(perm):              # a new epoch: reshuffle
        perm = torch.randperm(data.n_forget, generator=order)
        start = 0
    batch = data.get_forget(perm[start:start + BATCH_SIZE]).to(device)        # [B, 8]
    with accelerator.autocast():
        ce = torch.nn.functional.cross_entropy(value_logits(model, batch), batch[:, VALUE_POS])   # fp32 logits
    accelerator.backward(-ce)                                                  # ascend the forget loss
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    done = step + 1
    if done % save_every == 0 or done == total_steps:
        save_checkpoint(model, args.out, done, metadata={"facts_seen": data.served})
    if done % 10 == 0 or done == total_steps:
        print(f"step {done}/{total_steps} forget loss {ce.item():.4f} elapsed {time.time() - t0:.1f}s", flush=True)
