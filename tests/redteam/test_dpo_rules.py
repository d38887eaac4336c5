"""dpo's labels from the public rules, written into the patch: measured against the metered pairs.

dpo's answers follow a few rules its README states (add, max, rev; one of seven format constraints),
so a submission can write a solver of them into train.py, make prompts of its own, label them and
train the policy on them, drawing no pair (the README's contract forbids hand-written answer
generators; this measures what breaking it would buy). dpo is not graded on a fresh instance
(docs/threat-model.md: the rules are public by design), so the question is whether those unmetered
examples buy anything that the metered pairs do not: the probe is compared with the same training
(plain SFT, the same steps and learning rate) on the chosen answers of the pairs the budget serves,
kept in memory and passed over again, which any submission may do.

The chosen answers are right and compliant, so SFT on them is also the strongest known method here
(Preferred-FT, examples/dpo/preferred_ft.patch). On the first version of the task (`add` a 2-digit
number and a digit, `max` of three, `rev` of 3-4 letters) eight passes over the served pairs, inside
the CPU cap of then, scored 0.903 at smoke, where DESIGN.md allows no known method 0.8, and the solver's
examples matched the served ones (4 x the steps: 0.657 against 0.649 at smoke). Since 2026-12-03 the
answers cost more to learn (two 3-digit operands, four numbers, words of 4-7 letters; the CPU cap is
still 1.5 x the shipped run): the figures are in the tests below. Not asserted here: at the strongest
SFT setting found (batches of 32 at LR 2e-3) the solver's fresh examples scored a little above passes
over the served pairs, 0.279 against 0.241 at 3 passes and 0.363 against 0.300 at 4, but every grading
draws fresh training seeds, and a second grading of the 4-pass metered run scored 0.380: the difference
is within the spread between gradings (docs/threat-model.md, left open).
"""

import random

import pytest

from .conftest import grade_train_py, grader_modules, information_rejections, needs_bwrap

SOLVER = '''

# ----------------------------------------------------------------------------- the rules, written down
# A solver of the README's rules: prompts made here and labelled here; no pair is drawn.
import random
from config import SEQ_LEN, encode

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def made_example(rng):
    """(prompt, right and compliant answer) of a prompt drawn as the README describes them."""
    kind = rng.choice(["add", "max", "rev"])
    if kind == "add":
        a, b = rng.randint(100, 999), rng.randint(100, 999)
        args, core = f"{a} {b}", str(a + b)
    elif kind == "max":
        v = [rng.randint(10, 99) for _ in range(4)]
        args, core = " ".join(map(str, v)), str(max(v))
    else:
        w = "".join(rng.choice(LETTERS) for _ in range(rng.randint(4, 7)))
        args, core = w, w[::-1]
    fmt = rng.choice(["!", "[", "#", "p", "d"] + (["U", "L"] if kind == "rev" else []))
    if fmt == "p":
        fmt = f"p{rng.randint(len(core) + 1, 9)}"
    answer = {"!": core + "!", "[": "[" + core + "]", "#": "#" + core, "d": core + "-" + core,
              "U": core.upper(), "L": core.lower()}.get(fmt) or core + "." * (int(fmt[1:]) - len(core))
    return f"{kind} {args}|{fmt}>", answer


def made_batch(rng, n):
    rows, lens = [], []
    for _ in range(n):
        prompt, answer = made_example(rng)
        ids = encode(prompt + answer) + [0]
        rows.append(ids + [0] * (SEQ_LEN - len(ids)))
        lens.append(len(prompt))
    return torch.tensor(rows), torch.tensor(lens)
'''

SFT = '''

def sft_loss(policy, rows, prompt_lens):
    """Length-normalised NLL of the answers (and their EOS)."""
    mask = answer_mask(rows, prompt_lens)
    return -((token_logps(policy, rows) * mask).sum(-1) / mask.sum(-1).clamp(min=1)).mean()
'''

