"""benchmarks/kernel_speed.py: on a CPU it says there is no GPU, runs its sanity pass and exits 0;
its correctness check stops a wrong implementation from being timed."""

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "kernel_speed.py"


def test_runs_on_cpu_and_writes_the_tables(tmp_path):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1")  # 'ours' runs the kernels, interpreted
    env.pop("OUT", None)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(tmp_path), "--reps", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no GPU" in proc.stdout
    with open(tmp_path / "kernels.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(r["op"], r["impl"]) for r in rows} >= {
        (op, impl) for op in ("flce", "ce", "logprobs", "kl", "adamw", "newton_schulz") for impl in ("torch", "ours")
    }
    assert all(r["status"] == "ok" for r in rows), [r for r in rows if r["status"] != "ok"]
    for r in rows:
        assert float(r["step_p20_ms"]) <= float(r["step_p50_ms"]) <= float(r["step_p80_ms"])
        if r["op"] in ("flce", "ce", "logprobs", "kl"):
            assert float(r["fwd_p50_ms"]) > 0 and float(r["bwd_p50_ms"]) >= 0
    data = json.loads((tmp_path / "kernels.json").read_text())
    e = data["environment"]
    assert {"gpu", "driver", "torch", "triton", "git_commit", "cuda"} <= set(e)
    assert e["device"] == "cpu" and e["gpu"] is None and e["triton_interpret"] is True
    assert (
        Path(e["kernels_path"]).resolve() == (ROOT / "ai4ai_kernels").resolve()
    )  # this checkout's kernels, not an install's
    assert len(data["rows"]) == len(rows)


def _bench_module():
    spec = importlib.util.spec_from_file_location("kernels_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_wrong_implementation_is_reported_and_not_timed():
    bench = _bench_module()
    import ai4ai_kernels as K

    def make(n):
        return {"z": torch.randn(n, 300, requires_grad=True), "y": torch.randint(0, 300, (n,))}

    case = bench.Case(
        "ce",
        "rows=16 V=300",
        16,
        make,
        lambda i: [i["z"]],
        {
            "torch": lambda i: torch.nn.functional.cross_entropy(i["z"], i["y"]),
            "ours": lambda i: K.cross_entropy(i["z"], i["y"]),
            "off-by-label-smoothing": lambda i: K.cross_entropy(i["z"], i["y"], label_smoothing=0.1),
        },
        lambda i: torch.nn.functional.cross_entropy(i["z"].double(), i["y"]),
    )
    rows = {r.impl: r for r in bench.run_loss_case(case, "fp32", "cpu", check_rows=8, warmup=0, reps=2, tol=1e-4)}
    assert rows["torch"].status == rows["ours"].status == "ok" and rows["ours"].step_ms
    wrong = rows["off-by-label-smoothing"]
    assert wrong.status == "wrong" and wrong.check_rel_err > 1e-3 and not wrong.step_ms


def test_percentiles():
    bench = _bench_module()
    assert bench.percentiles([5.0, 1.0, 3.0, 2.0, 4.0]) == [1.8, 3.0, 4.2]
