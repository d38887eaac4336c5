"""The CPU cap's count: CPU recorded >= CPU the run's processes actually used, whatever the shape of
the process tree (issue 39, part 2), and the run's cgroup made, limited and removed.

The fuzz builds random trees (depth, fan-out, threads, parents that ignore SIGCHLD, double-forked
daemons, setsid children, zombies nobody waits for, exits at random times) in the real Sandbox.
Ground truth is what each process reports of itself (getrusage(RUSAGE_SELF), its threads included)
just before it exits; the invariant is checked against the run's recorded cpu_s. Bounded: a few
examples of at most ~2 CPU-s each.
"""

import json
import os
import sys
import time
from pathlib import Path

import pytest

from ai4ai.sandbox import cgroup
from ai4ai.sandbox.box import Mount, Sandbox, bwrap_available

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

HAS_CGROUP = cgroup.create(None, None)
if HAS_CGROUP[0] is not None:
    HAS_CGROUP[0].close()
needs_cgroup = pytest.mark.skipif(HAS_CGROUP[0] is None, reason=f"no usable cgroup here: {HAS_CGROUP[1]}")

# One process of the tree: spawn its children (each in its parent's chosen way), burn CPU in its main
# thread and `threads` more, report its own CPU time to /out/r/<id>, exit. The root then waits until
# every node has reported (the run must not end before the truth is in).
WORKLOAD = r"""
import json, os, resource, signal, sys, threading, time
OUT = sys.argv[1]
spec = json.loads(sys.argv[2])
total = int(sys.argv[3])

def burn(s):
    t = time.thread_time()
    while time.thread_time() - t < s:
        pass

def run(node, ident, root):
    if node["ignore"]:
        signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    kids = []
    for i, child in enumerate(node["children"]):
        pid = os.fork()
        if pid == 0:
            if child["how"] == "daemon":          # double fork: the worker leaves the tree
                if os.fork() != 0:
                    os._exit(0)
            elif child["how"] == "setsid":
                os.setsid()
            try:
                run(child, f"{ident}.{i}", False)
            finally:
                os._exit(0)
        kids.append((pid, child["how"]))
    time.sleep(node["delay"])
    ts = [threading.Thread(target=burn, args=(node["burn"],)) for _ in range(node["threads"])]
    [t.start() for t in ts]
    burn(node["burn"])
    [t.join() for t in ts]
    if not node["ignore"]:
        for pid, how in kids:
            if how == "wait":
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
    ru = resource.getrusage(resource.RUSAGE_SELF)
    with open(f"{OUT}/r/{ident}", "w") as f:
        f.write(str(ru.ru_utime + ru.ru_stime))
    if root:
        end = time.monotonic() + 60
        while len(os.listdir(f"{OUT}/r")) < total and time.monotonic() < end:
            time.sleep(0.02)
        print("ALL", len(os.listdir(f"{OUT}/r")), flush=True)

run(spec, "0", True)
"""


def nodes(depth: int):
    leaf = st.fixed_dictionaries(
        {
            "burn": st.floats(0.0, 0.25),
            "threads": st.integers(0, 2),
            "delay": st.floats(0.0, 0.3),
            "ignore": st.booleans(),
            "how": st.sampled_from(["wait", "nowait", "daemon", "setsid"]),
            "children": st.just([]),
        }
    )
    if depth == 0:
        return leaf
    return st.fixed_dictionaries(
        {
            "burn": st.floats(0.0, 0.25),
            "threads": st.integers(0, 2),
            "delay": st.floats(0.0, 0.3),
            "ignore": st.booleans(),
            "how": st.sampled_from(["wait", "nowait", "daemon", "setsid"]),
            "children": st.lists(nodes(depth - 1), max_size=3),
        }
    )


def count(node) -> int:
    return 1 + sum(count(c) for c in node["children"])


def run_tree(tmp_path: Path, spec: dict, use_cgroup: bool = True):
    out = tmp_path / f"run_{time.monotonic_ns()}"
    (out / "r").mkdir(parents=True)
    backend = "bwrap" if bwrap_available() else "none"
    sb = Sandbox(backend=backend, mounts=[Mount("/out", out, True)], cgroup=use_cgroup)
    sb.env = sb.base_env("/out")
    o = sb.run(
        [sys.executable, "-c", WORKLOAD, sb.path("/out"), json.dumps(spec), str(count(spec))],
        "/out",
        90,
        out / "log",
        grace_s=1.0,
    )
    truth = sum(float(p.read_text() or 0) for p in (out / "r").iterdir())
    return o, truth, len(list((out / "r").iterdir()))


