"""The dpo task: contract, hidden metric on hand-made outputs and models, and one ci seed end to end."""

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

TASK = "dpo"
REPO = PROJECT_ROOT / "repos_frozen" / TASK


@pytest.fixture(scope="module")
def grader():
    """The hidden grader's module (the package re-exports its interface; tests use helpers too)."""
    pkg = load_grader(TASK, PROJECT_ROOT / "grader_hidden" / TASK)
    return sys.modules[pkg.__name__ + ".grader"]


@pytest.fixture(scope="module")
def tasks(grader):
    return sys.modules[grader.__name__.rsplit(".", 1)[0] + ".tasks"]


@pytest.fixture(scope="module")
def items(grader):
    return grader.split("validation")


_REPO_MODULES = ("config", "model", "data", "checkpoint")


@pytest.fixture(scope="module")
def repo_modules():
    """The repo's modules, imported fresh (other tasks' repos use the same module names)."""
    saved = {k: sys.modules.pop(k) for k in _REPO_MODULES if k in sys.modules}
    sys.path.insert(0, str(REPO))
    try:
        import checkpoint
        import config
        import model

        yield SimpleNamespace(config=config, model=model, checkpoint=checkpoint)
    finally:
        sys.path.remove(str(REPO))
        for k in _REPO_MODULES:
            sys.modules.pop(k, None)
        sys.modules.update(saved)


def _baseline_rate() -> float:
    """The calibrated shipped rate at smoke (current task version)."""
    return calibrated.baseline(TASK)


def test_task_composes_and_contract_checks_pass():
    task = load_task(TASK)
    assert task.metric.direction == "max" and task.metric.transform == "identity" and task.metric.best == 1.0
    assert task.is_editable("train.py") and task.is_editable("algorithm/x.py")
    for f in ("model.py", "data.py", "prepare.py", "evaluate.py", "checkpoint.py", "config.py"):
        assert not task.is_editable(f)
    assert all(task.scale(s).threads == 1 for s in ("ci", "smoke"))
    rep = Report(lines=[])
    contract_checks(task, rep)
    assert rep.failed == 0, [line for line in rep.lines if line[0] == "FAIL"]


def test_committed_files_regenerate(grader, repo_modules, tmp_path):
    assert grader.CHARS == repo_modules.config.CHARS and grader.SEQ_LEN == repo_modules.config.SEQ_LEN
    data = REPO / "data"
    assert grader.validation_array().tobytes() == (data / "val.u8").read_bytes()
    sums = grader.materialize("ci", tmp_path)
    assert (tmp_path / "train_ci.u8").read_bytes() == (data / "train_ci.u8").read_bytes()
    listed = dict(reversed(line.split()) for line in (data / "SHA256SUMS").read_text().splitlines())
    assert all(listed[k] == v for k, v in sums.items())
    assert set(grader.SPLITS) >= {"selection", "test", "validation"}


def test_pairs_chosen_pass_and_rejected_fail(grader, tasks):
    rng = np.random.default_rng(0)
    for _ in range(3000):
        p = tasks.sample_prompt(rng)
        c, r = tasks.pair(p, rng)
        assert tasks.verify(p, c) == (True, True)
        assert not all(tasks.verify(p, r))


# ----------------------------------------------------------------------------- the metric on outputs


def test_perfect_outputs_score_one(grader, tasks, items):
    assert grader.score_outputs(items, [tasks.target(p) for p in items]).mean() == 1.0


def test_family_cases(grader, tasks):
    p = {"task": "add", "args": "47 8", "fmt": "!", "core": "55", "x": 0.0}
    assert tasks.verify(p, "55!") == (True, True)
    assert tasks.verify(p, "55") == (False, False)  # right answer, constraint broken
    assert tasks.verify(p, "56!") == (True, False)  # constraint met, answer wrong
    assert tasks.verify(p, "!") == (False, False)  # only the format
    q = {"task": "rev", "args": "aBcD", "fmt": "U", "core": "DcBa", "x": 0.0}
    assert tasks.verify(q, "DCBA") == (True, True)
    assert tasks.verify(q, "DcBa") == (False, False)  # right letters, case constraint broken
    r = {"task": "max", "args": "12 87 45", "fmt": "p5", "core": "87", "x": 0.0}
    assert tasks.verify(r, "87...") == (True, True)
    assert tasks.verify(r, "87..") == (False, False)  # length bound
    assert tasks.verify(r, ".....") == (False, False)
    d = {"task": "max", "args": "12 87 45", "fmt": "d", "core": "87", "x": 0.0}
    assert tasks.verify(d, "87-87") == (True, True) and tasks.verify(d, "87-88") == (False, False)
    w = {"task": "add", "args": "30 4", "fmt": "[", "core": "34", "x": 0.0}
    assert tasks.verify(w, "[34]") == (True, True) and tasks.verify(w, "[]") == (False, False)