_DRAW = """        idx = perm[(step * BATCH_SIZE) % len(split):][:BATCH_SIZE]
        chosen, rejected, plen = split.get(idx)"""
_LOSS = """                loss, margin = dpo_loss(policy, reference, chosen.to(device), rejected.to(device), plen.to(device))"""
_STEPS = "total_steps = split.budget // BATCH_SIZE"


def train_py(shipped: str, data: str, passes: int, lr: str = "1e-3", batch: int = 64) -> str:
    """The shipped train.py turned into SFT at `lr` in batches of `batch` for `passes` x the shipped
    examples, on examples the solver makes (data="rules") or on the chosen answers of the served pairs,
    drawn once and kept (data="metered")."""
    edits = [
        ("LR = 3e-6 ", f"LR = {lr} "),
        ("BATCH_SIZE = 64 ", f"BATCH_SIZE = {batch} "),
        ("\n\ndef main():", SFT + (SOLVER if data == "rules" else "") + "\n\ndef main():"),
        (_STEPS, f"total_steps = {passes} * split.budget // BATCH_SIZE\n    kept = {{}}"),
        (
            _LOSS,
            "                loss = sft_loss(policy, chosen.to(device), plen.to(device))\n"
            "                margin = loss.detach().reshape(1)",
        ),
    ]
    if data == "rules":
        edits.append((_DRAW, "        chosen, plen = made_batch(rng, BATCH_SIZE)\n        rejected = chosen"))
        edits.append(
            (
                "    perm = torch.randperm(len(split), generator=order)\n",
                "    perm = torch.randperm(len(split), generator=order)\n    rng = random.Random(args.seed)\n",
            )
        )
    else:
        edits.append(
            (
                _DRAW,
                "        at = (step * BATCH_SIZE) % len(split)\n"
                "        if at not in kept:\n"
                "            kept[at] = split.get(perm[at:][:BATCH_SIZE])\n"
                "        chosen, rejected, plen = kept[at]",
            )
        )
    for old, new in edits:
        assert shipped.count(old) == 1, f"the shipped train.py changed: {old!r} not found once"
        shipped = shipped.replace(old, new)
    return shipped


def test_the_solver_labels_every_prompt_as_the_grader_does(tmp_path):
    """The route is real: the solver's prompts are of the task's kind and the grader's own verifier
    accepts every answer it makes (right and compliant); the patch passes the patch checks' information
    check."""
    import torch

    task, tasks = grader_modules("dpo", "tasks")
    new = train_py((task.repo / "train.py").read_text(), "rules", 4)
    assert information_rejections(task, tmp_path, new) == {}
    scope = {"torch": torch}
    exec(
        compile(SOLVER.replace("from config import SEQ_LEN, encode", "SEQ_LEN, encode = 32, None"), "probe", "exec"),
        scope,
    )
    rng, kinds = random.Random(0), set()
    for _ in range(5000):
        prompt, answer = scope["made_example"](rng)
        head, fmt = prompt[:-1].split("|")
        kind, args = head.split(" ", 1)
        core = {
            "add": lambda: str(sum(map(int, args.split()))),
            "max": lambda: str(max(map(int, args.split()))),
            "rev": lambda: args[::-1],
        }[kind]()
        p = {"task": kind, "args": args, "fmt": fmt, "core": core}
        assert tasks.prompt_text(p) == prompt
        assert tasks.verify(p, answer) == (True, True), (prompt, answer)
        kinds.add((kind, fmt[0]))
    assert len(kinds) == 3 * 5 + 2  # every task with every constraint it takes


