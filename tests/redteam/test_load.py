"""Route: the number moving with the machine's load. At the metered scales compute is capped in CPU
time of the training tree (which load does not change); the wall clock is only a liveness net, and
a seed it cuts is an `error` (retried) when load starved it, `invalid` when the tree chose not to
run. Tried with real processes on the real training sandbox, with the host saturated on purpose."""

import subprocess
import sys
from dataclasses import replace

import pytest

from ai4ai.grading.devices import EnvironmentFault
from ai4ai.grading.seeds import grade_seeds
from ai4ai.grading.training import build_training_copy, run_training
from ai4ai.repo.submission import from_patch

from .conftest import grade_setup, needs_bwrap, run_py, train_py_patch, training_sandbox

BURN = "import time as _t\n_t0 = _t.process_time()\nwhile _t.process_time() - _t0 < {s}:\n    pass\n"


@pytest.fixture
def saturated_host():
    """Busy processes outside any sandbox: a 2-core host with no idle capacity. Each in a session of
    its own: the kernel's autogroup shares CPU between sessions first, and the training sandbox
    runs in a new session, so spinners sharing one session would leave it a whole core."""
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True) for _ in range(6)]
    yield
    for p in spin:
        p.kill()
        p.wait()


def _train(tmp_path, task, pristine, code, wall_s, cpu_s, after="order = torch.Generator"):
    sub = from_patch(task, pristine, train_py_patch(task, after, code))
    repo = build_training_copy(task, sub, tmp_path / "train_repo")
    setup = replace(grade_setup(tmp_path, task, wall_s), cpu_cap_s=cpu_s)
    return run_training(setup, repo, 0, tmp_path / "seed_0", [], {}, "probe")


@needs_bwrap
def test_cpu_cap_counts_the_whole_tree_and_binds_before_the_wall(tmp_path, task):
    """Compute outside the budget: a root that does nothing while forked workers burn CPU. Gains
    nothing: the tree's CPU time (children included) reaches the cap and ends it, long before the
    wall clock would have."""
    sb, _, _ = training_sandbox(tmp_path, task)
    script = (
        "import multiprocessing as mp, time\n"
        "def burn():\n    while True: pass\n"
        "ps = [mp.Process(target=burn) for _ in range(2)]\n[p.start() for p in ps]\n"
        "print('workers up', flush=True)\ntime.sleep(600)\n"
    )
    log = tmp_path / "log.txt"
    out = sb.run([sys.executable, "-c", script], "/repo", 120, log, grace_s=1.0, cpu_limit_s=4.0)
    assert out.cut == "cpu" and out.timed_out, out
    assert 4.0 <= out.cpu_s < 4.0 + 2 * (1.0 + 1.0), out  # the cap plus at most the grace on 2 cores
    assert out.wall_s < 60, out


@needs_bwrap
def test_starved_training_is_an_error_not_a_lower_score(tmp_path, task, pristine, saturated_host):
    """Load: a training that needs more CPU than a saturated host gives it within the liveness net.
    Gains nothing and loses nothing: not graded on what it managed to write, but an `error` that
    says the machine was loaded (retried on rerun). (One training, through the grader: the
    `EnvironmentFault` that training raises is what grade_seeds turns into this `error`.)"""
    sub = from_patch(task, pristine, train_py_patch(task, "order = torch.Generator", BURN.format(s=120)))
    setup = replace(grade_setup(tmp_path, task, 30), cpu_cap_s=500)
    [r] = grade_seeds(setup, sub, [0], tmp_path / "grade")
    assert r.status == "error" and "too loaded" in r.reason and r.raw is None, r


@needs_bwrap
def test_sleeping_past_the_liveness_net_is_invalid(tmp_path, task, pristine):
    """Escaping a bad score through `error`: a training that sleeps until the liveness net cuts it.
    Gains nothing: it was not waiting for a CPU, so the seed is `invalid`, never retried."""
    # before train.py's imports: on a loaded host the imports alone can take the net, starved, and
    # the probe would test the starved branch instead of sleeping. Placed there, a 15 s net suffices.
    outcome, _, reason = _train(
        tmp_path, task, pristine, "import time as _t\n_t.sleep(300)\n", wall_s=15, cpu_s=500, after="import argparse"
    )
    assert outcome.cut == "wall" and reason and reason.startswith("idle past the liveness net"), (outcome, reason)


