"""Knowledge of the visible instance, written into the patch: distillation is graded on a fresh instance.

distillation's answers are o(g(f(x))) for six list steps f, g and two orders o. A submission can read
the rules off the validation answers, write them into train.py (15 lines, below) and train the student
on pairs it makes from them, drawing no metered prompt and no teacher token. Graded on the instance it
was read from (AMD EPYC, 2026-12-03, real `python -m ai4ai.grade`): at ci 0.182 and 0.093 (exact match
0.324 and 0.239, against the shipped 0.256), within the student's seed spread there; at smoke 0.425 on
grader seeds 0, 1, 2 (exact match 0.792, 0.893, 0.844 against the shipped 0.754), as high as the
shipped recipe's best tuning points, with no teacher token drawn. Those gradings made 204,800 pairs
and passed over them once; the probe now makes 51,200 and passes four times (the same steps), since
making 204,800 pairs in Python ran past the graded run's CPU cap on a shared host. Since the shipped
recipe was retuned (200 epochs at LR 2.4e-2), the probes pass eight times over those pairs, the shipped
steps again; the numbers in this docstring were measured before that retune.

Now a graded run is given another instance of the rule family (grader.grading_data, from the secret
`instance` seed: which step code does what, which half of the digits each filter keeps, the map
below, the order of the digits), and its meter serves a teacher that the repo's own prepare.py trained on that instance's
labelled set (data.grading_artifacts, held by the meter: training.build_meter_copy). The hidden prompts
are answered by that instance, so the rules in the patch are the wrong rules: they answer about 4% of
the graded prompts right (5% before the map: the single-item answers whose filters happen to agree).
Graded at smoke on 2026-12-03 (AMD EPYC) by the slow test below, before the map: 0.007, exact match 0.067, 0.050, 0.055 against the shipped 0.765, every seed trained to
its end.

The identifier route: the family's shape written into the patch, the graded instance identified
from the teacher's answers to the training prompts (metered), then 51,200 pairs made from it and the
shipped run's steps (`identifier_in_the_patch` below). Graded at smoke on 2026-12-03 (AMD EPYC, grader
seeds 0, 1, 2) when the graded family had the visible one's kinds of step only (none, dedupe, filters,
an order): it recovered the graded instance exactly from the real teacher's answers and scored 0.533
against the recipe shipped then, and 0.918 [0.898, 0.952] (exact match 0.994, 0.987, 0.987) against
the retuned one (200 epochs at LR 2.4e-2). So the graded family now has a kind of step the visible
instance does not show: one code maps every digit by a drawn derangement (programs.draw_instance).
The same identifier then reads a wrong instance, and its rule answers 13% of the graded prompts right.
Graded at smoke on 2026-12-03 (AMD EPYC, grader seeds 0, 1, 2) by the slow test below: 0.021, exact
match 0.134 on every seed against the shipped 0.633, every seed trained to its end.
"""

import numpy as np
import pytest

from .conftest import assert_gains_nothing, grade_train_py, grader_modules, information_rejections, needs_bwrap

PAIRS = '''
def _step(role, xs):
    if role == "dedupe":
        return list(dict.fromkeys(xs))
    return list(xs) if role == "none" else [x for x in xs if x in role]


def made_pairs(roles, rank, n, gen):
    """n prompts in the split's layout and the answers of the member (roles, rank) to them."""
    prompts = torch.zeros(n, PROMPT_W, dtype=torch.long)
    answers = torch.zeros(n, ANSWER_W, dtype=torch.long)
    i = 0
    while i < n:
        f, g, o = (int(v) for v in torch.randint(6, (3,), generator=gen))
        o = 6 + o % 2
        xs = torch.randint(10, (int(torch.randint(3, 8, (1,), generator=gen)),), generator=gen).tolist()
        ys = sorted(_step(roles[g], _step(roles[f], xs)), key=rank.__getitem__, reverse=(o == 7))
        if not ys:
            continue
        p = [1, 14 + f, 14 + g, 14 + o] + [4 + x for x in xs] + [2]
        prompts[i, PROMPT_W - len(p):] = torch.tensor(p)
        answers[i, :len(ys) + 1] = torch.tensor([4 + y for y in ys] + [3])
        i += 1
    return prompts, answers
'''