def _graded(compose_cfg, tmp_path, scale, data, passes=4, seeds=(0,), **kw):
    """The probe of `train_py(..., data, passes, **kw)` graded at `scale` on `seeds` of its grader seeds
    (at smoke; every seed of the scale elsewhere); every seed must run to its end."""
    (task,) = grader_modules("dpo")
    (tmp_path / data).mkdir()
    r = grade_train_py(
        compose_cfg,
        tmp_path / data,
        task,
        train_py((task.repo / "train.py").read_text(), data, passes, **kw),
        f"dpo_{data}",
        scale=scale,
        seeds=list(seeds) if scale == "smoke" else None,
    )
    assert r["status"] == "graded", r.get("reason")
    print(
        "per seed",
        r["raw"]["per_seed"],
        "score",
        r["score"],
        "cut",
        [s.get("cut") for s in r["checkpoints"]["per_seed"]],
    )
    cut = [s["seed"] for s in r["checkpoints"]["per_seed"] if s.get("cut")]
    assert not cut, f"seeds {cut} were cut by a cap: the probe must fit the caps"
    return r


def _compare(rules, metered, gain):
    """The made examples' mean score is not above the metered pairs' by more than 0.03 or by more than
    three standard errors of the difference of the two means, whichever is larger."""
    import statistics

    # the metered run drew its whole budget once, the rules run none
    def served(r):
        return [s.get("served", {}).get("data.PairSplit", {}).get("served", 0) for s in r["checkpoints"]["per_seed"]]

    assert set(served(rules)) == {0}, served(rules)
    assert all(
        n > 0 and n == s["served"]["data.PairSplit"]["budget"]
        for n, s in zip(served(metered), metered["checkpoints"]["per_seed"])
    ), served(metered)
    a, b = rules["score_per_seed"], metered["score_per_seed"]
    assert len(a) == len(b) >= 3, "three seeds a side at least: one grading's draw spreads by ~0.04"
    se = (statistics.variance(a) / len(a) + statistics.variance(b) / len(b)) ** 0.5
    tolerance = max(0.03, 3 * se)
    print("rules", a, statistics.mean(a), "metered", b, statistics.mean(b), "se", se, "tolerance", tolerance)
    assert statistics.mean(b) > 0.1 + gain, (
        "the metered SFT must itself gain (its seeds spread by ~0.01 a seed), or the comparison says nothing"
    )
    assert statistics.mean(a) < statistics.mean(b) + tolerance, (a, b, tolerance)


@pytest.mark.slow
@needs_bwrap
def test_made_examples_gain_nothing_over_the_metered_pairs_at_smoke(compose_cfg, tmp_path):
    """Graded at smoke through the real pipeline (CI's second call, every landing): the solver's fresh
    examples against four passes over the served pairs, the same SFT and steps. At ci's 128 steps both
    barely move the policy (0.120 against 0.111 on 2026-12-03), so ci measures nothing here.

    Three grader seeds a side: every grading draws fresh training seeds, and this SFT's greedy rate
    spreads by ~0.011 a seed (five seeds a side on 2026-12-07, AMD EPYC: rules 0.174 +- 0.012, score
    0.221; metered 0.185 +- 0.011, score 0.232), with rarer draws further out (0.2305 for the rules on
    one CI host, 4.7 of those deviations above their mean). One seed a side, as this test first did,
    failed at a tolerance of 0.03 on such a draw; three keep the comparison's standard error near 0.01."""
    _compare(
        _graded(compose_cfg, tmp_path, "smoke", "rules", seeds=(0, 1, 2)),
        _graded(compose_cfg, tmp_path, "smoke", "metered", seeds=(0, 1, 2)),
        gain=0.05,
    )


@pytest.mark.slow
@needs_bwrap
def test_no_known_method_nearly_solves_smoke(compose_cfg, tmp_path):
    """DESIGN.md: no known method may reach 0.8 at smoke (a task a known method nearly solves is a toy).
    Plain SFT on the chosen answers of the served pairs (gold demonstrations), at the strongest setting
    found that fits the CPU cap: batches of 32 at LR 2e-3, four passes over the served pairs from memory.
    On the first version of the task eight passes at batch 64 scored 0.903 here."""
    r = _graded(compose_cfg, tmp_path, "smoke", "metered", lr="2e-3", batch=32)
    assert r["score"] < 0.8, r["score"]
