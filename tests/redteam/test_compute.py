"""Route 6: time and compute, tried on the real training sandbox and `run_training`."""

import re
import time

import psutil

from ai4ai.grading.training import build_training_copy, run_training
from ai4ai.repo.submission import from_patch
from ai4ai.sandbox.box import default_memory_limit

from .conftest import grade_setup, needs_bwrap, run_py, train_py_patch, training_sandbox


def _train(tmp_path, task, pristine, patch_text, cap_s):
    sub = from_patch(task, pristine, patch_text)
    assert sub.files and not sub.rejected, sub.rejected
    repo = build_training_copy(task, sub, tmp_path / "train_repo")
    seed_dir = tmp_path / "seed_0"
    out = run_training(grade_setup(tmp_path, task, cap_s), repo, 0, seed_dir, [], {}, "probe")
    return (*out, seed_dir)


DAEMON = """
import os, signal, sys, time
from checkpoint import save_checkpoint as _save
_save(model, args.out, 1)                      # one honest checkpoint, then try to outlive the cap
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with torch.no_grad():
            for p_ in model.parameters():
                p_.mul_(0.5)
        for i in range(2, 100000):              # "a better checkpoint later", written until stopped
            time.sleep(0.3)
            _save(model, args.out, 90000000 + i)
    os._exit(0)
while True:
    time.sleep(1)
"""


@needs_bwrap
def test_process_outliving_the_cap_writes_nothing_later(tmp_path, task, pristine):
    """Route 6: training that ignores SIGTERM and leaves a setsid double-forked daemon writing new
    checkpoints after the cap. Gains nothing: the run ends at cap + grace, every process is gone, the
    snapshot holds only what existed when the tree was killed, and nothing is written afterwards."""
    patch = train_py_patch(task, "order = torch.Generator", DAEMON)
    t0 = time.monotonic()
    outcome, ckpts, reason, seed_dir = _train(tmp_path, task, pristine, patch, cap_s=3)
    assert outcome.timed_out and time.monotonic() - t0 < 3 + 10 + 15
    out = seed_dir / "out"
    listing = sorted(p.name for p in out.iterdir())
    time.sleep(1.5)
    assert sorted(p.name for p in out.iterdir()) == listing, "something wrote after the tree was ended"
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(seed_dir) in " ".join(p.info["cmdline"] or [])]
    snap = sorted(p.name for p in (seed_dir / "checkpoints").iterdir())
    assert all(n in listing for n in snap)


@needs_bwrap
def test_memory_blow_up_is_stopped_by_the_address_space_limit(tmp_path, task):
    """Route 6: a training run that allocates (and touches) memory without end.
    Gains nothing: the sandbox's address-space limit (RLIMIT_AS, default the larger of 80% of RAM and
    8 GiB, AI4AI_MAX_MEMORY_BYTES) stops it with MemoryError; the harness is untouched. Shown with a 1 GiB
    limit, and the default is in force in the real training sandbox.
    (Found open: no memory limit at all.)"""
    sb, _, _ = training_sandbox(tmp_path, task)
    out, log = run_py(sb, tmp_path, "print([l for l in open('/proc/self/limits') if 'address space' in l][0])", "/repo")
    assert re.search(rf"Max address space\s+{default_memory_limit()}\s", log), log
    sb.max_memory_bytes = 1 << 30
    hog = (
        "chunks = []\n"
        "try:\n"
        "    while True:\n"
        "        chunks.append(bytearray(64 << 20))\n"
        "except MemoryError:\n"
        "    print('STOPPED at', len(chunks) * 64, 'MiB', flush=True); raise\n"
    )
    out, log = run_py(sb, tmp_path, hog, "/repo")
    assert out.returncode != 0 and "STOPPED at" in log and "MemoryError" in log
    assert int(log.split("STOPPED at ")[1].split()[0]) <= 1024


@needs_bwrap
def test_fork_bomb_is_ended_at_the_process_limit(tmp_path, task):
    """Route 6: a (bounded, for the shared test machine) fork bomb in the training sandbox.
    Gains nothing: the phase is ended as soon as its tree holds more than `max_procs` processes
    (default 1024, AI4AI_MAX_PROCS; counted from the host, since RLIMIT_NPROC counts nothing for root
    and every process of the user otherwise), the outcome names the limit, and no process survives.
    (Found open: nothing bounded the number of processes.)"""
    sb, _, seed_dir = training_sandbox(tmp_path, task)
    sb.max_procs = 40
    bomb = (
        "import os, time\n"
        "for _ in range(7):\n"  # 2**7 = 128 processes at most
        "    os.fork()\n"
        "time.sleep(60)\n"
    )
    t0 = time.monotonic()
    out, log = run_py(sb, tmp_path, bomb, "/repo", timeout=60)
    assert out.limit and "40 processes" in out.limit and not out.timed_out
    assert time.monotonic() - t0 < 20
    assert not [p for p in psutil.process_iter(["cmdline"]) if "os.fork()" in " ".join(p.info["cmdline"] or [])]


@needs_bwrap
def test_thread_count_change_buys_no_data(tmp_path, task, pristine):
    """Route 6: training that raises its own thread count (torch, OpenMP, CPU affinity) to take the machine.
    Gains nothing: at ci/smoke the budget is the data the protected interface serves, so the run takes the
    same steps and draws the same sequences as the shipped algorithm (same checkpoint names, same
    tokens_seen); more threads only make it faster, or, where their spinning costs more CPU time than
    the record's CPU cap allows on this host, the run is cut by that cap (graded as invalid). At full, one grading holds the device (the lock) and
    the wall-clock cap binds, so threads are the algorithm's own compute, not another run's."""
    grab = (
        "import os\n"
        "os.environ['OMP_NUM_THREADS'] = '64'\n"
        "torch.set_num_threads(64)\n"
        "try:\n"
        "    os.sched_setaffinity(0, range(os.cpu_count()))\n"
        "except OSError:\n"
        "    pass\n"
        "print('THREADS', torch.get_num_threads(), flush=True)\n"
    )
    outcome, ckpts, reason, seed_dir = _train(
        tmp_path, task, pristine, train_py_patch(task, "order = torch.Generator", grab), 120
    )
    log = (seed_dir / "train.log").read_text()
    assert "THREADS 64" in log
    import importlib.util

    from ai4ai.grading.evaluation import read_metadata

    spec = importlib.util.spec_from_file_location("probe_cfg", task.repo / "config.py")
    cfg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cfg)
    budget_tokens = cfg.get_scale("ci").budget_sequences * cfg.SEQ_LEN
    if outcome.cut == "cpu":  # the threads' spinning spent the record's CPU cap: what it kept is less data
        assert reason in (None, "CPU budget spent with no checkpoint"), reason
        assert all(read_metadata(c, ["tokens_seen"])["tokens_seen"] <= budget_tokens for c in ckpts)
        return
    assert reason is None, reason
    steps = cfg.get_scale("ci").budget_sequences // 32
    assert f"for {steps} steps" in log
    assert ckpts[-1].name == f"ckpt_{steps:08d}.safetensors"
    assert read_metadata(ckpts[-1], ["tokens_seen"])["tokens_seen"] == budget_tokens
