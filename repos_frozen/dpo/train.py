"""Align the prepared policy with DPO on the preference pairs. Editable: this is the training algorithm.

    python train.py --out DIR --seed N --scale {ci,smoke,full} --budget-s T --device {cpu,cuda}

Shipped algorithm: DPO (Rafailov et al., 2023). The policy starts from the prepared policy
(artifacts/policy_<scale>.safetensors) and a frozen copy of it is the reference;
loss = -log sigmoid(beta * ((log pi(y_w|x) - log ref(y_w|x)) - (log pi(y_l|x) - log ref(y_l|x)))),
with sequence log-probabilities summed over the answer tokens (and the EOS that ends it).
Writes DIR/ckpt_{step:08d}.safetensors (the last three are kept; the grader picks among them).
The data budget is metered by data.PairSplit; the wall clock (--budget-s) is a safety net at
ci/smoke and the binding cap at full, where the grader stops the run at T seconds.
"""
import argparse
import contextlib
import copy
import time

import torch
import torch.nn.functional as F
from accelerate import Accelerator

from checkpoint import load_policy, save_checkpoint
from config import ADAPTER, get_scale
from data import PairSplit
from model import answer_mask, token_logps

BETA = 0.1           # DPO temperature, the paper's default
LR = 3e-6            # best of {1e-6, 3e-6, 1e-5, 3e-5, 1e-4, 3e-4, 1e-3} at smoke (validation rate
                     # 0.052, 0.052, 0.044, 0.044, 0.030, 0.025, 0.008; the prepared policy 0.053)
                     # AdamW, constant after warmup
WARMUP = 20          # linear warmup steps
BATCH_SIZE = 64      # pairs per optimizer step
GRAD_ACCUM = 1       # batches whose gradients make one optimizer step (accelerate); the loop counts batches
N_SAVES = 8          # checkpoints over the run (the last three are kept)
LORA_RANK = 16       # with config.ADAPTER "lora" (your own model, task.adapter=lora): the adapter's rank,
LORA_ALPHA = 32      # its scale, on every linear layer but the output head (peft's "all-linear")


def sequence_logps(model, seqs, prompt_lens):
    """Sum of log p over each sequence's answer tokens and its EOS: [B]."""
    mask = answer_mask(seqs, prompt_lens)
    return (token_logps(model, seqs) * mask).sum(-1)


def trim(*seqs):
    """Drop the all-PAD columns at the right end of a batch (they are never scored)."""
    n = max(int((s != 0).long().cumsum(-1).argmax(-1).max()) for s in seqs) + 2
    return [s[:, :n] for s in seqs]


def dpo_loss(policy, reference, chosen, rejected, prompt_lens):
    both = torch.cat([chosen, rejected])
    lens = torch.cat([prompt_lens, prompt_lens])
    logp = sequence_logps(policy, both, lens)
    # with a LoRA adapter the reference is the policy itself, its adapter switched off
    off = reference.disable_adapter() if hasattr(reference, "disable_adapter") else contextlib.nullcontext()
    with torch.no_grad(), off:
        ref = sequence_logps(reference, both, lens)
    pc, pr = logp.chunk(2)
    rc, rr = ref.chunk(2)
    margin = BETA * ((pc - rc) - (pr - rr))
    return -F.logsigmoid(margin).mean(), margin.detach()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--scale", required=True)
    p.add_argument("--budget-s", type=float, required=True)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()

    torch.manual_seed(args.seed)
    # device placement, precision (bf16 autocast at quick and full, config.Scale.bf16; fp32 at ci and
    # smoke) and gradient accumulation
    accelerator = Accelerator(mixed_precision="bf16" if get_scale(args.scale).bf16 else "no",
                              gradient_accumulation_steps=GRAD_ACCUM, cpu=args.device == "cpu")
    device = accelerator.device
    split = PairSplit(args.scale)
    policy = load_policy(args.scale).to(device).train()
    if ADAPTER == "lora":   # the prepared policy frozen under the adapter is the reference: no second copy
        from peft import LoraConfig, get_peft_model
        policy = get_peft_model(policy, LoraConfig(r=LORA_RANK, lora_alpha=LORA_ALPHA, lora_dropout=0.0,
                                                   target_modules="all-linear"))
        reference = policy
    else:
        reference = copy.deepcopy(policy).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.0)
    policy, optimizer = accelerator.prepare(policy, optimizer)
    total_steps = split.budget // BATCH_SIZE
    save_every = max(1, total_steps // N_SAVES)
    order = torch.Generator().manual_seed(args.seed)
    print(f"DPO on {sum(q.numel() for q in policy.parameters() if q.requires_grad):,} parameters for {total_steps} steps "
          f"of {BATCH_SIZE} pairs", flush=True)

    t0 = time.time()
    perm = torch.randperm(len(split), generator=order)
    for step in range(total_steps):
        if time.time() - t0 > args.budget_s:
            break
        idx = perm[(step * BATCH_SIZE) % len(split):][:BATCH_SIZE]
        chosen, rejected, plen = split.get(idx)
        chosen, rejected = trim(chosen, rejected)
        for group in optimizer.param_groups:
            group["lr"] = LR * min(1.0, (step + 1) / WARMUP)
        with accelerator.accumulate(policy):
            with accelerator.autocast():                               # the reference too
                loss, margin = dpo_loss(policy, reference, chosen.to(device), rejected.to(device), plen.to(device))
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        done = step + 1
        if done % save_every == 0 or done == total_steps:
            save_checkpoint(policy, args.out, done, metadata={"pairs_seen": split.served})
        if done % 20 == 0 or done == total_steps:
            print(f"step {done}/{total_steps} loss {loss.item():.4f} margin {margin.mean().item():.3f} "
                  f"acc {(margin > 0).float().mean().item():.3f} elapsed {time.time() - t0:.1f}s", flush=True)


if __name__ == "__main__":
    main()
