"""The whole data flow at `ci` through the real configs and the real sandbox."""

import json
from pathlib import Path

import pytest

from ai4ai import pipeline
from ai4ai.core.record import connect
from ai4ai.core.result import FIELDS as REQUIRED_FIELDS
from ai4ai.core.result import validate

from .conftest import example

CI = ["task=optimizer", "scale=ci"]


def _patch_lr_at(tmp_path: Path, name: str, body: str) -> Path:
    """A patch that puts `body` at the top of optim.lr_at (built with the harness's own differ)."""
    from ai4ai import PROJECT_ROOT
    from ai4ai.repo.submission import unified_diff

    old = (PROJECT_ROOT / "repos_frozen" / "optimizer" / "optim.py").read_text()
    anchor = '    """Learning rate for optimizer step `step` (0-based) of `total_steps`."""\n'
    assert anchor in old
    new = old.replace(anchor, anchor + body)
    p = tmp_path / name
    p.write_text(unified_diff("optim.py", old, new))
    return p


def _result(run_dir: Path) -> dict:
    result = json.loads((run_dir / "result.json").read_text())
    validate(result)
    return result


def test_baseline_agent_scores_about_point_one(baseline_ci_run, tmp_path):
    cfg, run_dir, _ = baseline_ci_run  # the session's one baseline run (conftest.py)
    r = _result(run_dir)
    assert set(REQUIRED_FIELDS) <= set(r)
    assert r["status"] == "graded" and r["submission"]["files"] == []
    assert abs(r["score"] - 0.1) < 0.06, r["score_per_seed"]
    assert r["raw"]["mean"] > r["anchors"]["best"]
    # the shipped algorithm's own run costs about what the record's shipped runs cost, carried to this
    # host (a wrong sum over seeds or a missing host-speed factor would put it at 0.5x-2x and beyond)
    assert 0.6 < r["timing"]["cpu_vs_shipped"] < 1.6, r["timing"]
    cands = r["checkpoints"]["per_seed"][0]["candidates"]
    assert len(cands) == 3 and all(c["valid"] for c in cands)
    for f in ("agent.log", "submission.patch", "submission.json", "grade/seed_0/train.log"):
        assert (run_dir / f).exists(), f
    with connect(Path(cfg.results_db)) as con:
        rows = con.execute("SELECT task, status, score FROM results").fetchall()
    assert rows == [("optimizer", "graded", pytest.approx(r["score"]))]
    # the same cell is skipped on rerun
    assert pipeline.run(cfg, tmp_path / "run_again") is None
    assert not (tmp_path / "run_again" / "result.json").exists()


def test_the_report_tests_fake_result_has_a_real_results_fields(baseline_ci_run):
    """tests/fixtures/results.py's `fake_result` feeds every report test: each of its sections holds
    only fields a real run's result.json has (and every top-level one), so a report test cannot pass
    on a field the harness never writes."""
    from tests.fixtures.results import fake_result

    _, run_dir, _ = baseline_ci_run
    real, fake = _result(run_dir), fake_result()
    assert set(fake) == set(real)
    for section, value in fake.items():
        if isinstance(value, dict) and section != "agent_config":
            assert set(value) <= set(real[section]), (section, set(value) - set(real[section]))
    for status in ("invalid", "error"):
        validate(fake_result(status=status))


def test_command_agent_edits_in_the_sandbox_and_protected_edits_are_dropped(command_ci_run):
    """The session's command agent run (conftest.py's EDIT_AND_PROXY, shared with test_view): its
    edits of optim.py, made in the sandbox, are submitted; its edit of the protected model.py is not."""
    run_dir, _ = command_ci_run
    r = _result(run_dir)
    assert r["submission"]["files"] == ["optim.py"]
    assert {x["path"]: x["reason"] for x in r["submission"]["rejected_files"]} == {"model.py": "protected file"}
    assert "LR = 4e-3" in (run_dir / "submission.patch").read_text()
    assert r["status"] == "graded"


def test_crash_in_training_is_invalid_with_its_reason(compose_cfg, tmp_path):
    patch = _patch_lr_at(tmp_path, "crash.patch", "    raise RuntimeError('deliberate crash')\n")
    cfg = compose_cfg("grade", CI + [f"patch={patch}"])
    run_dir = tmp_path / "grade_crash"
    pipeline.grade(cfg, run_dir)
    r = _result(run_dir)
    assert r["status"] == "invalid" and r["score"] == 0.0
    assert "deliberate crash" in r["reason"]
    assert (run_dir / "grade" / "seed_0" / "train.log").exists()
    with connect(Path(cfg.results_db)) as con:
        assert con.execute("SELECT status FROM results").fetchall() == [("invalid",)]


def test_dry_run_prints_the_plan_and_exits(compose_cfg, tmp_path, capsys):
    cfg = compose_cfg("config", CI + ["agent=baseline", "dry_run=true"])
    assert pipeline.run(cfg, tmp_path / "dry") is None
    out = capsys.readouterr().out
    assert "anchors" in out and "train cap" in out and "window" in out
    assert not (tmp_path / "dry").exists()


def test_harness_error_is_retried_and_resumes_at_grading(compose_cfg, tmp_path, monkeypatch):
    """An `error` (the harness's fault) is not scored; the rerun grades the same submission, no new agent
    phase. The submission is an example patch (Muon), which then scores above 0.1."""
    import ai4ai.grading.seeds as grade_mod

    real = grade_mod.run_worker

    def broken(*a, **k):
        raise RuntimeError("evaluation worker lost")

    monkeypatch.setattr(grade_mod, "run_worker", broken)
    cfg = compose_cfg("config", CI + ["agent=patch", f"agent.patch={example('muon.patch')}"])
    first = tmp_path / "first"
    pipeline.run(cfg, first)
    r = _result(first)
    assert r["status"] == "error" and r["score"] is None and "evaluation worker lost" in r["reason"]
    monkeypatch.setattr(grade_mod, "run_worker", real)
    second = tmp_path / "second"
    pipeline.run(cfg, second)
    assert not second.exists()  # resumed in the first run dir
    r = _result(first)
    assert r["status"] == "graded"
    assert sorted(r["submission"]["files"]) == ["algorithm/muon.py", "optim.py", "train.py"]
    assert r["score"] > 0.15, r["score_per_seed"]
    with connect(Path(cfg.results_db)) as con:
        statuses = [s for (s,) in con.execute("SELECT status FROM results ORDER BY id")]
    assert statuses == ["error", "graded"]
    assert pipeline.run(cfg, tmp_path / "third") is None  # now done: skipped
