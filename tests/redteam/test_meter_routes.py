"""Routes 1-3, 5 and 6 of the budget: data, teacher, environment and scorer served from outside.

Before the meter, every budgeted resource was counted inside the training process, next to the
files it came from: a submission read `data/train_*.u8` directly (optimizer at smoke: 5,784 steps
of data where the budget buys 512, sigma 0.80), generated levels itself with the visible
generator (agentic_rl, 0.88), asked the teacher's weights directly (distillation, 0.39), or
fine-tuned on the repo's own digits (diffusion_rl, 0.33). Now the training copy holds none of
those files, and the classes that count live in the meter's process; what the sandbox can reach
is the socket, which serves only the declared methods, with the run's own scale and seed.
"""

import json

import pytest

from ai4ai import pipeline
from ai4ai.core.task import load_task
from ai4ai.grading.training import build_training_copy
from ai4ai.grading.training import training_sandbox as make_sandbox
from ai4ai.repo.meter import held_files, read_report, serving
from ai4ai.repo.submission import Submission, unified_diff

from .conftest import CI, grade_setup, needs_bwrap, run_py, write_patch

METERED = [
    t
    for t in (
        "optimizer",
        "sft",
        "dpo",
        "reward_model",
        "pruning",
        "graph_diffusion",
        "distillation",
        "agentic_rl",
        "diffusion_rl",
        "unlearning",
    )
    if load_task(t).meter is not None
]

# From inside the training sandbox: every file anywhere that has a held file's name, and what the
# served objects answer to what they do not serve.
LOOK = r"""
import fnmatch, json, os, sys
held = json.loads(sys.argv[1])
found = []
for top in ("/repo", "/out", "/home", "/tmp", "/opt", "/run", "/data", "/var", "/srv", "/mnt"):
    for root, dirs, files in os.walk(top):
        for f in files:
            if any(fnmatch.fnmatch(f, g.rsplit("/", 1)[-1]) for g in held):
                found.append(os.path.join(root, f))
print("FOUND " + json.dumps(found))
"""


def _in_sandbox(tmp_path, task, script, *args):
    sub = Submission(files={}, rejected={}, patch="", lines_added=0, lines_removed=0)
    repo = build_training_copy(task, sub, tmp_path / "train_repo")
    ctx = grade_setup(tmp_path, task)
    with serving(task, "ci", 5, "cpu", tmp_path / "meter.log", tmp_path / "meter.json", threads=2) as served:
        sb = make_sandbox(ctx, repo, tmp_path / "seed", [], {}, served)
        code = f"import sys; sys.argv[1:] = {list(args)!r}\n" + script
        out, log = run_py(sb, tmp_path, code, "/repo", timeout=240)
    return repo, out, log, read_report(tmp_path / "meter.json")


@pytest.mark.parametrize("name", METERED)
def test_the_training_copy_holds_no_budgeted_file(tmp_path, name):
    task = load_task(name)
    held = held_files(task, task.repo)
    assert held, f"{name}: its meter holds nothing"
    sub = Submission(files={}, rejected={}, patch="", lines_added=0, lines_removed=0)
    repo = build_training_copy(task, sub, tmp_path / "copy")
    assert held_files(task, repo) == []


@needs_bwrap
@pytest.mark.parametrize("name", METERED)
def test_no_budgeted_file_is_found_from_inside(tmp_path, name):
    task = load_task(name)
    _, out, log, _ = _in_sandbox(tmp_path, task, LOOK, json.dumps(list(task.meter.held)))
    line = next(ln for ln in log.splitlines() if ln.startswith("FOUND "))
    assert json.loads(line[6:]) == [], log[-2000:]


# What a submission tries on the served objects themselves, per task: (setup, attempts); each
# attempt must raise, and the served budget must be the run's own.
ATTEMPTS = {
    "optimizer": (
        "from data import TrainingSplit\ns = TrainingSplit('ci')",
        [
            "s.sequences",
            "TrainingSplit('smoke')",
            "TrainingSplit('full')",
            "s.served = 0",
            "s.get(torch.arange(s.budget + 1))",
            "__import__('data').load_sequences('train_ci')",
        ],
    ),
    "distillation": (
        "from teacher import Teacher\nt = Teacher('ci')",
        ["t._model", "Teacher('smoke')", "__import__('teacher').load_teacher_weights('ci')"],
    ),
    "agentic_rl": (
        "from env import TrainingEnv\ne = TrainingEnv('ci', 5)\ne.sample_levels(4)",
        [
            "e._rng",
            "TrainingEnv('ci', 6)",
            "__import__('env').generate_levels(10, 0, 'ci')",
            "e.charge(-10**9)",
            "e._prepaid",
            # levels for free, to solve elsewhere: each sampled level prepays a whole episode
            "e.sample_levels(e.budget // e.scale.max_steps)",
        ],
    ),
    "unlearning": (
        "from data import UnlearningData\nd = UnlearningData('ci')",
        [
            "d.forget",
            "d.retain",
            "UnlearningData('smoke')",
            "__import__('data').load_array('forget')",
            "d.get_forget(torch.arange(d.budget + 1))",
        ],
    ),
    "diffusion_rl": (
        "from env import Judge\nj = Judge('ci')",
        [
            "j._scorer",
            "Judge('smoke')",
            "__import__('reward').load_scorer()",
            "j.rewards(torch.zeros(j.budget + 1, 64), torch.zeros(j.budget + 1, dtype=torch.long))",
        ],
    ),
}