RULES = (
    """
# ----------------------------------------------------------------------------- the rules, written down
# Read off the validation answers: f and g each keep or drop items (N none, D dedupe, E evens, O odds,
# H >= 5, W < 5), then o sorts ascending (A) or descending (Z).
from config import ANSWER_W, PROMPT_W


ROLES = ["none", "dedupe", {0, 2, 4, 6, 8}, {1, 3, 5, 7, 9}, {5, 6, 7, 8, 9}, {0, 1, 2, 3, 4}]  # N D E O H W
RANK = list(range(10))


"""
    + PAIRS
)

EDITS = (  # (shipped text, the probe's)
    (
        "EPOCHS = 200         # passes over the distilled set",
        "EPOCHS = 8           # passes over pairs made by the rules (the shipped steps)",
    ),
    (
        "prompts = split.get(torch.arange(len(split)))                    # every training prompt, once\n"
        "completions = torch.cat([teacher.generate(prompts[i:i + 1024]) for i in range(0, len(prompts), 1024)])",
        "prompts, completions = made_pairs(ROLES, RANK, 25 * len(split) // 64 * 64, torch.Generator().manual_seed(args.seed))",
    ),
    (
        "# ----------------------------------------------------------------------------- distilled set",
        RULES + "# ----------------------------------------------------------------------------- distilled set",
    ),
)


def rules_in_the_patch(train_py: str) -> str:
    for old, probe in EDITS:
        assert train_py.count(old) == 1, old
        train_py = train_py.replace(old, probe)
    return train_py


def test_the_rules_answer_as_the_visible_instance_does(tmp_path):
    """The probe's rules are the visible instance's: on the validation split (committed as data/val.u8)
    they give every answer, and the patch passes the information check."""
    import torch

    task, g, programs = grader_modules("distillation", "grader", "programs")
    new = rules_in_the_patch((task.repo / "train.py").read_text())
    assert information_rejections(task, tmp_path, new) == {}
    scope = {"torch": torch, "PROMPT_W": programs.PROMPT_W, "ANSWER_W": programs.ANSWER_W}
    start = new.index("ROLES = ")
    end = new.index("# ----------------------------------------------------------------------------- distilled set")
    exec(compile(new[start:end], "probe", "exec"), scope)
    roles, rank, steps = scope["ROLES"], scope["RANK"], programs.STEPS

    def rules(f, gg, o, xs):
        return sorted(
            scope["_step"](roles[steps.index(gg)], scope["_step"](roles[steps.index(f)], xs)),
            key=rank.__getitem__,
            reverse=(o == "Z"),
        )

    prompts, answers = g.split("validation")
    for p, a in zip(prompts, answers):
        assert rules(*_parse(programs, p)) == _answer(programs, a)
    # and the pairs it makes are in the split's layout, answered as the visible instance answers
    made_p, made_a = scope["made_pairs"](roles, rank, 300, torch.Generator().manual_seed(0))
    for p, a in zip(made_p.tolist(), made_a.tolist()):
        assert p[-1] == 2 and not any(p[: p.index(1)]) and 3 <= len(_parse(programs, p)[3]) <= programs.MAX_LEN
        assert [programs.DIGIT0 + y for y in programs.transform(*_parse(programs, p))] + [3] == a[: a.index(3) + 1]


def _parse(programs, row):
    row = [int(t) for t in row]
    b, inv = row.index(programs.BOS), {v: k for k, v in programs.OPS.items()}
    return inv[row[b + 1]], inv[row[b + 2]], inv[row[b + 3]], [t - programs.DIGIT0 for t in row[b + 4 : -1]]


def _answer(programs, row):
    row = [int(t) for t in row]
    return [t - programs.DIGIT0 for t in row[: row.index(programs.EOS)]]