@needs_bwrap
def test_busy_unstarved_run_at_a_narrow_net_keeps_what_it_wrote(tmp_path, task, pristine):
    """A net set narrower than the CPU cap allows: a busy, unstarved run meets it first. Not idle and
    not the machine's fault: the wall clock was its budget, and its checkpoints count."""
    code = "from checkpoint import save_checkpoint as _save\n_save(model, args.out, 1)\n" + BURN.format(s=600)
    try:
        outcome, ckpts, reason = _train(tmp_path, task, pristine, code, wall_s=30, cpu_s=5000)
    except EnvironmentFault:
        pytest.skip("the host starved this run (the other branch, tested above)")
    assert outcome.cut == "wall" and reason is None and ckpts, (outcome, reason)


@needs_bwrap
def test_lowering_its_own_priority_on_a_loaded_host_is_invalid(tmp_path, task, pristine, saturated_host):
    """The same escape on a loaded host: nice 19, so that load starves it and the cut looks like the
    machine's fault. Gains nothing: a tree that lowered its own priority owns its waiting."""
    # at the top of train.py, before its imports: under this load the imports alone can outlast the
    # net, and a probe that never reached its nice() would test nothing
    code = "import os as _os\n_os.nice(19)\n" + BURN.format(s=60)
    outcome, _, reason = _train(tmp_path, task, pristine, code, wall_s=15, cpu_s=500, after="import argparse")
    assert outcome.lowered_priority and reason and "lowered its own scheduling priority" in reason, (outcome, reason)


@needs_bwrap
def test_training_past_its_cpu_cap_keeps_what_it_wrote(tmp_path, task, pristine):
    """The CPU cap is the budget, like the wall clock at full: a run that keeps computing after its
    last checkpoint is ended at the cap and its checkpoints count (graded, cut recorded)."""
    code = "from checkpoint import save_checkpoint as _save\n_save(model, args.out, 1)\n" + BURN.format(s=600)
    outcome, ckpts, reason = _train(tmp_path, task, pristine, code, wall_s=300, cpu_s=15)
    assert outcome.cut == "cpu" and reason is None and [c.name for c in ckpts] == ["ckpt_00000001.safetensors"]
    sb, _, _ = training_sandbox(tmp_path / "env", task)
    _, log = run_py(sb, tmp_path, "import os; print(os.environ.get('OMP_WAIT_POLICY'))", "/repo")
    assert log.strip() == "PASSIVE"


# Pins the tree to one CPU and forks spinners beside the training on it: the training's threads
# wait for a CPU, but for CPUs its own processes hold. "crowded": no pinning, more spinners than cores.
PINNED = (
    "import os as _os\n"
    "_os.sched_setaffinity(0, {sorted(_os.sched_getaffinity(0))[0]})\n"
    "for _ in range(3):\n"
    "    if _os.fork() == 0:\n"
    "        while True:\n"
    "            pass\n"
)
CROWDED = "import os as _os\nfor _ in range(8):\n    if _os.fork() == 0:\n        while True:\n            pass\n"


@needs_bwrap
@pytest.mark.parametrize("code", [PINNED, CROWDED], ids=["pinned", "crowded"])
def test_contention_a_training_makes_itself_is_not_the_machines_fault(tmp_path, task, pristine, code):
    """Escaping a bad score through `error` (issue 39, part 3): a training that pins itself to one core
    and forks spinners beside it (or more spinners than cores) until the liveness net cuts it, under
    its CPU cap, its threads waiting for a CPU. Found open: an `error` ("the machine was too loaded"),
    unscored and retried. Gains nothing: waiting is no evidence by itself; a narrowed affinity is the
    tree's own doing, and so is waiting while the rest of the host left it its CPUs (host busy time less
    the run's cgroup's). The seed is `invalid`."""
    import os

    if (os.cpu_count() or 1) < 2:
        pytest.skip("one CPU: no affinity to narrow")
    try:
        outcome, _, reason = _train(tmp_path, task, pristine, code, wall_s=15, cpu_s=500, after="import argparse")
    except EnvironmentFault as e:
        if code is CROWDED:  # unpinned, it shares the host: raised only where others kept the CPUs busy
            pytest.skip(f"other processes loaded this host; the verdict is right, the probe is moot: {e}")
        pytest.fail(f"self-made contention recorded as the environment's fault: {e}")
    print(outcome, reason)
    assert outcome.cut == "wall" and reason, (outcome, reason)
    assert "affinity" in reason or "its own processes" in reason or "idle past" in reason, reason
