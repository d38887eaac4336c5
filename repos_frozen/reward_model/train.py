"""Train the reward model on the preference pairs. Editable: this is the training algorithm.

    python train.py --out DIR --seed N --scale {ci,smoke,full} --budget-s T --device {cpu,cuda}

Shipped algorithm: the Bradley-Terry loss -log sigmoid(r(preferred) - r(rejected)) on every
pair, each label taken as given (the rater of a pair is not used), AdamW at a constant learning
rate, batches of 32 pairs, the prepared base LM as the starting backbone and a fresh scalar head.

Writes DIR/ckpt_{step:08d}.safetensors (the last three are kept; the grader picks among them).
The data budget is metered by data.PreferencePairs; the wall clock (--budget-s) is a safety net
at ci/smoke and the binding cap at full, where the grader stops the run at T seconds.
"""
import argparse
import time

import torch
import torch.nn.functional as F
from accelerate import Accelerator

from checkpoint import save_checkpoint
from config import ADAPTER, get_scale
from data import PreferencePairs
from model import build_model, load_base

BATCH_SIZE = 32      # pairs per optimizer step
LR = 3e-4            # smoke, seed 0, validation (best of the last 3): 1e-4 0.843, 3e-4 0.846, 1e-3 0.846
BETAS = (0.9, 0.999)
WEIGHT_DECAY = 0.01
GRAD_ACCUM = 1       # batches whose gradients make one optimizer step (accelerate); the loop counts batches
N_SAVES = 8          # checkpoints over the run (the last three are kept)
LORA_RANK = 16       # with config.ADAPTER "lora" (your own model, task.adapter=lora): the adapter's rank,
LORA_ALPHA = 32      # its scale, on every linear layer of the backbone (peft's "all-linear"; the scalar head trains in full)


def preference_loss(r_a: torch.Tensor, r_b: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """Bradley-Terry: P(a preferred) = sigmoid(r_a - r_b); mean negative log-likelihood of the labels."""
    sign = 2.0 * label - 1.0                        # +1: a preferred, -1: b preferred
    return -F.logsigmoid(sign * (r_a - r_b)).mean()


# ----------------------------------------------------------------------------- setup
p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--seed", type=int, required=True)
p.add_argument("--scale", required=True)
p.add_argument("--budget-s", type=float, required=True)
p.add_argument("--device", default="cpu")
args = p.parse_args()

torch.manual_seed(args.seed)                        # the head's init and the pair order
# device placement, precision (bf16 autocast at quick and full, config.Scale.bf16; fp32 at ci and smoke)
# and gradient accumulation
accelerator = Accelerator(mixed_precision="bf16" if get_scale(args.scale).bf16 else "no",
                          gradient_accumulation_steps=GRAD_ACCUM, cpu=args.device == "cpu")
device = accelerator.device
pairs = PreferencePairs(args.scale)
model = load_base(build_model(args.scale), args.scale)
if ADAPTER == "lora":   # the backbone stays frozen under the adapter; the checkpoint writer merges it
    from peft import LoraConfig, get_peft_model
    lora = LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear")
    model.backbone = get_peft_model(model.backbone, lora)
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)
model, optimizer = accelerator.prepare(model, optimizer)
total_steps = pairs.budget // BATCH_SIZE
save_every = max(1, total_steps // N_SAVES)
order = torch.Generator().manual_seed(args.seed)
print(f"training {sum(p.numel() for p in model.parameters() if p.requires_grad):,} parameters for {total_steps} steps "
      f"of {BATCH_SIZE} pairs ({len(pairs)} pairs in the split)", flush=True)

# ----------------------------------------------------------------------------- loop
t0 = time.time()
perm = torch.randperm(len(pairs), generator=order)
for step in range(total_steps):
    if time.time() - t0 > args.budget_s:
        break
    start = (step * BATCH_SIZE) % len(pairs)
    if step > 0 and start < BATCH_SIZE:             # a new pass: a new order
        perm = torch.randperm(len(pairs), generator=order)
    a, b, label, _rater = (t.to(device) for t in pairs.get(perm[start:start + BATCH_SIZE]))
    with accelerator.accumulate(model):
        with accelerator.autocast():
            r = model(torch.cat([a, b]))            # one forward for both sides; fp32 rewards
            loss = preference_loss(r[:len(a)], r[len(a):], label)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    done = step + 1
    if done % save_every == 0 or done == total_steps:
        save_checkpoint(model, args.out, done, metadata={"pairs_seen": pairs.served})
    if done % 50 == 0 or done == total_steps:
        print(f"step {done}/{total_steps} loss {loss.item():.4f} elapsed {time.time() - t0:.1f}s", flush=True)
