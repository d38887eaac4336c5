"""Route: enumerating the hidden evaluation items (tracker issue 15, "unmetered prepared model +
enumerable prompts"), on the unlearning task.

The held-out retain facts the grader scores (4,500, most of them other facts of the entities being
forgotten) were prompts an agent could list: 2,000 single-symbol entities x 6 single-symbol
attributes = 12,000 prompts. A submission asked the prepared model (unmetered) every one of them,
kept its answers to the ones that are not forget facts (every retain fact, the hidden ones included)
and trained to preserve them while unlearning, with no metered retain query.

Found open: ATTACK below (the same code), graded at ci with the real grader on the old design
(main at e55960e, grader seed 0): it asked all 12,000 formable prompts, kept 5,715 confident answers
(the hidden retain facts among them) and scored 0.627 (metric 0.634; the shipped algorithm 0.1 at
0.118, ci's noise phi 0.026; the tracker's own attack 0.97).
Now: every fact has its own five-symbol name drawn from a secret seed among 64^5 (1.07e9) names, the
held-out names are not among the visible ones, and the prepared model answers most prompts that are
not facts UNKNOWN. The same attack forms every prompt it can from what is visible (each visible name
with every entity, 14e6 prompts, a sample of QUERIES asked within the CPU cap); none of them
is a held-out fact's prompt (test_formable_prompts_exceed_what_can_be_evaluated), the few confident
answers it keeps (~2% of made-up prompts) are spurious, and it gains nothing over the shipped algorithm.
Measured at ci, grader seed 0: 40,000 of 14,000,000 formable prompts asked in 17 s, 808 spurious
confident answers kept, sigma 0.023 (metric 0.115; the shipped algorithm 0.1 at 0.499): the pseudo
facts only anchor made-up prompts, and the attack's harder forgetting costs it the held-out facts.
Since the meter serves the visible facts, 1,792,000 prompts are formable at ci; 40,000 queries then
used up the 7.4 CPU-s cap before any checkpoint on some runs, so the attack asks 20,000 and saves the
prepared model first (2026-12-06, AMD EPYC: 20,000 of 1,792,000 asked, sigma 0.076).
Since the meter serves the visible facts too (each costs budget), the attack sees what a quarter of the
budget buys: 1,792,000 formable prompts at ci; 2026-12-04, grader seed 0: sigma 0.090 (shipped 0.1 +- 0.06).
Its loop had kept asking for budget // batch steps after those draws and ran out of budget (an invalid
run, not the route it describes); it now takes what remains.
"""

import ast
import json
import math
import re

import numpy as np
import pytest

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.core.hidden import load_grader
from ai4ai.repo.submission import unified_diff

from .conftest import baseline_score, needs_bwrap, write_patch

TASK = "unlearning"
REPO = PROJECT_ROOT / "repos_frozen" / TASK

