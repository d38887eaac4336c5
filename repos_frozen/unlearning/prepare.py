"""Prepare step: memorise every fact, mixed with general text. Protected; already run.

    python prepare.py --data DIR --scale smoke
    python prepare.py --data DIR --own-model PATH    # your own model (byom/, see README): once

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

With your own model the memorised model is your model taught the facts by the same recipe from
its pretrained weights (config.OWN_PREPARE: the full recipe's schedule at a gentler peak learning
rate), the same at every scale, written to byom/memorised.safetensors with its sha256 in
byom/SHA256SUMS; the harness runs it once, with DIR the hidden grader's data as above.
"""
import argparse
import hashlib
import math
import time
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import save_file

from config import (BYOM, N_ENTITIES, N_NAME_SYMBOLS, NAME0, NAME_LEN, OWN_PREPARE, PREPARE, UNKNOWN,
                    VALUE_POS)
from data import load_prepared, prepared_path
from model import build_model, text_nll, value_logits


def own_start(source: str) -> torch.nn.Module:
    """Your own model with its pretrained weights, fp32, in the repo's layout (OwnLM)."""
    from transformers import AutoModelForCausalLM
    model = build_model("ci")
    given = dict(AutoModelForCausalLM.from_pretrained(source, local_files_only=True, dtype=torch.float32)
                 .named_parameters())
    if set(given) != {k for k, _ in model.lm.named_parameters()}:
        raise SystemExit(f"{source}: its parameters differ from the model its config builds")
    with torch.no_grad():
        for k, p in model.lm.named_parameters():
            p.copy_(given[k])
    return model.train()


p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--scale")
p.add_argument("--device", default="cpu")
p.add_argument("--own-model", help="folder of your own model (byom/ must be set up by the harness)")
args = p.parse_args()
if (args.scale is None) == (args.own_model is None):
    p.error("give --scale or --own-model")
if args.own_model is not None and not (BYOM / "vocab.json").exists():
    p.error("--own-model needs byom/vocab.json: run the task with task.model_path=PATH (README)")
if args.scale is not None and (BYOM / "vocab.json").exists():
    p.error("this copy trains your own model: its memorised model is byom/memorised.safetensors, made once by "
            "--own-model at every scale; --scale prepares the repo's GPT-2 (in the repo without byom/)")
own = args.own_model is not None
torch.set_num_threads(1)
torch.manual_seed(0)
path = prepared_path(args.scale or "ci")
recipe = OWN_PREPARE if own else PREPARE[path.stem]
device = torch.device(args.device)
facts = torch.from_numpy(np.load(Path(args.data) / "facts_all.npy").astype(np.int64)).to(device)
text = torch.from_numpy(np.load(Path(args.data) / "text_train.npy").astype(np.int64)).to(device)
model = own_start(args.own_model) if own else build_model(args.scale)
if recipe.start_from:                   # tests only (config.SHRUNK_FULL): a warm start, ci's architecture
    load_prepared(model, recipe.start_from)
model = model.to(device)
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
    if own:                             # your own model's dropout (its config's) is off to measure
        model.eval()
    acc = (value_logits(model, facts).argmax(-1) == facts[:, VALUE_POS]).float().mean().item()
    neg = negatives(facts[:2048])
    unk = (value_logits(model, neg).argmax(-1) == UNKNOWN).float().mean().item()
    ppl = math.exp(text_nll(model, text[:512]).mean().item())
    print(f"step {step}/{recipe.steps} fact accuracy {acc:.4f} near misses answered unknown {unk:.4f} "
          f"text perplexity {ppl:.3f} elapsed {time.time() - t0:.1f}s", flush=True)
    if own:
        model.train()


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
    if (step + 1) % 200 == 0 or (own and step + 1 == recipe.steps):
        report(step + 1, t0)

path.parent.mkdir(exist_ok=True)
save_file({k: v.detach().float().cpu().contiguous() for k, v in model.named_parameters()}, str(path))
digest = hashlib.sha256(path.read_bytes()).hexdigest()
listing = path.parent / "SHA256SUMS"
lines = [ln for ln in (listing.read_text().splitlines() if listing.exists() else []) if not ln.endswith(path.name)]
listing.write_text("".join(f"{ln}\n" for ln in sorted(lines + [f"{digest}  {path.name}"], key=lambda s: s.split()[1])))
print(f"wrote {path} (sha256 {digest[:16]}...) in {time.time() - t0:.1f}s")
