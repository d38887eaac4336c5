"""The reward_model task: contract, hidden metric on hand-made rewards, and one ci seed end to end."""
import json
import math

import numpy as np
import pytest
import torch

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.check_task import Report, contract_checks
from ai4ai.hidden import load_grader
from ai4ai.task import load_task

from . import calibrated

TASK = "reward_model"
SEQ = 24


@pytest.fixture(scope="module")
def grader():
    return load_grader(TASK, PROJECT_ROOT / "grader_hidden" / TASK)


@pytest.fixture(scope="module")
def rule(grader):
    import importlib
    return importlib.import_module(grader.__name__ + ".rule")


@pytest.fixture(scope="module")
def val(grader):
    return grader.split("validation")


def _baseline_accuracy() -> float:
    """The calibrated shipped accuracy at smoke (current task version)."""
    return calibrated.baseline(TASK)


def test_task_composes_and_contract_checks_pass():
    task = load_task(TASK)
    assert task.metric.direction == "max" and task.metric.transform == "identity" and task.metric.best == 1.0
    assert task.is_editable("train.py") and task.is_editable("algorithm/x.py")
    assert not task.is_editable("model.py") and not task.is_editable("prepare.py")
    rep = Report(lines=[])
    contract_checks(task, rep)
    assert rep.failed == 0, [line for line in rep.lines if line[0] == "FAIL"]


def test_validation_split_regenerates_the_committed_file(grader):
    committed = (PROJECT_ROOT / "repos_frozen" / TASK / "data" / "val.u8").read_bytes()
    assert grader.split("validation").tobytes() == committed


def test_splits_have_clean_labels_and_no_ties(grader, rule, val):
    sa, sb = rule.rule_scores(val[:, :SEQ]), rule.rule_scores(val[:, SEQ:2 * SEQ])
    assert (sa != sb).all()
    assert ((sa > sb).astype(np.uint8) == val[:, -1]).all()
    assert 0.4 < val[:, -1].mean() < 0.6


def test_training_labels_are_noisy_at_the_stated_rate(rule):
    tr = np.frombuffer((PROJECT_ROOT / "repos_frozen" / TASK / "data" / "train_ci.u8").read_bytes(),
                       dtype=np.uint8).reshape(-1, 2 * SEQ + 1)
    clean = rule.rule_scores(tr[:, :SEQ]) > rule.rule_scores(tr[:, SEQ:2 * SEQ])
    flipped = (clean.astype(np.uint8) != tr[:, -1]).mean()
    assert abs(flipped - rule.NOISE) < 0.03


def _credit(grader, ra, rb, data):
    import importlib
    metric = importlib.import_module(grader.__name__ + ".grader")
    return float(metric.credit(np.asarray(ra, float), np.asarray(rb, float), data[:, -1]).mean())


def test_metric_on_hand_made_rewards(grader, rule, val):
    sa, sb = rule.rule_scores(val[:, :SEQ]), rule.rule_scores(val[:, SEQ:2 * SEQ])
    n = len(val)
    assert _credit(grader, sa, sb, val) == 1.0                         # the rule itself
    assert _credit(grader, -sa, -sb, val) == 0.0                       # the reversed rule
    assert _credit(grader, np.zeros(n), np.zeros(n), val) == 0.5       # constant reward: all ties
    assert _credit(grader, np.full(n, 7.0), np.full(n, 7.0), val) == 0.5
    nan = sa.astype(float).copy()
    nan[3] = math.nan
    assert _credit(grader, nan, sb, val) == 0.0                        # non-finite: scores 0
    inf = sa.astype(float).copy()
    inf[0] = math.inf
    assert _credit(grader, inf, sb, val) == 0.0


def test_degenerate_rewards_do_not_beat_the_shipped_algorithm(grader, val):
    base = _baseline_accuracy()
    a, b = val[:, :SEQ].astype(np.int64), val[:, SEQ:2 * SEQ].astype(np.int64)
    rng = np.random.default_rng(0)
    la, lb = (np.argmax(x[:, 4:] == 2, axis=1) for x in (a, b))
    cases = {
        "random": (rng.normal(size=len(a)), rng.normal(size=len(b))),
        "longer is better": (la, lb),
        "shorter is better": (-la, -lb),
        "first letter": (a[:, 4], b[:, 4]),
        "sum of letters": (a.sum(1), b.sum(1)),
        "count of 'a'": ((a == 3).sum(1), (b == 3).sum(1)),
        "prompt letter repeated": ((a[:, 4:] == a[:, :1]).sum(1), (b[:, 4:] == b[:, :1]).sum(1)),
    }
    for name, (ra, rb) in cases.items():
        acc = _credit(grader, ra, rb, val)
        assert acc < base, (name, acc, base)


def test_model_level_anchors(grader, val):
    """Through the real model: the uninformative model scores exactly 0.5; NaN weights score 0."""
    import sys
    repo = str(PROJECT_ROOT / "repos_frozen" / TASK)
    sys.path.insert(0, repo)
    try:
        from model import build_model
        small = val[:512]
        m = build_model("ci")
        assert grader.evaluate(grader.uninformative(m), small) == 0.5
        acc, se = grader.evaluate_with_noise(m, small)
        assert acc == 0.5 and se == 0.0                                # every pair a tie
        m = build_model("ci")
        with torch.no_grad():
            m.head.bias.fill_(math.nan)
        assert grader.evaluate(m, small) == 0.0
    finally:
        sys.path.remove(repo)


@pytest.mark.slow
def test_ci_seed_trains_and_grades_end_to_end(compose_cfg, tmp_path):
    cfg = compose_cfg("config", [f"task={TASK}", "scale=ci", "agent=baseline"])
    run_dir = tmp_path / "run_baseline"
    pipeline.run(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded", r.get("reason")
    assert abs(r["score"] - 0.1) < 0.06, r["score_per_seed"]
    assert all(c["valid"] for c in r["checkpoints"]["per_seed"][0]["candidates"])