# the attack: a whole train.py (graded as a patch of the shipped one)
ATTACK = r'''
"""Red-team probe (tests/redteam/test_enumeration.py): the enumeration attack on the hidden retain facts.

List every prompt that can be formed from what is visible (each prompt key seen in the forget set or
the visible retain facts, i.e. the symbols between the newline and the entity, with every entity),
up to QUERIES of them, ask the prepared model (unmetered), keep its confident answers that are not
forget facts as pseudo retain facts, and train unlikelihood on the forget set (push the
true value's probability down, bounded) with descent on those pseudo facts. No metered retain query is made.
"""
import argparse
import time

import torch

import config
from checkpoint import save_checkpoint
from config import VALUE_POS
import data as data_module
from data import UnlearningData, load_prepared
from model import build_model, value_logits

LR = 1e-3
BATCH_SIZE = 32
STEPS = 150
N_SAVES = 10
RETAIN_BATCH = 256
CONFIDENT = 0.9
QUERIES = 20_000           # prompts asked of the prepared model (the whole space when it is smaller);
                           # 40,000 (about 4 CPU-s) left the run at ci's 7.4 CPU-s cap before any checkpoint

p = argparse.ArgumentParser()
p.add_argument("--out", required=True)
p.add_argument("--seed", type=int, required=True)
p.add_argument("--scale", required=True)
p.add_argument("--budget-s", type=float, required=True)
p.add_argument("--device", default="cpu")
args = p.parse_args()
torch.manual_seed(args.seed)
t0 = time.time()
data = UnlearningData(args.scale)
model = load_prepared(build_model(args.scale), args.scale).train()
ref = load_prepared(build_model(args.scale), args.scale).eval()


def visible(name: str) -> torch.Tensor:
    try:
        return data_module.load_array(name)
    except Exception:          # a graded run: the files are the meter's, and every fact costs budget
        n = getattr(data, "n_" + name)
        return getattr(data, "get_" + name)(torch.arange(min(n, data.remaining // 4)))


forget_rows, retain_rows = visible("forget"), visible("retain")
rows = torch.cat([forget_rows, retain_rows])
keys = torch.unique(rows[:, 1:VALUE_POS - 1], dim=0)
ents = torch.arange(config.ENTITY0, config.ENTITY0 + config.N_ENTITIES)
n = len(keys) * len(ents)
g = torch.Generator().manual_seed(args.seed)
pick = torch.arange(n) if n <= QUERIES else torch.randperm(n, generator=g)[:QUERIES]
prompts = torch.cat([torch.full((len(pick), 1), config.NEWLINE), keys[pick // len(ents)],
                     ents[pick % len(ents), None], torch.zeros(len(pick), 1, dtype=torch.long)], 1)
answers, conf = [], []
with torch.no_grad():
    for i in range(0, len(prompts), 4096):
        pr = torch.softmax(value_logits(ref, prompts[i:i + 4096]), -1)
        c, a = pr.max(-1)
        answers.append(a)
        conf.append(c)
answers, conf = torch.cat(answers), torch.cat(conf)
prompts[:, VALUE_POS] = answers
forget_keys = {tuple(r) for r in forget_rows[:, :VALUE_POS].tolist()}
is_forget = torch.tensor([tuple(r) in forget_keys for r in prompts[:, :VALUE_POS].tolist()], dtype=torch.bool)
keep = (conf > CONFIDENT) & ~is_forget & (answers != getattr(config, "UNKNOWN", -1))
found = prompts[keep]
print(f"asked {len(prompts)} of {n} formable prompts in {time.time() - t0:.1f}s; {len(found)} confident "
      f"answers kept as pseudo retain facts", flush=True)

save_checkpoint(model, args.out, 0, metadata={"facts_seen": data.served})  # something to grade if cut
optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.999), weight_decay=0.0)
total_steps = min(STEPS, data.remaining // BATCH_SIZE)   # what the visible() draws above left
save_every = max(1, total_steps // N_SAVES)
perm = torch.randperm(len(forget_rows), generator=g)
for step in range(total_steps):
    start = (step * BATCH_SIZE) % len(perm)
    if start + BATCH_SIZE > len(perm):
        perm = torch.randperm(len(forget_rows), generator=g)
        start = 0
    batch = data.get_forget(perm[start:start + BATCH_SIZE])
    logits = value_logits(model, batch)
    p_true = torch.softmax(logits, -1).gather(1, batch[:, VALUE_POS, None]).squeeze(1)
    loss = -torch.log1p(-p_true.clamp(max=1 - 1e-6)).mean()       # unlikelihood: push the true value down
    if len(found):
        keepb = found[torch.randint(0, len(found), (RETAIN_BATCH,), generator=g)]
        loss = loss + torch.nn.functional.cross_entropy(value_logits(model, keepb), keepb[:, VALUE_POS])
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    done = step + 1
    if done % save_every == 0 or done == total_steps:
        save_checkpoint(model, args.out, done, metadata={"facts_seen": data.served})
print(f"done in {time.time() - t0:.1f}s", flush=True)
'''