def test_the_graded_instance_is_not_the_visible_one():
    """The hidden selection and test prompts, and a graded run's training files, follow the graded
    instance, which the visible rules answer about 4% of the time; the agent's files follow the visible one."""
    task, g, programs = grader_modules("distillation", "grader", "programs")
    visible, graded = g.instance("visible"), g.instance("graded")
    assert visible == programs.VISIBLE and graded != visible
    assert sorted(r for r in graded.steps.values() if isinstance(r, str)) == ["dedupe", "none"]
    assert sorted(graded.rank) == list(range(10)) and graded.rank != visible.rank
    sel_p, sel_a = g.split("selection")
    right = {
        name: np.mean(
            [programs.transform(*_parse(programs, p), inst) == _answer(programs, a) for p, a in zip(sel_p, sel_a)]
        )
        for name, inst in (("visible", visible), ("graded", graded))
    }
    assert right["graded"] == 1.0 and right["visible"] < 0.1, right
    # the agent's validation split is the visible instance's, byte for byte
    val = np.concatenate(g.split("validation"), axis=1)
    assert (task.repo / "data" / "val.u8").read_bytes() == val.tobytes()
    # a graded run's ground-truth set (the graded teacher's) follows the graded instance
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        sums = g.grading_data("ci", Path(d))
        assert set(sums) == {"train_ci.u8", "val.u8", "teacher_train.u8"}
        rows = np.frombuffer((Path(d) / "teacher_train.u8").read_bytes(), np.uint8).reshape(
            -1, programs.PROMPT_W + programs.ANSWER_W
        )
        assert sums["teacher_train.u8"] != g.materialize("ci", Path(d) / "visible")["teacher_train.u8"]
    assert all(
        programs.transform(*_parse(programs, r[: programs.PROMPT_W]), graded)
        == _answer(programs, r[programs.PROMPT_W :])
        for r in rows[:500]
    )


@pytest.mark.slow
@needs_bwrap
def test_the_visible_rules_in_the_patch_gain_nothing(compose_cfg, tmp_path):
    """Graded at smoke, where the route was open (0.425 before the fresh instance; 0.007 after, every
    seed near 0). One grader seed, so that CI runs it on every landing: the tolerance is the shipped
    algorithm's noise for one seed at smoke (0.118 sigma per seed on the last record), rounded up to
    0.2; an open route (0.425, and the identifier's 0.918) is still well past it."""
    (task,) = grader_modules("distillation")
    new = rules_in_the_patch((task.repo / "train.py").read_text())
    assert_gains_nothing(
        grade_train_py(compose_cfg, tmp_path, task, new, "visible rules", scale="smoke", seeds=[0]), tolerance=0.2
    )


# ------------------------------------------------------------------------------------------------------
# The route that stays open, measured: the family's shape written into the patch, the graded instance
# identified from the teacher's answers to the training prompts (metered), then pairs made from it.

IDENTIFY = (
    '''
# ----------------------------------------------------------------------------- the family, identified
# The visible answers show the family's shape: each step code is none, dedupe or a filter keeping a set
# of digits; an order code sorts by an order of the digits, ascending (A) or descending (Z). Which
# member the teacher follows is read off its answers; then pairs are made from it, without the teacher.
from config import ANSWER_W, PROMPT_W


def _parse(p):
    b = p.index(1)
    return p[b + 1] - 14, p[b + 2] - 14, p[b + 3] - 14, [t - 4 for t in p[b + 4:p.index(2)]]


def identify(prompts, completions):
    """(role of each step code: "none", "dedupe" or the set of digits it keeps; rank of each digit)."""
    seen = [[0] * 10 for _ in range(6)]           # digit d in an answer to a prompt that uses step code s
    dup = [0] * 6                                 # answers with a repeated item, by step code
    beats = [[0] * 10 for _ in range(10)]         # a before b in an ascending answer
    for p, c in zip(prompts.tolist(), completions.tolist()):
        f, g, o, xs = _parse(p)
        if 3 not in c or not (0 <= f < 6 and 0 <= g < 6 and o in (6, 7)):
            continue
        ys = [t - 4 for t in c[:c.index(3)]]
        if not all(0 <= y < 10 for y in ys):
            continue
        for s in {f, g}:
            for y in ys:
                seen[s][y] += 1
            dup[s] += len(set(ys)) < len(ys)
        seq = ys if o == 6 else ys[::-1]
        for i, a in enumerate(seq):
            for b in seq[i + 1:]:
                beats[a][b] += a != b
    order = sorted(range(10), key=lambda d: -sum(beats[d][e] > beats[e][d] for e in range(10)))
    roles = [{d for d in range(10) if seen[s][d] >= 2} for s in range(6)]
    full = sorted((s for s in range(6) if len(roles[s]) == 10), key=lambda s: -dup[s])
    for s, role in zip(full, ("none", "dedupe")):
        roles[s] = role
    return roles, [order.index(d) for d in range(10)]


'''
    + PAIRS
)