# the shapes the issue names, always tried first: unwaited children, a daemon, a zombie
ATTACKS = [
    {
        "burn": 0.05,
        "threads": 0,
        "delay": 0.0,
        "ignore": True,
        "how": "wait",
        "children": [
            {"burn": 0.4, "threads": 1, "delay": 0.0, "ignore": False, "how": h, "children": []}
            for h in ("wait", "daemon", "nowait")
        ],
    }
]


@needs_cgroup
@hypothesis.settings(max_examples=6, deadline=None, database=None, derandomize=True)
@hypothesis.given(spec=nodes(2))
@hypothesis.example(spec=ATTACKS[0])
def test_recorded_cpu_is_never_less_than_the_tree_used(tmp_path_factory, spec):
    tmp = tmp_path_factory.mktemp("fuzz")
    o, truth, reported = run_tree(tmp, spec)
    assert o.cpu_accounting in ("cgroup-v2", "cgroup-v1"), o
    assert reported == count(spec), (reported, spec)
    assert o.cpu_s >= truth - 0.01, (o.cpu_s, truth, o.tree_cpu_s, spec)


@pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed or cannot run here")
def test_the_process_tree_alone_misses_unwaited_children(tmp_path):
    """Why the cgroup: the fallback's figure of the attack shape is below the truth (the record of
    the hole the fallback still has; the cgroup run of the same shape is checked above)."""
    o, truth, reported = run_tree(tmp_path, ATTACKS[0], use_cgroup=False)
    assert o.cpu_accounting == "process-tree" and reported == count(ATTACKS[0])
    print(f"process tree recorded {o.cpu_s:.2f} CPU-s of {truth:.2f} used")
    assert o.cpu_s < truth


@needs_cgroup
def test_a_run_over_its_cap_is_cut_by_the_cgroup_and_leaves_no_cgroup(tmp_path):
    """Enforced during the run (the cgroup's figure, not the tree's) and checked after it; the run's
    cgroups are gone afterwards, and memory and task limits were set where a hierarchy holds them."""
    spec = {**ATTACKS[0], "children": [dict(c, burn=3.0) for c in ATTACKS[0]["children"]]}
    before = _run_cgroups()
    out = tmp_path / "capped"
    (out / "r").mkdir(parents=True)
    sb = Sandbox(backend="bwrap" if bwrap_available() else "none", mounts=[Mount("/out", out, True)])
    sb.env = sb.base_env("/out")
    o = sb.run(
        [sys.executable, "-c", WORKLOAD, sb.path("/out"), json.dumps(spec), str(count(spec))],
        "/out",
        90,
        out / "log",
        grace_s=1.0,
        cpu_limit_s=2.0,
    )
    assert o.cut == "cpu" and o.timed_out and o.cpu_s > 2.0, o
    assert o.cpu_s < 2.0 + 2 * 0.5, o  # one poll (0.25 s) on at most 2 cores, no grace
    assert o.cgroup_limits and "tasks" in o.cgroup_limits, o
    assert _run_cgroups() == before


def _run_cgroups() -> set:
    v2, v1 = cgroup._mounts()
    found = set()
    for mnt in [m for m in [v2, *v1.values()] if m is not None]:
        for root, dirs, _ in os.walk(mnt):
            found |= {os.path.join(root, d) for d in dirs if d.startswith(cgroup.PREFIX)}
    return found


@needs_cgroup
def test_a_stale_cgroup_of_a_dead_harness_is_swept(tmp_path):
    """A harness killed mid-run leaves its cgroup (and maybe a process in it): the next create removes it."""
    import subprocess

    cg, _ = cgroup.create(None, None)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = cg.cpu.parent / f"{cgroup.PREFIX}{dead.pid}-feedface"
    stale.mkdir()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (stale / "cgroup.procs").write_text(str(sleeper.pid))
    cg.close()
    cg2, _ = cgroup.create(None, None)
    try:
        assert not stale.exists()
        assert sleeper.wait(timeout=10) is not None
    finally:
        cg2.close()


def test_a_narrowed_affinity_must_be_read_at_most_samples():
    """tree.typical_affinity: one stray reading of a narrowed set (as CI met, on an unpinned training)
    does not make a tree's waiting its own; a tree pinned at more than half its samples is read as
    pinned, whatever the order of its samples. Bounded fuzz over sample sequences."""
    import random

    from ai4ai.sandbox.tree import typical_affinity

    assert typical_affinity([2] * 59 + [1]) == 2
    assert typical_affinity([2, 1]) == 2 and typical_affinity([1]) == 1
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randint(1, 80)
        pinned = rng.randint(0, n)
        seq = [1] * pinned + [rng.choice([2, 3, 4]) for _ in range(n - pinned)]
        rng.shuffle(seq)
        got = typical_affinity(seq)
        assert (got == 1) == (pinned > n // 2), (seq, got)
        assert min(seq) <= got <= max(seq)
