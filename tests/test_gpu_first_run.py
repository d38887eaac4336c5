"""benchmarks/gpu_first_run.sh, the one prepared script a lent GPU runs, end to end on the CPU in its
shrunk mode (SHRUNK=1: AI4AI_SHRINK=cpu, the Triton interpreter): every step it takes on a GPU, at
CPU sizes, so that a lend finds nothing to debug. Slow (about 2-3 minutes on 2 cores)."""

import json
import os
import subprocess

import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.core.task import load_task

pytestmark = pytest.mark.slow

SCRIPT = PROJECT_ROOT / "benchmarks" / "gpu_first_run.sh"


def _status() -> str:
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"], cwd=PROJECT_ROOT, capture_output=True, text=True
    ).stdout


def test_the_device_script_runs_every_step_in_its_shrunk_mode(tmp_path):
    before = _status()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AI4AI_", "TRITON_"))}
    env.update(SHRUNK="1", OUT=str(tmp_path), BUDGET_S="1500")
    r = subprocess.run(["bash", str(SCRIPT)], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=1800)
    summary = (tmp_path / "summary.txt").read_text()
    assert r.returncode == 0, summary + r.stdout[-3000:] + r.stderr[-2000:]
    lines = dict(ln.split(": ", 1) for ln in summary.splitlines() if ln.startswith("== "))
    for step in ("step_times", "quick_prepare", "quick_calibration", "quick_grade", "kernel_tests"):
        assert lines[f"== {step}"].startswith("ok "), summary
    for step in ("gpu_sandbox", "gpu_marked_tests"):  # the GPU-only steps say why they did not run
        assert lines[f"== {step}"] == "skipped (no GPU in shrunk mode)", summary
    assert "mode      shrunk, on the CPU" in (tmp_path / "environment.txt").read_text()

    # the step table: each LM task's model at both GPU tiers, with its FLOP/s
    steps = json.loads((tmp_path / "full_step_time.json").read_text())
    assert steps["shrunk"] is True
    tiers = {(row["task"], row["scale"]) for row in steps["rows"]}
    assert {("optimizer", "quick"), ("optimizer", "full"), ("dpo", "quick")} <= tiers
    assert all(row["model_tflops_per_s"] > 0 for row in steps["rows"])

    # one task at quick, end to end: calibrated (its records kept) and the shipped algorithm graded at 0.1
    res = json.loads((tmp_path / "quick" / "result.json").read_text())
    assert res["task"] == "pruning" and res["scale"] == "quick" and res["status"] == "graded", res.get("reason")
    assert res["score"] == pytest.approx(0.1, abs=1e-6)
    assert len(res["checkpoints"]["per_seed"]) == len(load_task("pruning").scale("quick").grader_seeds)
    anchors = next((tmp_path / "quick" / "records").rglob("anchors.yaml")).read_text()
    assert "scale: quick" in anchors
    # the throwaway copy is gone, and the checkout is as it was
    assert not (tmp_path / "tree").exists()
    assert _status() == before