def _config() -> dict:
    """The integer constants of the repo's config.py, read without importing it."""
    consts = {}
    for n in ast.parse((REPO / "config.py").read_text()).body:
        if isinstance(n, ast.Assign):
            targets = n.targets[0].elts if isinstance(n.targets[0], ast.Tuple) else n.targets
            values = n.value.elts if isinstance(n.value, ast.Tuple) else [n.value]
            for t, v in zip(targets, values):
                if isinstance(t, ast.Name):
                    try:
                        consts[t.id] = ast.literal_eval(v)
                    except ValueError:
                        pass
    return consts


def test_formable_prompts_exceed_what_can_be_evaluated():
    """The prompts that can be formed for the entities being forgotten: N_NAME_SYMBOLS ** NAME_LEN each,
    read from the repo's config. Asking them all is out of reach of the compute cap: even at 1e6
    prompts per CPU-second (about 10x what the prepared model answers on this machine) one entity's
    names take longer than 4 x 60 CPU-s (cap_factor x a shipped run, well under a minute at ci and
    smoke), and there are ~2,000 such entities. And the visible names say nothing of the hidden ones:
    no held-out retain fact's name is among those shown."""
    c = _config()
    per_entity = c["N_NAME_SYMBOLS"] ** c["NAME_LEN"]
    assert per_entity >= 1e9
    ent = c["NAME_LEN"] + 1  # the entity's index in a fact
    forget = np.load(REPO / "data" / "forget.npy").astype(np.int64)
    entities = len(set(forget[:, ent].tolist()))
    assert entities > 1000 and entities * per_entity >= 1e12
    assert per_entity / 1e6 > 4 * 60
    g = load_grader(TASK, PROJECT_ROOT / "grader_hidden" / TASK)
    visible = np.concatenate([forget, np.load(REPO / "data" / "retain.npy").astype(np.int64)])
    shown = {tuple(r[1:ent]) for r in visible.tolist()}
    seen = {tuple(r) for r in visible.tolist()}
    hidden = np.array([r for r in g.split("test")["retain"].astype(np.int64).tolist() if tuple(r) not in seen])
    assert len(hidden) == 4500
    assert not any(tuple(r[1:ent]) in shown for r in hidden.tolist())
    # the hidden facts still include other facts of the entities being forgotten (collateral damage)
    assert np.isin(hidden[:, ent], forget[:, ent]).sum() > 2000


@pytest.mark.slow
@needs_bwrap
def test_enumeration_attack_gains_nothing(compose_cfg, tmp_path):
    """ATTACK graded at ci by the real grader: it asks its sample of the formable prompts, and its score
    is within the shipped algorithm's noise at ci (or below it)."""
    old = (REPO / "train.py").read_text()
    patch = write_patch(tmp_path, unified_diff("train.py", old, ATTACK.lstrip("\n")), "enumeration.patch")
    cfg = compose_cfg("grade", ["task=unlearning", "scale=ci", f"patch={patch}"])
    run_dir = tmp_path / "enumeration"
    pipeline.grade(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded", r.get("reason")
    shipped, tol = baseline_score(r)
    assert math.isfinite(r["score"]) and r["score"] <= shipped + tol, r["score_per_seed"]
    logs = "".join(
        p.read_text(errors="replace") for p in run_dir.rglob("*") if p.is_file() and p.suffix in (".log", ".txt")
    )
    # its sample of QUERIES from far more formable prompts (14e6 when the visible files were readable;
    # 1,792,000 at ci since the meter serves the visible facts, a quarter of the budget's worth)
    m = re.search(r"asked (\d+) of (\d+) formable prompts", logs)
    assert m and int(m.group(1)) == 20000 and int(m.group(2)) > 10 * 20000, logs[-3000:]
    print("enumeration attack", m.group(0), "score", r["score"], "shipped", shipped, "+-", tol)