TRY = r"""
import os, sys, torch
sys.path.insert(0, "/repo")
exec(sys.argv[1])
results = {}
for a in sys.argv[2:]:
    try:
        eval(a) if "=" not in a.replace("==", "") else exec(a)
        results[a] = "allowed"
    except Exception as e:
        results[a] = type(e).__name__ + ": " + str(e)[:200]
# and with the variable gone, the repo's own class has no file to read
os.environ.pop("AI4AI_METER")
for m in [m for m in list(sys.modules) if m in ("data", "teacher", "env", "levels", "reward")]:
    del sys.modules[m]
try:
    exec(sys.argv[1])
    results["unset"] = "allowed"
except Exception as e:
    results["unset"] = type(e).__name__
import json
print("TRIED " + json.dumps(results))
"""


@needs_bwrap
@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_the_served_objects_give_nothing_beyond_their_api(tmp_path, name):
    task = load_task(name)
    setup, attempts = ATTEMPTS[name]
    _, out, log, report = _in_sandbox(tmp_path, task, TRY, setup, *attempts)
    line = next((ln for ln in log.splitlines() if ln.startswith("TRIED ")), None)
    assert line, log[-3000:]
    tried = json.loads(line[6:])
    allowed = {k: v for k, v in tried.items() if v == "allowed"}
    assert not allowed, tried
    assert tried["unset"] != "allowed", tried
    served = {k: v for k, v in report.items() if k != "calls"}
    setup_cost = {"agentic_rl": 4 * task_scale_max_steps("ci")}.get(name, 0)
    for counts in served.values():  # nothing was handed out by the failed attempts
        assert counts.get("served", counts.get("used", 0)) == setup_cost, report


def task_scale_max_steps(scale: str) -> int:
    import sys

    sys.path.insert(0, str(load_task("agentic_rl").repo))
    try:
        import config

        return config.get_scale(scale).max_steps
    finally:
        sys.path.pop(0)
        sys.modules.pop("config", None)


ATTACK = """
# --- the attack: every sequence it can reach, trained on until the compute cap ends the run
import glob, os
import numpy as np
from config import SEQ_LEN
pool = [split.get(torch.arange(len(split)))]            # the budget, as the meter serves it
for f in sorted(glob.glob("data/train_*.u8")):            # the split files, read directly
    pool.append(torch.from_numpy(np.fromfile(f, dtype=np.uint8).reshape(-1, SEQ_LEN).astype(np.int64)))
for other in ("smoke", "full"):                           # another scale's larger split and budget
    try:
        o = TrainingSplit(other)
        pool.append(o.get(torch.arange(min(len(o), o.budget))))
    except Exception as e:
        print("ATTACK refused", other, type(e).__name__, flush=True)
data = torch.unique(torch.cat(pool), dim=0)
print(f"ATTACK pool {len(data)} sequences (budget {split.budget})", flush=True)
steps = 0
while True:                                               # until the CPU cap ends it
    perm = torch.randperm(len(data), generator=order)
    for i in range(0, len(data) - BATCH_SIZE + 1, BATCH_SIZE):
        batch = data[perm[i:i + BATCH_SIZE]].to(device)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        steps += 1
        if steps % 16 == 0:
            save_checkpoint(model, args.out, steps, metadata={"tokens_seen": steps * BATCH_SIZE * SEQ_LEN})
            print(f"ATTACK step {steps}", flush=True)
"""


@pytest.mark.slow
@needs_bwrap
def test_reading_the_split_and_training_to_the_cap_gains_only_the_served_data(compose_cfg, tmp_path):
    """Route 1, as filed: the split files read directly (and another scale's split asked for), then
    trained on until the compute cap. Before the meter, at ci, this read train_smoke.u8 as well (8x
    the budget) and scored far above the shipped algorithm. Now it gets the 2,048 served sequences
    and nothing else; what is left is more passes over the same budget within the CPU cap."""
    task = load_task("optimizer")
    old = (task.repo / "train.py").read_text()
    cut = old.index("# ----------------------------------------------------------------------------- loop")
    new = old[:cut] + ATTACK
    patch = write_patch(tmp_path, unified_diff("train.py", old, new), "route1.patch")
    cfg = compose_cfg("grade", CI + [f"patch={patch}"])
    pipeline.grade(cfg, tmp_path / "run")
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    log = (tmp_path / "run" / "grade" / "seed_0" / "train.log").read_text()
    assert "ATTACK pool 2048 sequences (budget 2048)" in log, log[-3000:]
    assert log.count("ATTACK refused") == 2
    meter = json.loads((tmp_path / "run" / "grade" / "seed_0" / "meter.json").read_text())
    assert meter["data.TrainingSplit"]["served"] == 2048
    seed = r["checkpoints"]["per_seed"][0]
    print("route 1 score", r["score"], r["raw"], seed["cut"], seed["cpu_s"], seed["steps"])
    assert r["status"] == "graded"
    # what is left is compute on the served data, and the CPU cap (1.5 x the shipped CPU time, as the
    # wall clock is at full) ends it: measured 112 steps where the shipped run takes 64, sigma 0.33
    cap = r["timing"].get("cpu_cap_s") if isinstance(r.get("timing"), dict) else None
    assert seed["cut"] == "cpu", seed
    if cap:
        assert seed["cpu_s"] <= cap * 1.1, (seed["cpu_s"], cap)
    assert r["score"] < AFTER_BOUND, r["score"]


# Measured at ci (seed 0): before the meter (commit e55960e, CPU cap 4 x), see the docstring's figure;
# with the meter and the CPU cap at 1.5 x: 0.33. Bound well under the before-figure, over the after one.
AFTER_BOUND = 0.45
