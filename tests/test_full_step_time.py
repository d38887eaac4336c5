"""benchmarks/full_step_time.py: runs each repo's own `full` model through training steps and writes
what it measured beside the task's declared estimate (run on one H200 on 2026-12-04; here on the CPU)."""

import json
import subprocess
import sys
from pathlib import Path

from ai4ai.core.task import load_task

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "full_step_time.py"


def test_measures_the_real_full_models_and_names_the_estimate(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--steps",
            "2",
            "--warmup",
            "1",
            "--tasks",
            "distillation,sft",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {r["task"]: r for r in json.loads((tmp_path / "full_step_time.json").read_text())["rows"]}
    assert set(rows) == {"distillation", "sft"}
    for name, r in rows.items():
        b = load_task(name).scale("full")
        assert r["params"] == b.n_params  # the repo's own full model, not a stand-in
        assert r["estimate_step_ms"] == b.estimate.step_ms
        assert 0 < r["step_ms_min"] <= r["step_ms_median"] <= r["step_ms_p90"]
    assert rows["sft"]["rows"] == 4 and rows["sft"]["seq_len"] == 64


def test_a_task_it_cannot_measure_is_refused_by_name(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--tasks", "agentic_rl", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "agentic_rl" in proc.stderr and "optimizer" in proc.stderr
