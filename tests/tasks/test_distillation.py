"""The distillation task: contract, committed files, the hidden metric on hand-made outputs and
models (perfect, uninformative, degenerate, non-finite), the metered teacher, and one ci seed
end to end through the real harness."""

import hashlib
import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.analysis.task_checks import Report, contract_checks
from ai4ai.core.hidden import load_grader
from ai4ai.core.task import load_task
from ai4ai.repo.models import cache_kwarg

from . import calibrated

TASK = "distillation"
REPO = PROJECT_ROOT / "repos_frozen" / TASK


@pytest.fixture(scope="module")
def grader():
    return load_grader(TASK, PROJECT_ROOT / "grader_hidden" / TASK)


@pytest.fixture(scope="module")
def programs(grader):
    return sys.modules[grader.__name__ + ".programs"]


@pytest.fixture(scope="module")
def val(grader):
    return grader.split("validation")


@pytest.fixture(scope="module")
def repo():
    sys.path.insert(0, str(REPO))
    try:
        import config
        import data
        import model
        import teacher

        yield SimpleNamespace(config=config, model=model, data=data, teacher=teacher)
    finally:
        sys.path.remove(str(REPO))


def _baseline() -> float:
    """The calibrated shipped exact match at smoke (current task version)."""
    return calibrated.baseline(TASK)


def test_task_composes_and_contract_checks_pass():
    task = load_task(TASK)
    assert task.metric.direction == "max" and task.metric.transform == "identity" and float(task.metric.best) == 1.0
    assert task.is_editable("train.py") and task.is_editable("algorithm/x.py")
    for f in ("model.py", "data.py", "teacher.py", "prepare.py", "evaluate.py", "checkpoint.py", "config.py"):
        assert not task.is_editable(f)
    assert set(task.validation_files) == {"data/val.u8", "data/teacher_train.u8"}  # never in training
    assert all(task.scale(s).threads == 1 for s in ("ci", "smoke"))
    rep = Report(lines=[])
    contract_checks(task, rep)
    assert rep.failed == 0, [line for line in rep.lines if line[0] == "FAIL"]


def test_committed_files_regenerate_and_match_the_repo(grader, programs, repo, tmp_path):
    c = repo.config
    assert (programs.PAD, programs.BOS, programs.SEP, programs.EOS) == (c.PAD, c.BOS, c.SEP, c.EOS)
    assert programs.VOCAB == c.VOCAB and programs.PROMPT_W == c.PROMPT_W and programs.ANSWER_W == c.ANSWER_W
    assert all(c.TOKENS[v] == k for k, v in programs.OPS.items())
    data = REPO / "data"
    listed = dict(reversed(line.split()) for line in (data / "SHA256SUMS").read_text().splitlines())
    for scale in ("ci", "smoke"):
        sums = grader.materialize(scale, tmp_path)
        for name, digest in sums.items():
            assert (tmp_path / name).read_bytes() == (data / name).read_bytes(), name
            assert listed[name] == digest
        assert len(repo.data.TrainingSplit(scale)) == c.get_scale(scale).budget_prompts
    # the grader's training-prompt counts are the repo's prompt budgets, full included (not materialised here)
    assert sys.modules[grader.__name__ + ".grader"].TRAIN_PROMPTS == {
        n: sc.budget_prompts for n, sc in c.SCALES.items()
    }
    p, a = grader.split("validation")
    assert np.concatenate([p, a], 1).tobytes() == (data / "val.u8").read_bytes()
    assert set(grader.SPLITS) >= {"selection", "test", "validation"}
    art = REPO / "artifacts"
    for line in (art / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((art / name).read_bytes()).hexdigest() == digest, name


def test_rule_cases(programs):
    t = programs.transform
    assert t("N", "N", "A", [3, 1, 2, 1]) == [1, 1, 2, 3]
    assert t("D", "N", "Z", [3, 1, 2, 1]) == [3, 2, 1]
    assert t("E", "H", "A", [8, 1, 6, 2, 4]) == [6, 8]
    assert t("O", "W", "Z", [1, 3, 5, 7, 3]) == [3, 3, 1]
    p, a = programs.sample(500, 3)
    assert ((a == programs.EOS).sum(1) == 1).all() and (a[:, 0] != programs.EOS).all()  # never empty
    assert (p[:, -1] == programs.SEP).all()  # left-padded


# ----------------------------------------------------------------------------- the metric on outputs


def _as_completion(rows, width):
    out = np.zeros((len(rows), width), dtype=np.int64)
    for i, r in enumerate(rows):
        r = list(r)[:width]
        out[i, : len(r)] = r
    return out


def _answer_lists(a, eos):
    return [list(row[: list(row).index(eos)]) for row in a]


def test_perfect_outputs_score_one_and_family_cases(grader, programs, val):
    p, a = val
    assert grader.score_completions(a, a).mean() == 1.0
    items, eos, W = _answer_lists(a, programs.EOS), programs.EOS, programs.ANSWER_W
    assert all(x == sorted(x) or x == sorted(x, reverse=True) for x in items)  # an order code always applies
    # the right items in the opposite order are wrong (unless the order cannot matter)
    flipped = grader.score_completions(a, _as_completion([x[::-1] + [eos] for x in items], W))
    assert flipped.sum() == sum(len(set(x)) == 1 for x in items)
    # a missing <eos>, one item too many or too few: wrong
    assert grader.score_completions(a, _as_completion(items, W)).sum() == 0
    assert grader.score_completions(a, _as_completion([x + x[-1:] + [eos] for x in items], W)).sum() == 0
    assert grader.score_completions(a, _as_completion([x[1:] + [eos] for x in items], W)).sum() == 0
    with pytest.raises(ValueError):
        grader.score_completions(a, a[:, :-1])


def test_degenerate_outputs_do_not_beat_the_shipped_algorithm(grader, programs, val):
    p, a = val
    base = _baseline()
    items, eos, W = _answer_lists(a, programs.EOS), programs.EOS, programs.ANSWER_W
    n = len(a)
    cases = {
        "empty": _as_completion([[eos]] * n, W),
        "nothing": np.zeros((n, W), dtype=np.int64),
        "repeated": _as_completion([x + x + [eos] for x in items], W),
        "prompt echo": _as_completion(
            [[t for t in row if t >= programs.DIGIT0 and t < programs.DIGIT0 + 10] + [eos] for row in p], W
        ),
    }
    for d in range(10):  # every constant one-item answer, and constant runs of one digit
        cases[f"constant {d}"] = _as_completion([[programs.DIGIT0 + d, eos]] * n, W)
        cases[f"run {d}"] = _as_completion([[programs.DIGIT0 + d] * len(x) + [eos] for x in items], W)
    # the most common answer of the validation split, answered to every prompt
    vals, counts = np.unique(a, axis=0, return_counts=True)
    cases["mode"] = np.repeat(vals[counts.argmax()][None].astype(np.int64), n, 0)
    for name, comp in cases.items():
        score = grader.score_completions(a, comp).mean()
        assert score < min(base, 0.1), (name, score, base)


class Oracle(torch.nn.Module):
    """A stand-in model that reads the prompt and emits one-hot logits of the true answer."""

    def __init__(self, programs, scale: float = 10.0):
        super().__init__()
        self.P, self.scale = programs, scale
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        inv = {v: k for k, v in programs.OPS.items()}
        self.inv = inv

    def _answers(self, x):
        P, out = self.P, torch.full((x.shape[0], self.P.ANSWER_W), self.P.PAD)
        for i, row in enumerate(x.tolist()):
            b = row.index(P.BOS)
            f, g, o = (self.inv[t] for t in row[b + 1 : b + 4])
            ys = P.transform(f, g, o, [t - P.DIGIT0 for t in row[b + 4 : -1]])
            ans = [P.DIGIT0 + y for y in ys] + [P.EOS]
            out[i, : len(ans)] = torch.tensor(ans)
        return out

    def forward(self, input_ids, use_cache=True, **cache):  # the cache under this transformers' name only
        past = cache.pop(cache_kwarg(), None)
        assert not cache, cache
        if past is None:
            past = {"ans": self._answers(input_ids), "t": 0}
        else:
            past["t"] += 1
        tok = past["ans"][:, min(past["t"], self.P.ANSWER_W - 1)]
        logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], self.P.VOCAB)
        logits[torch.arange(len(tok)), -1, tok] = self.scale
        return SimpleNamespace(logits=logits, **{cache_kwarg(): past})