def test_degenerate_outputs_do_not_beat_the_shipped_algorithm(grader, tasks, items):
    base = _baseline_rate()
    rng = np.random.default_rng(1)
    wrap = {
        "!": lambda s: s + "!",
        "[": lambda s: "[" + s + "]",
        "#": lambda s: "#" + s,
        "d": lambda s: s + "-" + s,
        "U": str.upper,
        "L": str.lower,
    }

    def only_format(p):  # the constraint met around an empty or fixed answer
        f = p["fmt"]
        return "." * int(f[1:]) if f.startswith("p") else wrap[f]("1")

    cases = {
        "empty": ["" for _ in items],
        "constant": ["55!" for _ in items],
        "repeated": ["aaaaaaaaaaaaaaaaaaaaa" for _ in items],
        "collapsed": [tasks.target(items[0]) for _ in items],
        "only format, no answer": [only_format(p) for p in items],
        "answer without format": [p["core"] for p in items],
        "random answer, right format": [
            tasks.apply_fmt(str(rng.integers(10, 200)), p["fmt"])
            if not p["fmt"].startswith("p")
            else tasks.apply_fmt("12", p["fmt"])
            for p in items
        ],
        "non-decodable": ["\x00" * 5 for _ in items],
    }
    for name, outs in cases.items():
        rate = grader.score_outputs(items, outs).mean()
        assert rate < base, (name, rate, base)
        assert rate < 0.06, (name, rate)


# ----------------------------------------------------------------------------- the metric on models


class LookupLM(torch.nn.Module):
    """A stand-in LM that answers each prompt with a fixed string (through the grader's cached loop)."""

    def __init__(self, answers: dict, encode, vocab: int, eos: int = 0):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.answers, self.encode, self.vocab, self.eos = answers, encode, vocab, eos

    def forward(self, input_ids, use_cache=True, **cache):  # the cache under this transformers' name only
        past = cache.pop(cache_kwarg(), None)
        assert not cache, cache
        seqs = input_ids if past is None else torch.cat([past, input_ids], 1)
        logits = torch.zeros(seqs.shape[0], input_ids.shape[1], self.vocab)
        for b, row in enumerate(seqs.tolist()):
            text = "".join(self.chars[i - 1] for i in row if i)
            prompt, _, sofar = text.partition(">")
            want = self.encode(self.answers[prompt + ">"]) + [self.eos]
            logits[b, -1, want[len(sofar)] if len(sofar) < len(want) else self.eos] = 5.0
        return SimpleNamespace(logits=logits, **{cache_kwarg(): seqs})


def test_perfect_and_uninformative_models(grader, tasks, items, repo_modules):
    few = items[:300]
    lm = LookupLM({tasks.prompt_text(p): tasks.target(p) for p in few}, grader.encode, repo_modules.config.VOCAB)
    lm.chars = grader.CHARS
    assert grader.evaluate(lm, few) == 1.0
    rate, se = grader.evaluate_with_noise(lm, few)
    assert rate == 1.0 and se == 0.0
    # the 0 anchor: all weights zero -> all logits equal -> argmax is EOS -> empty answers -> 0
    zero = grader.uninformative(repo_modules.model.build_model("smoke"))
    assert all(float(p.detach().abs().max()) == 0 for p in zero.parameters())
    assert grader.generate(zero, [tasks.prompt_text(p) for p in few[:50]]) == [""] * 50
    assert grader.evaluate(zero, items) == 0.0


def test_non_finite_and_random_models_score_low(grader, items, repo_modules):
    m = repo_modules.model.build_model("smoke")
    with torch.no_grad():
        for p in m.parameters():
            p.fill_(float("nan"))
    assert grader.evaluate(m, items[:300]) == 0.0
    torch.manual_seed(0)
    assert grader.evaluate(repo_modules.model.build_model("smoke"), items[:300]) < 0.02


def test_prepared_policy_is_checked_and_mediocre(grader, items, repo_modules):
    ref = repo_modules.checkpoint.load_policy("smoke")
    rate = grader.evaluate(ref, items[:1000])
    assert 0.05 < rate < 0.5, rate


def test_training_nothing_does_not_beat_the_shipped_algorithm(grader, repo_modules):
    """A submission that saves the prepared policy unchanged must score below 0.1 on the hidden test."""
    ref = repo_modules.checkpoint.load_policy("smoke")
    rate = grader.evaluate(ref.eval(), grader.split("test"))
    assert rate < _baseline_rate(), (rate, _baseline_rate())


# ----------------------------------------------------------------------------- end to end


def test_ci_seed_trains_and_grades(compose_cfg, tmp_path):
    cfg = compose_cfg("config", [f"task={TASK}", "scale=ci", "agent=baseline"])
    run_dir = tmp_path / "run"
    pipeline.run(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded", r.get("reason")
    assert abs(r["score"] - 0.1) < 0.08, r["score_per_seed"]
    cands = r["checkpoints"]["per_seed"][0]["candidates"]
    assert len(cands) == 3 and all(c["valid"] for c in cands)