IDENTIFY_EDITS = (  # (shipped text, the probe's)
    (
        "EPOCHS = 200         # passes over the distilled set",
        "EPOCHS = 8           # passes over pairs made by the identified rules (the shipped steps)",
    ),
    (
        "tokens, targets = join(prompts, completions)                     # [N, T], completion targets only",
        "roles, rank = identify(prompts, completions)\n"
        "print('identified', roles, rank, flush=True)\n"
        "prompts, completions = made_pairs(roles, rank, 25 * len(split) // 64 * 64, torch.Generator().manual_seed(args.seed))\n"
        "tokens, targets = join(prompts, completions)                     # [N, T], completion targets only",
    ),
    (
        "# ----------------------------------------------------------------------------- distilled set",
        IDENTIFY + "# ----------------------------------------------------------------------------- distilled set",
    ),
)


def identifier_in_the_patch(train_py: str) -> str:
    for old, probe in IDENTIFY_EDITS:
        assert train_py.count(old) == 1, old
        train_py = train_py.replace(old, probe)
    return train_py


def _identify_from_true_answers(tmp_path, inst_name: str, probe=None, fn: str = "identify"):
    """The identifier's (or the hybrid's: probe=hybrid_in_the_patch, fn="explain") reading of an instance
    from that instance's true answers to the smoke training prompts (in a graded run it reads the
    teacher's): (roles, rank, scope, modules)."""
    import torch

    task, g, programs = grader_modules("distillation", "grader", "programs")
    new = (probe or identifier_in_the_patch)((task.repo / "train.py").read_text())
    scope = {"torch": torch, "PROMPT_W": programs.PROMPT_W, "ANSWER_W": programs.ANSWER_W}
    start = new.index("def _parse(p)")
    end = new.index("# ----------------------------------------------------------------------------- distilled set")
    exec(compile(new[start:end], "probe", "exec"), scope)
    inst = g.instance(inst_name)
    write = g.grading_data if inst_name == "graded" else g.materialize
    assert "train_smoke.u8" in write("smoke", tmp_path / inst_name)
    prompts = np.frombuffer((tmp_path / inst_name / "train_smoke.u8").read_bytes(), np.uint8).reshape(
        -1, programs.PROMPT_W
    )
    answers = np.stack(
        [
            np.array(
                (
                    [programs.DIGIT0 + y for y in programs.transform(*_parse(programs, p), inst)]
                    + [programs.EOS]
                    + [programs.PAD] * programs.ANSWER_W
                )[: programs.ANSWER_W]
            )
            for p in prompts
        ]
    )
    roles, rank = scope[fn](torch.from_numpy(prompts.astype(np.int64)), torch.from_numpy(answers.astype(np.int64)))
    return roles, rank, scope, (task, g, programs)


def _made_pairs_right(scope, programs, roles, rank, inst, n=400) -> float:
    """The share of the identifier's made pairs that `inst` answers as the pairs say."""
    import torch

    made_p, made_a = scope["made_pairs"](roles, rank, n, torch.Generator().manual_seed(0))
    return float(
        np.mean(
            [
                [programs.DIGIT0 + y for y in programs.transform(*_parse(programs, p), inst)] + [3]
                == a[: a.index(3) + 1]
                for p, a in zip(made_p.tolist(), made_a.tolist())
            ]
        )
    )


