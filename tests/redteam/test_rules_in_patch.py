"""Open route, measured: a task whose labels come from a few public rules can be written down.

distillation's answers are o(g(f(x))) for six list steps f, g and two orders o. A submission can read
the rules off the validation answers, write them into train.py (15 lines, below) and train the student
on pairs it makes from them, drawing no metered prompt and no teacher token. Graded at ci through the
real harness on 2026-12-03 (AMD EPYC), twice, with different training seeds: 0.182 (exact match 0.324)
and 0.093 (0.239), against the shipped 0.256: at ci its gain is within the student's seed-to-seed
spread on made data. At smoke it is not: 0.425 on grader seeds 0, 1, 2 (exact match 0.792, 0.893,
0.844 against the shipped 0.754; AMD EPYC, 2026-12-03). The route is open; no grading of it is
asserted here, since the task, not the harness, has to change to close it.

Grading on a fresh instance would not close it: re-drawing which code means which rule leaves 1,440
draws, which a handful of metered teacher answers identify. Closing it is a change of the task (labels
from a function too large to write down, as sft's 936-fact table). The test below keeps the probe
honest: its rules are the grader's, and its patch passes the information check.
"""
from .conftest import grader_modules, information_rejections

RULES = '''
# ----------------------------------------------------------------------------- the rules, written down
# Read off the validation answers: f and g each keep or drop items (N none, D dedupe, E evens, O odds,
# H >= 5, W < 5), then o sorts ascending (A) or descending (Z).
from config import ANSWER_W, PROMPT_W


def _step(op, xs):
    if op == "D":
        return list(dict.fromkeys(xs))
    keep = {"E": lambda x: x % 2 == 0, "O": lambda x: x % 2 == 1, "H": lambda x: x >= 5, "W": lambda x: x < 5}.get(op)
    return [x for x in xs if keep(x)] if keep else list(xs)


def made_pairs(n, gen):
    """n prompts in the split's layout and the rules' answers to them."""
    prompts = torch.zeros(n, PROMPT_W, dtype=torch.long)
    answers = torch.zeros(n, ANSWER_W, dtype=torch.long)
    i = 0
    while i < n:
        f, g, o = (int(v) for v in torch.randint(6, (3,), generator=gen))
        o = 6 + o % 2
        xs = torch.randint(10, (int(torch.randint(3, 8, (1,), generator=gen)),), generator=gen).tolist()
        ys = sorted(_step("NDEOHW"[g], _step("NDEOHW"[f], xs)), reverse=(o == 7))
        if not ys:
            continue
        p = [1, 14 + f, 14 + g, 14 + o] + [4 + x for x in xs] + [2]
        prompts[i, PROMPT_W - len(p):] = torch.tensor(p)
        answers[i, :len(ys) + 1] = torch.tensor([4 + y for y in ys] + [3])
        i += 1
    return prompts, answers

'''

EDITS = (  # (shipped text, the probe's)
    ("EPOCHS = 100         # passes over the distilled set",
     "EPOCHS = 1           # one pass over pairs made by the rules"),
    ("prompts = split.get(torch.arange(len(split)))                    # every training prompt, once\n"
     "completions = torch.cat([teacher.generate(prompts[i:i + 1024]) for i in range(0, len(prompts), 1024)])",
     "prompts, completions = made_pairs(100 * len(split) // 64 * 64, torch.Generator().manual_seed(args.seed))"),
    ("# ----------------------------------------------------------------------------- distilled set",
     RULES + "# ----------------------------------------------------------------------------- distilled set"),
)


def rules_in_the_patch(train_py: str) -> str:
    for old, probe in EDITS:
        assert train_py.count(old) == 1, old
        train_py = train_py.replace(old, probe)
    return train_py


def test_the_rules_answer_as_the_hidden_programs_do(tmp_path):
    """The probe's rules are the grader's: on the hidden validation split they give every answer, and
    the patch passes the information check."""
    import torch
    task, g, programs = grader_modules("distillation", "grader", "programs")
    new = rules_in_the_patch((task.repo / "train.py").read_text())
    assert information_rejections(task, tmp_path, new) == {}
    scope = {"torch": torch, "PROMPT_W": programs.PROMPT_W, "ANSWER_W": programs.ANSWER_W}
    start, end = new.index("def _step"), new.index("# ----------------------------------------------------------------------------- distilled set")
    exec(compile(new[start:end], "probe", "exec"), scope)
    ops = "NDEOHWAZ"

    def rules(p):
        body = p[p.index(1) + 1:p.index(2)]
        f, gg, o, xs = ops[body[0] - 14], ops[body[1] - 14], ops[body[2] - 14], [t - 4 for t in body[3:]]
        return f, gg, o, xs
    prompts, answers = g.split("validation")
    for p, a in zip(prompts.tolist(), answers.tolist()):
        f, gg, o, xs = rules(p)
        assert sorted(scope["_step"](gg, scope["_step"](f, xs)), reverse=(o == "Z")) == [t - 4 for t in a[:a.index(3)]]
    # and the pairs it makes are in the split's layout, answered as the hidden programs answer
    made_p, made_a = scope["made_pairs"](300, torch.Generator().manual_seed(0))
    for p, a in zip(made_p.tolist(), made_a.tolist()):
        assert p[-1] == 2 and not any(p[:p.index(1)]) and 3 <= len(rules(p)[3]) <= programs.MAX_LEN
        assert [programs.DIGIT0 + y for y in programs.transform(*rules(p))] + [3] == a[:a.index(3) + 1]
