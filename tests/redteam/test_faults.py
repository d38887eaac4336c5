"""Faults and bad input: a training crash, kill -9 of the harness during a sweep's grading, error cells
retried, and bad requests refused with a clear message before any work starts."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.grading.seeds import grade_seeds
from ai4ai.repo.submission import from_patch

from .conftest import CI, grade_setup, needs_bwrap, train_py_patch, write_patch

CRASH = "raise RuntimeError('deliberate crash')\n"


@needs_bwrap
def test_training_crash_is_invalid_with_its_reason(tmp_path, task, pristine):
    """Fault: training that crashes. Gains nothing: the seed is `invalid` (the submission's fault, score 0)
    with the crash in its reason, never `error` (which would be retried) and never scored."""
    sub = from_patch(task, pristine, train_py_patch(task, "order = torch.Generator", CRASH))
    [r] = grade_seeds(grade_setup(tmp_path, task), sub, [0], tmp_path / "grade")
    assert r.status == "invalid" and "deliberate crash" in r.reason and r.raw is None


def _rows(db: Path):
    with sqlite3.connect(db) as con:
        return con.execute("SELECT agent, status, run_dir FROM results ORDER BY id").fetchall()


@pytest.mark.slow
@needs_bwrap
def test_kill_9_during_a_sweep_loses_nothing(tmp_path, task):
    """Fault: kill -9 of the harness while a sweep grades its second cell (cell 1 crashes at once and is
    recorded invalid; cell 2 trains the warmup-cosine example).
    Gains nothing / loses nothing: the killed harness leaves no process behind, the rerun of the same sweep
    skips the finished cell (its row is not duplicated) and resumes the interrupted one at grading, in its
    own run folder, without a new agent phase."""
    crash = write_patch(tmp_path, train_py_patch(task, "order = torch.Generator", CRASH), "a_crash.patch")
    warm = PROJECT_ROOT / "examples" / "optimizer" / "warmup_cosine.patch"
    out = tmp_path / "outputs"
    argv = [
        sys.executable,
        "-m",
        "ai4ai.run",
        "-m",
        "task=optimizer",
        "scale=ci",
        "agent=patch",
        "sandbox=bwrap",
        f"agent.patch={crash},{warm}",
        f"outputs={out}",
        "progress=false",
    ]
    log = open(tmp_path / "sweep1.log", "wb")
    proc = subprocess.Popen(argv, cwd=PROJECT_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 240
    target = None
    while time.time() < deadline and proc.poll() is None:
        logs = [p for p in out.rglob("train.log") if "warmup" in str(p) or "_1_" in str(p.parts) or "/1_" in str(p)]
        hits = [p for p in logs if "step" in p.read_text(errors="replace")]
        if hits:
            target = hits[0]
            break
        time.sleep(0.5)
    assert target is not None, (tmp_path / "sweep1.log").read_text()[-3000:]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    time.sleep(1)
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(out) in " ".join(p.info["cmdline"] or [])]
    db = out / "results.sqlite"
    assert [s for _, s, _ in _rows(db)] == ["invalid"]
    cell2 = target.parents[2]
    assert not (cell2 / "result.json").exists()
    r = subprocess.run(argv, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=400)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "skipping: this cell is done" in r.stdout and "resuming at grading" in r.stdout
    rows = _rows(db)
    assert [s for _, s, _ in rows] == ["invalid", "graded"]
    assert Path(rows[1][2]) == cell2 and json.loads((cell2 / "result.json").read_text())["status"] == "graded"


def test_error_cells_are_retried(compose_cfg, tmp_path, task, monkeypatch):
    """Fault: a harness error (here, the training phase failing before it starts) records `error`, which is
    never cached as done: the rerun grades the same cell again (resuming at grading).
    (Found open: an error raised before the seed folder existed crashed the harness while recording it.)"""
    import ai4ai.grading.seeds as grade_mod

    crash = write_patch(tmp_path, train_py_patch(task, "order = torch.Generator", CRASH))

    def broken(*a, **k):
        raise OSError("sandbox lost")

    real = grade_mod.run_training
    monkeypatch.setattr(grade_mod, "run_training", broken)
    cfg = compose_cfg("config", CI + ["agent=patch", f"agent.patch={crash}"])
    pipeline.run(cfg, tmp_path / "first")
    assert json.loads((tmp_path / "first" / "result.json").read_text())["status"] == "error"
    monkeypatch.setattr(grade_mod, "run_training", real)
    pipeline.run(cfg, tmp_path / "second")
    assert [s for _, s, _ in _rows(Path(cfg.results_db))] == ["error", "invalid"]


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["task=nope", "agent=baseline"], "nope"),
        (["task=optimizer", "agent=nope"], "nope"),
        (["task=optimizer", "agent=baseline", "scale=nope"], "nope"),
        (["task=optimizer", "agent=patch", "agent.patch=MALFORMED"], "not a unified diff"),
        (["task=optimizer", "agent=patch", "agent.patch=/nonexistent.patch"], "no such file"),
        (["task=optimizer", "agent=claude", "agent.executable=/nonexistent/claude"], "claude"),
    ],
)
def test_bad_input_is_refused_before_any_work(compose_cfg, tmp_path, overrides, message, monkeypatch):
    """Bad input: unknown task, agent or scale; a malformed or missing patch file; a missing agent CLI.
    Gains nothing: a clear error naming the problem, and no run folder or database is created.
    (Found open: a malformed patch file crashed the patch agent mid-run; it is now refused up front.)"""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    bad = tmp_path / "bad.patch"
    bad.write_text("--- a/train.py\nno plus line here\n")
    overrides = [o.replace("MALFORMED", str(bad)) for o in overrides]
    run_dir = tmp_path / "run"
    with pytest.raises(BaseException) as e:
        pipeline.run(compose_cfg("config", overrides), run_dir)
    assert message in str(e.value) or isinstance(e.value, SystemExit)
    assert not run_dir.exists() and not (tmp_path / "results.sqlite").exists()