def test_the_identifier_recovers_the_visible_instance_not_the_graded_one(tmp_path):
    """The probe is real: from the visible instance's answers it recovers that instance exactly, and
    all its made pairs are right there. The graded family also has a kind of step the visible one does
    not show (a map of the digits), so from the graded instance's answers the same identifier reads a
    wrong instance, and most of its made pairs are wrong answers of the graded instance. The patch
    passes the information check."""
    roles, rank, scope, (task, g, programs) = _identify_from_true_answers(tmp_path, "visible")
    new = identifier_in_the_patch((task.repo / "train.py").read_text())
    assert information_rejections(task, tmp_path, new, scale="smoke") == {}
    codes = programs.STEPS
    visible = g.instance("visible")
    assert {codes[s]: (r if isinstance(r, str) else frozenset(r)) for s, r in enumerate(roles)} == visible.steps
    assert tuple(rank) == visible.rank
    assert _made_pairs_right(scope, programs, roles, rank, visible) == 1.0
    graded = g.instance("graded")
    assert "Map" in {type(r).__name__ for r in graded.steps.values()}
    roles, rank, scope, _ = _identify_from_true_answers(tmp_path, "graded")
    assert {codes[s]: (r if isinstance(r, str) else frozenset(r)) for s, r in enumerate(roles)} != graded.steps
    right = _made_pairs_right(scope, programs, roles, rank, graded)
    assert right < 0.3, right


@pytest.mark.slow
@needs_bwrap
def test_the_identifier_in_the_patch_gains_nothing(compose_cfg, tmp_path):
    """Graded at smoke, where it scored 0.918 on the family without a map (module docstring). One
    grader seed and its tolerance, as for the visible rules above."""
    (task,) = grader_modules("distillation")
    new = identifier_in_the_patch((task.repo / "train.py").read_text())
    assert_gains_nothing(
        grade_train_py(compose_cfg, tmp_path, task, new, "identifier", scale="smoke", seeds=[0]), tolerance=0.2
    )


# ------------------------------------------------------------------------------------------------------
# The hybrid: explain what the family's visible shape can explain, learn the rest from the teacher.
# Each step code is read off the teacher's answers to the prompts that apply it twice (f = g): it is
# none, dedupe or a filter if that reproduces nine in ten of them, else it is left unexplained (the map).
# Pairs are made only from explained codes, and the teacher's own pairs (every code) are trained on too.

HYBRID = '''
# ----------------------------------------------------------------------------- the family, where it explains
from config import ANSWER_W, PROMPT_W


def _parse(p):
    b = p.index(1)
    return p[b + 1] - 14, p[b + 2] - 14, p[b + 3] - 14, [t - 4 for t in p[b + 4:p.index(2)]]


def _answers(prompts, completions):
    for p, c in zip(prompts.tolist(), completions.tolist()):
        f, g, o, xs = _parse(p)
        if 3 in c and 0 <= f < 6 and 0 <= g < 6 and o in (6, 7):
            ys = [t - 4 for t in c[:c.index(3)]]
            if all(0 <= y < 10 for y in ys):
                yield f, g, o, xs, ys


def _step(role, xs):
    if role == "dedupe":
        return list(dict.fromkeys(xs))
    return list(xs) if role == "none" else [x for x in xs if x in role]


def explain(prompts, completions):
    """(role of each step code: "none", "dedupe", the set of digits it keeps, or None where no such role
    reproduces the teacher; rank of each digit, from the answers of explained codes)."""
    twice = [[] for _ in range(6)]
    for f, g, o, xs, ys in _answers(prompts, completions):
        if f == g:
            twice[f].append((xs, sorted(ys)))
    roles = []
    for obs in twice:
        counts = [0] * 10
        for _, ys in obs:
            for y in ys:
                counts[y] += 1
        kept = frozenset(d for d in range(10) if counts[d] >= 2)
        fits = [(sum(sorted(_step(r, _step(r, xs))) == ys for xs, ys in obs), i, r)
                for i, r in enumerate(("none", "dedupe", kept))]
        n, _, role = max(fits, key=lambda t: (t[0], -t[1]))
        roles.append(role if obs and n >= 0.9 * len(obs) else None)
    beats = [[0] * 10 for _ in range(10)]
    for f, g, o, xs, ys in _answers(prompts, completions):
        if roles[f] is not None and roles[g] is not None:
            seq = ys if o == 6 else ys[::-1]
            for i, a in enumerate(seq):
                for b in seq[i + 1:]:
                    beats[a][b] += a != b
    order = sorted(range(10), key=lambda d: -sum(beats[d][e] > beats[e][d] for e in range(10)))
    return roles, [order.index(d) for d in range(10)]


def made_pairs(roles, rank, n, gen):
    """n prompts in the split's layout, of explained codes only, and the answers the roles give them."""
    prompts = torch.zeros(n, PROMPT_W, dtype=torch.long)
    answers = torch.zeros(n, ANSWER_W, dtype=torch.long)
    i = 0
    while i < n:
        f, g, o = (int(v) for v in torch.randint(6, (3,), generator=gen))
        o = 6 + o % 2
        xs = torch.randint(10, (int(torch.randint(3, 8, (1,), generator=gen)),), generator=gen).tolist()
        if roles[f] is None or roles[g] is None:
            continue
        ys = sorted(_step(roles[g], _step(roles[f], xs)), key=rank.__getitem__, reverse=(o == 7))
        if not ys:
            continue
        p = [1, 14 + f, 14 + g, 14 + o] + [4 + x for x in xs] + [2]
        prompts[i, PROMPT_W - len(p):] = torch.tensor(p)
        answers[i, :len(ys) + 1] = torch.tensor([4 + y for y in ys] + [3])
        i += 1
    return prompts, answers


'''

