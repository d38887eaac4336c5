"""Route: CPU time spent where the CPU cap does not see it (issue 39, part 2).

The cap read the training tree's own figures: each live member's time plus what it had reaped
(`children_*`). A child whose parent ignores SIGCHLD is reaped by the kernel and its time is
discarded; a double-forked daemon takes its time with it when it leaves the tree. ATTACK trains in
short-lived children of a parent that ignores SIGCHLD: each child trains part of a pass over the
data (cached once, so the meter's data budget is met) and hands the model on through a file; the
tree never shows more than one child's time. Eight passes instead of one.

Found open (b96295c, `python -m ai4ai.grade task=optimizer scale=ci`, grader seed 0, a 2-core AMD
EPYC VM shared with other work, 2026-12-05): the processes reported 58.1 CPU-s of their own (32
children 54.3, the parent 3.8); the tree recorded 5.6 CPU-s against a cap of 16; graded, not cut,
score 0.709 (perplexity 6.44; the shipped algorithm 0.1).
Now: every training runs in a cgroup of its own (sandbox.cgroup), the cap reads the kernel's count,
and the attack is cut at its cap with whatever it had written by then.
"""

import pytest

from .conftest import baseline_score, grade_train_py, needs_bwrap

PASSES = 8
CHUNKS = 4  # children per pass: each stays well under the cap on its own

# replaces train.py's loop: cache the served data once, then train PASSES passes in children
LOOP = r"""
import os as _os, resource, signal as _signal, tempfile as _tempfile
_signal.signal(_signal.SIGCHLD, _signal.SIG_IGN)   # children reaped by the kernel: their time is dropped
t0 = time.time()
perm = torch.randperm(len(split), generator=order)
batches = [split.get(perm[(s * BATCH_SIZE) % len(split):][:BATCH_SIZE]) for s in range(total_steps)]
state = _os.path.join(_tempfile.gettempdir(), "state.pt")
torch.save({"model": model.state_dict(), "opt": optimizer.state_dict()}, state)
all_steps = PASSES * total_steps
per_child = max(1, total_steps // CHUNKS)
for start in range(0, all_steps, per_child):
    pid = _os.fork()
    if pid == 0:
        try:
            st = torch.load(state)
            model.load_state_dict(st["model"]); optimizer.load_state_dict(st["opt"])
            for g in range(start, min(start + per_child, all_steps)):
                batch = batches[g % total_steps].to(device)
                for group in optimizer.param_groups:
                    group["lr"] = lr_at(g, all_steps)
                loss = model(input_ids=batch, labels=batch).loss
                loss.backward(); optimizer.step(); optimizer.zero_grad(set_to_none=True)
            torch.save({"model": model.state_dict(), "opt": optimizer.state_dict()}, state + ".new")
            _os.replace(state + ".new", state)
            _ru = resource.getrusage(resource.RUSAGE_SELF)
            print(f"CHILD_CPU {_ru.ru_utime + _ru.ru_stime:.3f}", flush=True)   # ground truth, its own
        finally:
            _os._exit(0)
    try:
        _os.waitpid(pid, 0)                              # returns (ECHILD) once the child is gone
    except ChildProcessError:
        pass
    print(f"pass step {start + per_child}/{all_steps}", flush=True)
model.load_state_dict(torch.load(state)["model"])
save_checkpoint(model, args.out, total_steps, metadata={"tokens_seen": split.served * batches[0].shape[1]})
_ru = resource.getrusage(resource.RUSAGE_SELF)
print(f"PARENT_CPU {_ru.ru_utime + _ru.ru_stime:.3f}", flush=True)
"""


def attack_train_py(task) -> str:
    old = (task.repo / "train.py").read_text()
    head = old[: old.index("# ----------------------------------------------------------------------------- loop")]
    return head + f"PASSES, CHUNKS = {PASSES}, {CHUNKS}\n" + LOOP


@needs_bwrap
def test_cpu_of_unwaited_children_is_counted_and_capped(compose_cfg, tmp_path, task):
    """Gains nothing: the run's cgroup counts every child's CPU time, the cap cuts the run when the
    kernel's figure passes it (recorded as a CPU cut), and what it wrote by then scores no better
    than the shipped algorithm (here: nothing, the one checkpoint comes after the eight passes)."""
    r = grade_train_py(compose_cfg, tmp_path, task, attack_train_py(task), "unseen_cpu")
    [seed] = r["checkpoints"]["per_seed"]
    log = next((tmp_path / "run").rglob("train.log")).read_text()
    used = sum(float(ln.split()[1]) for ln in log.splitlines() if ln.startswith(("CHILD_CPU", "PARENT_CPU")))
    print("self-reported", used, "recorded", seed["cpu_s"], seed["cut"], seed["cpu_accounting"], r["score"])
    if seed["cpu_accounting"] == "process-tree":
        pytest.skip("no usable cgroup on this machine: the process tree's figures are all there is")
    assert r["sandbox"]["cpu_accounting"] == seed["cpu_accounting"]
    assert seed["cut"] == "cpu" and seed["cpu_s"] >= used, seed
    shipped, tolerance = baseline_score(r)
    assert r["status"] != "graded" or r["score"] < shipped + tolerance, r["score"]
