"""Prepare step: memorise every fact, mixed with general text. Protected; already run.

    python prepare.py --data DIR --scale smoke

Deterministic (fixed seeds, one thread). DIR holds the prepare data, which the benchmark's hidden
grader writes (`prepare_data`): every fact of the task (forget, retain and the held-out retain
facts) and a general-text corpus. It is not in this repo, because it would reveal the held-out
facts; the result is committed as artifacts/<artifact>.safetensors with its sha256 in
artifacts/SHA256SUMS (ci and smoke share `memorised_small`).

The loss is on the value only (never on a fact's name), so the prepared model cannot be made to
write out the names it memorised. Alongside the facts it sees prompts that are not facts, a fact's
name with some of its symbols changed or paired with another entity, and learns to answer them
UNKNOWN: it answers a fact only for its exact name and entity, so a near miss of a name earns no
hint that it is close.
"""
import argparse
import hashlib
import math
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from config import N_ENTITIES, N_NAME_SYMBOLS, NAME0, NAME_LEN, PREPARE, UNKNOWN, VALUE_POS, get_scale
from model import build_model, text_nll, value_logits

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"

p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--scale", required=True)
p.add_argument("--device", default="cpu")
args = p.parse_args()
torch.set_num_threads(1)
torch.manual_seed(0)
scale = get_scale(args.scale)
recipe = PREPARE[scale.artifact]
device = torch.device(args.device)
facts = torch.from_numpy(np.load(Path(args.data) / "facts_all.npy").astype(np.int64)).to(device)
text = torch.from_numpy(np.load(Path(args.data) / "text_train.npy").astype(np.int64)).to(device)
model = build_model(args.scale).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=0.0)
gen = torch.Generator().manual_seed(0)
warmup = recipe.steps // 20
ENT = VALUE_POS - 1                     # the entity's index in a fact


def negatives(rows: torch.Tensor) -> torch.Tensor:
    """Prompts near facts that are not facts: half with another entity, half with 1..NAME_LEN of the
    name's symbols changed (each to a different symbol); their value is UNKNOWN."""
    rows = rows.clone()
    n = len(rows)
    other = torch.rand(n, generator=gen) < 0.5
    shift = torch.randint(1, N_ENTITIES, (n,), generator=gen).to(device)
    ent0 = facts[:, ENT].min()
    rows[other, ENT] = ent0 + (rows[other, ENT] - ent0 + shift[other]) % N_ENTITIES
    change = torch.rand(n, NAME_LEN, generator=gen) < torch.rand(n, 1, generator=gen)   # a random share
    change[torch.arange(n), torch.randint(0, NAME_LEN, (n,), generator=gen)] = True     # at least one
    change &= ~other[:, None]
    step = torch.randint(1, N_NAME_SYMBOLS, (n, NAME_LEN), generator=gen).to(device)
    name = rows[:, 1:1 + NAME_LEN] - NAME0
    rows[:, 1:1 + NAME_LEN] = NAME0 + torch.where(change.to(device), (name + step) % N_NAME_SYMBOLS, name)
    rows[:, VALUE_POS] = UNKNOWN
    return rows


@torch.no_grad()
def report(step: int, t0: float) -> None:
    acc = (value_logits(model, facts).argmax(-1) == facts[:, VALUE_POS]).float().mean().item()
    neg = negatives(facts[:2048])
    unk = (value_logits(model, neg).argmax(-1) == UNKNOWN).float().mean().item()
    ppl = math.exp(text_nll(model, text[:512]).mean().item())
    print(f"step {step}/{recipe.steps} fact accuracy {acc:.4f} near misses answered unknown {unk:.4f} "
          f"text perplexity {ppl:.3f} elapsed {time.time() - t0:.1f}s", flush=True)


t0 = time.time()
for step in range(recipe.steps):
    frac = step / recipe.steps
    lr = recipe.lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
    for g in opt.param_groups:
        g["lr"] = lr
    fb = facts[torch.randint(0, len(facts), (recipe.fact_batch,), generator=gen)]
    tb = text[torch.randint(0, len(text), (recipe.text_batch,), generator=gen)]
    if recipe.negative_batch:
        fb = torch.cat([fb, negatives(facts[torch.randint(0, len(facts), (recipe.negative_batch,), generator=gen)])])
    loss = torch.nn.functional.cross_entropy(value_logits(model, fb), fb[:, VALUE_POS]) + text_nll(model, tb).mean()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
    if (step + 1) % 200 == 0:
        report(step + 1, t0)

ARTIFACTS.mkdir(exist_ok=True)
path = ARTIFACTS / f"{scale.artifact}.safetensors"
save_file({k: v.detach().float().cpu().contiguous() for k, v in model.named_parameters()}, str(path))
digest = hashlib.sha256(path.read_bytes()).hexdigest()
listing = ARTIFACTS / "SHA256SUMS"
lines = [ln for ln in (listing.read_text().splitlines() if listing.exists() else []) if not ln.endswith(path.name)]
listing.write_text("".join(f"{ln}\n" for ln in sorted(lines + [f"{digest}  {path.name}"], key=lambda s: s.split()[1])))
print(f"wrote {path} (sha256 {digest[:16]}...) in {time.time() - t0:.1f}s")