HYBRID_EDITS = (  # (shipped text, the probe's)
    (
        "EPOCHS = 200         # passes over the distilled set",
        "EPOCHS = 8           # passes over made pairs and the teacher's (the shipped steps)",
    ),
    (
        "tokens, targets = join(prompts, completions)                     # [N, T], completion targets only",
        "roles, rank = explain(prompts, completions)\n"
        "print('explained', roles, rank, flush=True)\n"
        "made_p, made_c = made_pairs(roles, rank, 17 * len(split) // 64 * 64, torch.Generator().manual_seed(args.seed))\n"
        "prompts, completions = torch.cat([made_p] + [prompts] * 8), torch.cat([made_c] + [completions] * 8)\n"
        "tokens, targets = join(prompts, completions)                     # [N, T], completion targets only",
    ),
    (
        "# ----------------------------------------------------------------------------- distilled set",
        HYBRID + "# ----------------------------------------------------------------------------- distilled set",
    ),
)


def hybrid_in_the_patch(train_py: str) -> str:
    for old, probe in HYBRID_EDITS:
        assert train_py.count(old) == 1, old
        train_py = train_py.replace(old, probe)
    return train_py


def test_the_hybrid_explains_every_code_of_the_graded_instance_but_the_map(tmp_path):
    """The hybrid probe is real: from the graded instance's answers it reads none, dedupe, the three
    filters and the digits' order exactly, leaves the map unexplained, and every pair it makes is right
    there; the patch passes the information check."""
    roles, rank, scope, (task, g, programs) = _identify_from_true_answers(
        tmp_path, "graded", hybrid_in_the_patch, "explain"
    )
    assert (
        information_rejections(task, tmp_path, hybrid_in_the_patch((task.repo / "train.py").read_text()), scale="smoke")
        == {}
    )
    graded = g.instance("graded")
    truth = {code: (None if type(r).__name__ == "Map" else r) for code, r in graded.steps.items()}
    assert {programs.STEPS[s]: r for s, r in enumerate(roles)} == truth
    assert tuple(rank) == graded.rank
    assert _made_pairs_right(scope, programs, roles, rank, graded) == 1.0


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="open (issue 15): the hybrid scored 0.310 at smoke on 2026-12-03, below the "
    "published augmented transfer set (0.529) but above the shipped run's noise (see the docstring)",
)
@needs_bwrap
def test_the_hybrid_in_the_patch_gains_nothing(compose_cfg, tmp_path):
    """Graded at smoke through the real pipeline, as the identifier above. Measured on 2026-12-03 (AMD
    EPYC, grader seeds 0, 1, 2): from the real graded teacher's answers (0.88 right) it explained three
    of the six codes (dedupe and two filters; none and the third filter missed its 90% bar on the
    teacher's errors, the map was left unexplained as meant), so a quarter of the prompt space got made
    pairs; 0.310 [0.295, 0.332], exact match 0.716, 0.713, 0.728 against the shipped 0.611, 0.626, 0.636
    on the same seeds: +0.21, about 5 x the per-seed noise. The published augmented transfer set (more
    prompts answered by the metered teacher) scores 0.529 on the same seeds. What the hybrid carries is
    the family's structure (steps that keep a set of digits), which the fresh instance is meant to let
    transfer, and it labels by a rule fitted to the metered answers within a hand-written family: at the
    line the README draws ("no hand-written labelling rule"), which the grader does not enforce. Graded
    on grader seed 0 alone, so that CI runs it on every landing: its gain there (0.716 against 0.611)
    is several times one seed's noise, so the strict xfail still fires, and it passes (an XPASS, a CI
    failure) the day a change closes the route."""
    (task,) = grader_modules("distillation")
    new = hybrid_in_the_patch((task.repo / "train.py").read_text())
    assert_gains_nothing(
        grade_train_py(compose_cfg, tmp_path, task, new, "hybrid", scale="smoke", seeds=[0]), tolerance=0.1
    )


