"""benchmarks/full_step_time.py: runs each repo's own model at the GPU tiers through training steps and
writes what it measured beside the task's declared estimate, with its share of the device's peak (run on
one H200 on 2026-12-04; here on the CPU)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ai4ai.core.task import load_task

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "full_step_time.py"


def test_measures_the_real_models_of_both_tiers_and_their_share_of_the_gpu(tmp_path):
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
            "--peak-tflops",
            "0.5",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads((tmp_path / "full_step_time.json").read_text())
    rows = {(r["task"], r["scale"]): r for r in out["rows"]}
    assert set(rows) == {(t, s) for t in ("distillation", "sft") for s in ("quick", "full")}
    assert out["peak_tflops"] == 0.5 and out["shrunk"] is False
    for (name, scale), r in rows.items():
        b = load_task(name).scale(scale)
        assert r["params"] == b.n_params  # the repo's own model at that tier, not a stand-in
        assert r["estimate_step_ms"] == b.estimate.step_ms
        assert 0 < r["step_ms_min"] <= r["step_ms_median"] <= r["step_ms_p90"]
        # model FLOPs: 6 x params x the batch's tokens (no reference here), over the median step
        assert r["model_flops_per_step"] == 6 * r["params"] * r["rows"] * r["seq_len"]
        tflops = r["model_flops_per_step"] / (r["step_ms_median"] / 1000) / 1e12
        assert r["model_tflops_per_s"] == pytest.approx(tflops) and r["gpu_share"] == pytest.approx(tflops / 0.5)
    assert rows["sft", "quick"]["rows"] == 4 and rows["sft", "quick"]["seq_len"] == 64


def test_the_reference_forward_counts_and_a_device_name_gives_its_peak():
    import importlib.util

    spec = importlib.util.spec_from_file_location("full_step_time", SCRIPT)
    fst = importlib.util.module_from_spec(spec)
    saved = list(sys.path)
    try:
        spec.loader.exec_module(fst)
    finally:
        sys.path[:] = saved  # the script edits sys.path as it loads
    assert fst.model_flops(10, 4, 8, 0) == 6 * 10 * 4 * 8
    assert fst.model_flops(10, 4, 8, 4) == 6 * 10 * 4 * 8 + 2 * 10 * 4 * 8  # dpo's frozen reference
    assert fst.peak_tflops("NVIDIA H200", None) == 989.0 and fst.peak_tflops("NVIDIA H100 80GB HBM3", None) == 989.0
    assert fst.peak_tflops("some other card", None) is None and fst.peak_tflops("NVIDIA H200", 500.0) == 500.0


def test_a_task_it_cannot_measure_is_refused_by_name(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--tasks", "agentic_rl", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "agentic_rl" in proc.stderr and "optimizer" in proc.stderr
