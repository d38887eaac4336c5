"""Every code path of the GPU tiers (`quick`, `full`) on the CPU, for every task, with sizes shrunk by
AI4AI_SHRINK=cpu.

Per task, in a copy of the project (so the shrunk prepared models, anchors and caches never touch
the real tree), through the real commands' functions:
  prepare      ai4ai.repo.preparing: the grader's prepare function into the cache (checksummed), the repo's
               own prepare step for the prepared models; a second prepare reuses both
  plan         ai4ai.grading.plan: the dry-run lines see the cache and the artifacts
  calibrate    triggered by the grading: the shipped algorithm on the 5 calibration seeds, at the tier
  grade        a submission that keeps running after its last checkpoint, so the wall-clock cap
               (cap_factor x the calibrated shipped time) is what ends it, as at full on a GPU; its
               checkpoints are selected among and evaluated by the hidden grader
The harness passes AI4AI_SHRINK into every training sandbox (training.training_sandbox) and keys
the data cache by it (preparing.data_mounts), so proxy and grading runs agree on the sizes.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.core.task import GPU_SCALES, list_tasks

# Slow: the hidden splits are not shrunk, so each evaluation costs what it costs at smoke. Seen here
# (2 cores, load average ~12): optimizer's 5 calibration seeds took 15 s of training and ~3 min of
# evaluation each, ~18 min to the graded seed; run it with -m slow on an idle machine.
pytestmark = pytest.mark.slow

COPIED = ("ai4ai", "conf", "repos_frozen", "grader_hidden", "ai4ai_kernels", "pyproject.toml")

DRIVER = r"""
import json, sys
from pathlib import Path
from hydra import compose, initialize_config_dir
from ai4ai import CONF_DIR, pipeline
from ai4ai.repo import preparing as p
from ai4ai.grading.context import task_from_cfg
from ai4ai.grading.plan import plan_lines
from ai4ai.repo.submission import unified_diff

name, tier, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
over = [f"task={name}", f"scale={tier}", "device=cpu", "progress=false", f"outputs={out}"]
with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
    pcfg = compose(config_name="prepare", overrides=over)
    # the wall clock binds: cap = cap_factor x the calibrated shipped time; cap_min_s out of the way
    gcfg = compose(config_name="grade", overrides=over + ["seeds=[0]", f"task.scales.{tier}.cap_min_s=1",
                                                          f"task.scales.{tier}.cap_factor=3", f"patch={out}/sleep.patch"])
task, _ = task_from_cfg(pcfg)
first = p.prepare(task, tier, "cpu", progress=False)
again = p.prepare(task, tier, "cpu", progress=False)
lines = plan_lines(task, tier, device="cpu")
train = (task.repo / "train.py").read_text()
# after its last checkpoint the submission keeps the process alive: only the wall-clock cap ends it
(out / "sleep.patch").write_text(unified_diff("train.py", train, train + "\nimport time\ntime.sleep(3600)\n"))
result = pipeline.grade(gcfg, out / "grade")
print("RESULT " + json.dumps({"prepare": {k: str(v) for k, v in first.items()}, "again": str(again),
                              "plan": lines, "result": result}, default=str))
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    for name in COPIED:
        src = PROJECT_ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "anchors.lock"))
        else:
            shutil.copy2(src, root / name)
    (root / ".shim").mkdir()
    (root / ".shim" / "ai4ai_kernels").symlink_to("../kernels")
    return root


@pytest.mark.parametrize("tier", GPU_SCALES)
@pytest.mark.parametrize("name", list_tasks())
def test_gpu_tier_code_paths_run_on_the_cpu(project, name, tier, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AI4AI_"))}
    env.update(
        PYTHONPATH=f"{project}:{project / '.shim'}",
        AI4AI_SHRINK="cpu",
        AI4AI_OUTPUTS=str(tmp_path),
        PYTHONDONTWRITEBYTECODE="1",
        OMP_NUM_THREADS="1",
    )
    r = subprocess.run(
        [sys.executable, "-c", DRIVER, name, tier, str(tmp_path)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    tail = (r.stdout + r.stderr)[-4000:]
    assert r.returncode == 0, tail
    out = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    from ai4ai.core.task import load_task

    task = load_task(name)

    # prepare: the cache holds what the task declares, the artifacts check out, a rerun reuses them
    if task.prepare and task.data_env:
        data = Path(out["prepare"]["data"])
        assert data.parent.name == tier and data.name.endswith("-shrunk-cpu")
        sums = (data / "SHA256SUMS").read_text()
        for f in (w.format(scale=tier) for w in task.prepare_writes):
            assert f in sums
        assert "cached" in r.stdout and (data / ".complete").exists()
    if task.artifacts is not None:
        assert set(json.loads(out["prepare"]["artifacts"].replace("'", '"')).values()) == {"ok"}
        for rel in task.artifacts.files(tier):
            assert (project / "repos_frozen" / name / rel).exists()
        assert "checksums match" in r.stdout
    if task.grading_artifacts:  # prepare made the graded instance's prepared models too
        graded = Path(out["prepare"]["graded"])
        assert (graded / ".complete").exists() and set(w.format(scale=tier) for w in task.grading_artifacts) <= set(
            ln.split()[1] for ln in (graded / "SHA256SUMS").read_text().splitlines()
        )
        assert "graded instance's prepared models: cached" in r.stdout  # the grading reused them
    plan = "\n".join(out["plan"])
    assert "run first" not in plan, plan

    # calibration at the tier happened first, then the graded run, cut by the wall clock
    res = out["result"]
    assert res["scale"] == tier and res["status"] == "graded", (res["status"], res.get("reason"), tail)
    assert "calibrating" in r.stdout
    (seed,) = res["checkpoints"]["per_seed"]
    assert seed["timed_out"], seed  # the cap ended it; what it wrote was graded
    assert seed["chosen"] in [c["name"] for c in seed["candidates"]] and len(seed["candidates"]) <= 3
    assert res["timing"]["train_s"] >= 0.9 * res["timing"]["cap_s"] > 0, res["timing"]
    assert res["score"] is not None and 0.0 <= res["score"] <= 1.0
    # the calibration went to this machine's own store, the committed records untouched
    anchors = (project / "outputs" / "records" / "grader_hidden" / name / "anchors.yaml").read_text()
    assert f"scale: {tier}" in anchors
    assert f"scale: {tier}" not in (project / "grader_hidden" / name / "anchors.yaml").read_text()