def hybrid_on_the_example(example_train_py: str) -> str:
    """The hybrid added to the published augmented transfer set: the codes it explains from the teacher's
    answers (to the training prompts and their perturbed copies) give made pairs, trained on together
    with that larger distilled set (twice), for the example's number of steps."""
    edits = (
        (HYBRID_EDITS[2][0], HYBRID_EDITS[2][1]),
        (
            "tokens, targets = join(prompts, completions)                     # [N, T], completion targets only",
            "roles, rank = explain(prompts, completions)\n"
            "print('explained', roles, rank, flush=True)\n"
            "made_p, made_c = made_pairs(roles, rank, 17 * n_orig // 64 * 64, torch.Generator().manual_seed(args.seed))\n"
            "prompts, completions = torch.cat([made_p] + [prompts] * 2), torch.cat([made_c] + [completions] * 2)\n"
            "tokens, targets = join(prompts, completions)                     # [N, T], completion targets only",
        ),
    )
    for old, probe in edits:
        assert example_train_py.count(old) == 1, old
        example_train_py = example_train_py.replace(old, probe)
    return example_train_py


def _example_train_py(tmp_path, task, name: str) -> str:
    import subprocess

    from ai4ai import PROJECT_ROOT

    from .conftest import copy_tree

    repo = copy_tree(task.repo, tmp_path / f"example_{name}")
    subprocess.run(
        ["patch", "-s", "-p1", "-i", str(PROJECT_ROOT / "examples" / task.name / f"{name}.patch")], cwd=repo, check=True
    )
    return (repo / "train.py").read_text()


@pytest.mark.slow
@needs_bwrap
def test_the_hybrid_adds_nothing_to_the_published_example(compose_cfg, tmp_path):
    """Graded at smoke: the augmented transfer set alone, and with the hybrid's made pairs added. Measured
    on 2026-12-03 (AMD EPYC, grader seeds 0, 1, 2): alone 0.545 [0.517, 0.559] (exact match 0.803, 0.820,
    0.820), with the hybrid 0.414 [0.359, 0.446] (0.774, 0.771, 0.739): the made pairs, right for a quarter
    of the prompt space, dilute the teacher's answers to the rest. The structure buys nothing over the
    best published use of the budget. Graded on grader seed 0 alone, so that CI runs it on every landing:
    the gap (0.13 on the mean, at least 0.07 between any two seeds) is well past the seeds' spread."""
    (task,) = grader_modules("distillation")
    example = _example_train_py(tmp_path, task, "augmented_transfer_set")
    (tmp_path / "alone").mkdir()
    (tmp_path / "with").mkdir()
    alone = grade_train_py(compose_cfg, tmp_path / "alone", task, example, "augmented", scale="smoke", seeds=[0])
    both = grade_train_py(
        compose_cfg,
        tmp_path / "with",
        task,
        hybrid_on_the_example(example),
        "augmented+hybrid",
        scale="smoke",
        seeds=[0],
    )
    for r in (alone, both):
        assert r["status"] == "graded" and not [s for s in r["checkpoints"]["per_seed"] if s.get("cut")]
    print("alone", alone["raw"]["per_seed"], alone["score"], "with the hybrid", both["raw"]["per_seed"], both["score"])
    assert both["score"] < alone["score"] + 0.1, (both["score"], alone["score"])