def test_models_perfect_uninformative_and_non_finite(grader, programs, repo, val):
    assert grader.evaluate(Oracle(programs), val) == 1.0
    raw, se = grader.evaluate_with_noise(Oracle(programs), val)
    assert raw == 1.0 and se == 0.0
    assert grader.evaluate(Oracle(programs, scale=float("nan")), val) == 0.0
    assert grader.evaluate(Oracle(programs, scale=float("inf")), val) == 0.0
    zero = grader.uninformative(repo.model.build_model("ci")).eval()
    assert grader.evaluate(zero, val) == 0.0
    nan = repo.model.build_model("ci").eval()
    with torch.no_grad():
        nan.transformer.wte.weight.fill_(float("nan"))
    assert grader.evaluate(nan, val) == 0.0
    torch.manual_seed(0)
    assert grader.evaluate(repo.model.build_model("ci").eval(), val) < 0.05  # random init


def test_teacher_is_good_not_perfect_and_metered(grader, repo, val):
    p, a = val
    for scale in ("ci", "smoke"):
        t = repo.teacher.Teacher(scale)
        prompts = torch.from_numpy(p[:500].astype(np.int64))
        comp, logits = t.generate(prompts, return_logits=True)
        em = grader.score_completions(a[:500], comp.numpy()).mean()
        assert 0.5 < em < 0.999, (scale, em)
        assert t.used == int((prompts != 0).sum() + (comp != 0).sum())
        assert torch.equal(logits.argmax(-1)[comp != 0], comp[comp != 0])
        tokens, targets = repo.data.join(prompts, comp)
        used = t.used
        lg = t.logits(tokens)
        assert t.used - used == int((tokens != 0).sum())
        m = targets != -100
        assert torch.equal(lg[m].argmax(-1), targets[m])  # same teacher, same greedy tokens
        t.used = t.budget - 10
        with pytest.raises(repo.teacher.TeacherBudgetExhausted):
            t.logits(tokens[:1])
        with pytest.raises(repo.teacher.TeacherBudgetExhausted):
            t.generate(prompts[:1])
    split = repo.data.TrainingSplit("ci")
    split.get(torch.arange(len(split)))
    with pytest.raises(repo.data.BudgetExhausted):
        split.get(torch.arange(1))


# ----------------------------------------------------------------------------- end to end at ci


def test_ci_seed_trains_and_grades_end_to_end(compose_cfg, tmp_path):
    cfg = compose_cfg("config", [f"task={TASK}", "scale=ci", "agent=baseline"])
    run_dir = tmp_path / "run"
    pipeline.run(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded", r.get("reason")
    cands = r["checkpoints"]["per_seed"][0]["candidates"]
    assert len(cands) == 3 and all(c["valid"] for c in cands)
    assert abs(r["score"] - 0.1) < 0.12, r["score_per_seed"]
