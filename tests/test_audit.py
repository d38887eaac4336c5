"""ai4ai.audit: a real `ci` run re-graded from a copy of its run directory agrees; a tampered
frozen repo, a changed patch and a changed library are reported as drift."""

import shutil
import subprocess
from pathlib import Path

import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.analysis import auditing as audit


@pytest.fixture
def ci_run(baseline_ci_run):
    """The session's real baseline run at ci (tests/conftest.py), shared with test_end_to_end."""
    _, run_dir, result = baseline_ci_run
    assert result["status"] == "graded"
    return run_dir, result


def _copy_run(run_dir: Path, dest: Path) -> Path:
    """What a run directory needs to be audited elsewhere: its record and its patch."""
    dest.mkdir(parents=True)
    for f in ("result.json", "submission.patch", "submission.json"):
        shutil.copy(run_dir / f, dest / f)
    return dest


def test_regrade_of_a_copied_run_directory_agrees(ci_run, tmp_path):
    run_dir, result = ci_run
    copy = _copy_run(run_dir, tmp_path / "elsewhere" / "run")
    rep = audit.audit_run(copy, regrade=True)
    g = rep["regrade"]
    assert g["status"] == "graded" and g["seeds"] == result["seeds"]
    assert g["tolerance"] is not None and g["tolerance"] > 0
    assert rep["agrees"] is True, (g["score"], result["score"], g["tolerance"])
    assert abs(g["difference"]) <= g["tolerance"]
    changed = audit.changed_names(rep)
    assert not {"submission", "frozen repo", "grader", "benchmark version", "hardware class"} & set(changed), rep[
        "drift"
    ]
    out = Path(rep["audit_dir"])
    assert out.parent == copy / "audits" and (out / "audit.json").is_file()
    assert (out / "grade" / f"seed_{result['seeds'][0]}" / "train.log").is_file()
    assert str(run_dir) not in (out / "audit.json").read_text()  # only the copy and the project were used
    assert "AGREES" in audit.summary(rep)


def test_tampered_frozen_repo_is_detected(ci_run, tmp_path, monkeypatch):
    run_dir, result = ci_run
    tampered = tmp_path / "repos_frozen" / "optimizer"
    shutil.copytree(PROJECT_ROOT / "repos_frozen" / "optimizer", tampered, ignore=shutil.ignore_patterns("__pycache__"))
    (tampered / "data.py").write_text((tampered / "data.py").read_text() + "\n# a quiet change\n")
    real = audit.task_config

    def with_tampered_repo(name):
        return {**real(name), "repo": str(tampered)}

    monkeypatch.setattr(audit, "task_config", with_tampered_repo)
    rep = audit.audit_run(_copy_run(run_dir, tmp_path / "copy"), regrade=False)
    changed = audit.changed_names(rep)
    assert "frozen repo" in changed and "grader" not in changed and "submission" not in changed
    d = next(x for x in rep["drift"] if x["what"] == "frozen repo")
    assert d["recorded"] == result["provenance"]["repo_sha256"] != d["current"]
    assert "frozen repo" in audit.summary(rep) and "CHANGED" in audit.summary(rep)


def test_changed_patch_and_libraries_are_drift(ci_run, tmp_path, monkeypatch):
    run_dir, _ = ci_run
    copy = _copy_run(run_dir, tmp_path / "copy")
    (copy / "submission.patch").write_text("--- a/optim.py\n+++ b/optim.py\n")
    from ai4ai.core import provenance

    real = provenance.versions
    monkeypatch.setattr(audit, "versions", lambda: {**real(), "numpy": "0.0.1"})
    rep = audit.audit_run(copy, regrade=False)
    changed = audit.changed_names(rep)
    assert "submission" in changed and "libraries" in changed
    lib = next(x for x in rep["drift"] if x["what"] == "libraries")
    assert lib["current"] == {"numpy": "0.0.1"}


def test_noise_tolerance_follows_the_anchors():
    r = {
        "anchors": {"no_info": 32.0, "baseline": 10.0, "best": 6.0, "provenance": {"phi_std": 0.01}},
        "raw": {"direction": "min", "transform": "neg_log"},
        "score": 0.3,
    }
    import math

    assert audit.seed_noise(r) == pytest.approx(0.9 * 0.01 / (math.log(10) - math.log(6)))
    r["score"] = 0.05
    assert audit.seed_noise(r) == pytest.approx(0.1 * 0.01 / (math.log(32) - math.log(10)))
    r["anchors"]["provenance"] = {}
    assert audit.seed_noise(r) is None


def test_database_audit_prints_a_table(ci_run, tmp_path):
    """results=DB without re-grading: one row per run, a missing run directory is flagged."""
    run_dir, result = ci_run
    from ai4ai.core import record

    db = tmp_path / "results.sqlite"
    copy = _copy_run(run_dir, tmp_path / "copy")
    record.insert(db, result, copy)
    record.insert(db, {**result, "seed": 1}, tmp_path / "gone")
    p = subprocess.run(
        ["python", "-m", "ai4ai.audit", f"results={db}", "regrade=false", f"outputs={tmp_path}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 1, p.stdout + p.stderr  # the missing run fails the audit
    assert "| copy | optimizer | baseline |" in p.stdout
    assert "run directory missing" in p.stdout
    rows = audit.audit_db(db, sample=1, regrade=False)
    assert len(rows) == 1
