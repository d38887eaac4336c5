"""The per-device grading lock: a CPU is shared out in one-core slots, a GPU is one slot."""

import threading
import time

import pytest

import ai4ai.grading.devices as grade
import ai4ai.grading.training as training


def _holder(device, threads, hold_s, log, name):
    with grade.device_lock(device, threads):
        log.append((name, "in", time.monotonic()))
        time.sleep(hold_s)
        log.append((name, "out", time.monotonic()))


def _run(jobs):
    log = []
    ts = [threading.Thread(target=_holder, args=(*j, log, i)) for i, j in enumerate(jobs)]
    for t in ts:
        t.start()
        time.sleep(0.05)
    for t in ts:
        t.join(timeout=30)
    return log


def _most_at_once(log):
    inside = most = 0
    for _, event, _ in sorted(log, key=lambda e: (e[2], e[1] == "in")):
        inside += 1 if event == "in" else -1
        most = max(most, inside)
    return most


def _overlap(log, a, b):
    t = {(n, e): s for n, e, s in log}
    return t[(a, "in")] < t[(b, "out")] and t[(b, "in")] < t[(a, "out")]


def test_two_one_thread_gradings_share_a_two_core_host(monkeypatch, tmp_path):
    monkeypatch.setattr(grade, "PROJECT_ROOT", tmp_path)
    monkeypatch.setattr(grade.os, "cpu_count", lambda: 2)
    log = _run([("cpu", 1, 0.6), ("cpu", 1, 0.6), ("cpu", 1, 0.6)])
    assert _overlap(log, 0, 1)  # two at once, one per core
    assert _most_at_once(log) == 2  # the third waits for a free core


def test_a_whole_host_grading_excludes_others(monkeypatch, tmp_path):
    monkeypatch.setattr(grade, "PROJECT_ROOT", tmp_path)
    monkeypatch.setattr(grade.os, "cpu_count", lambda: 2)
    log = _run([("cpu", 2, 0.5), ("cpu", 1, 0.3), ("cpu", 2, 0.3)])
    assert _most_at_once(log) == 1


def test_a_gpu_is_one_slot(monkeypatch, tmp_path):
    monkeypatch.setattr(grade, "PROJECT_ROOT", tmp_path)
    log = _run([("cuda", 1, 0.4), ("cuda", 1, 0.3)])
    assert not _overlap(log, 0, 1)


def test_one_thread_gradings_do_not_overtake_a_waiting_whole_host_one(monkeypatch, tmp_path):
    monkeypatch.setattr(grade, "PROJECT_ROOT", tmp_path)
    monkeypatch.setattr(grade.os, "cpu_count", lambda: 2)
    # job 0 holds one core; job 1 (both cores) arrives next and waits; jobs 2 and 3 arrive later and
    # would find the other core free: they must queue behind job 1
    log = _run([("cpu", 1, 0.8), ("cpu", 2, 0.3), ("cpu", 1, 0.2), ("cpu", 1, 0.2)])
    t = {(n, e): s for n, e, s in log}
    assert t[(1, "in")] < t[(2, "in")] and t[(1, "in")] < t[(3, "in")]
    assert _most_at_once(log) <= 2


def _holder_p(device, threads, hold_s, log, name, priority):
    with grade.device_lock(device, threads, priority=priority):
        log.append((name, "in", time.monotonic()))
        time.sleep(hold_s)
        log.append((name, "out", time.monotonic()))


def test_a_proxy_call_goes_before_waiting_gradings(monkeypatch, tmp_path):
    """A running agent's proxy call (priority) that arrives while two gradings wait for the device
    takes it as soon as the current holder leaves, before either of them."""
    monkeypatch.setattr(grade, "PROJECT_ROOT", tmp_path)
    monkeypatch.setattr(grade.os, "cpu_count", lambda: 2)
    log = []
    jobs = [("cpu", 2, 0.8, False), ("cpu", 2, 0.3, False), ("cpu", 1, 0.3, False), ("cpu", 2, 0.3, True)]
    ts = [threading.Thread(target=_holder_p, args=(*j[:3], log, i, j[3])) for i, j in enumerate(jobs)]
    for t in ts:
        t.start()
        time.sleep(0.1)
    for t in ts:
        t.join(timeout=30)
    t = {(n, e): s for n, e, s in log}
    assert t[(3, "in")] < t[(1, "in")] and t[(3, "in")] < t[(2, "in")], log
    assert _most_at_once(log) == 1


def test_a_gpu_another_process_uses_is_refused(monkeypatch, tmp_path):
    """At full the wall clock is the budget: a training run refuses a GPU another process is using,
    and fails closed when it cannot tell (no nvidia-smi)."""
    assert grade.gpu_users("1234, 30000\n5678, 10\n", own={5678}) == ["pid 1234 (30000 MiB)"]
    assert grade.gpu_users("No running processes found\n") == []
    grade.require_idle_gpu("cpu")  # nothing to check on a CPU
    monkeypatch.setattr(grade.shutil, "which", lambda name: None)
    with pytest.raises(grade.EnvironmentFault, match="nvidia-smi not found"):
        grade.require_idle_gpu("cuda")
    smi = tmp_path / "nvidia-smi"  # a stand-in for the binary: prints a busy GPU (no GPU here)
    smi.write_text("#!/bin/sh\ncase \"$*\" in *compute-apps*) echo '4242, 20480';; *) echo 20990;; esac\n")
    smi.chmod(0o755)
    monkeypatch.setattr(grade.shutil, "which", lambda name: str(smi))
    with pytest.raises(grade.EnvironmentFault, match="pid 4242"):
        grade.require_idle_gpu("cuda")


def _three_at_once(target, dest, log) -> list:
    """Exit codes of three forked processes running target(dest, log), each started 0.2 s after the
    last, so the later ones arrive while the first is midway through its build."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=(dest, log)) for _ in range(3)]
    for p in procs:
        p.start()
        time.sleep(0.2)
    for p in procs:
        p.join(timeout=60)
    return [p.exitcode for p in procs]


def _build_shared_cache(dest, log):
    """One process of several that need the same cache folder at once (a multirun's gradings)."""
    from ai4ai.repo import preparing

    def write(folder):
        with open(log, "a") as f:
            f.write("built\n")
        time.sleep(1.0)  # long enough for the others to arrive midway
        (folder / "split.bin").write_bytes(b"x" * 1000)
        return {"split.bin": preparing.sha256_file(folder / "split.bin")}

    assert preparing._build_cached(dest, "shared", write) == dest


def test_processes_preparing_one_cache_at_once_build_it_once(tmp_path):
    """Without the folder's lock a second process took the first one's .partial folder for a killed
    prepare and deleted it, or its rename met the finished folder ("Directory not empty")."""
    dest, log = tmp_path / "cache" / "data", tmp_path / "log"
    assert _three_at_once(_build_shared_cache, dest, log) == [0, 0, 0]
    assert log.read_text() == "built\n"
    assert (dest / ".complete").exists() and (dest / "split.bin").read_bytes() == b"x" * 1000
    assert not dest.with_name("data.partial").exists()


def _build_once_shared(dest, log):
    def build(folder):
        with open(log, "a") as f:
            f.write("built\n")
        folder.mkdir()
        time.sleep(1.0)
        (folder / "weights").write_text("w")

    assert training.build_once(dest, build) == dest


def test_processes_needing_one_built_folder_at_once_build_it_once(tmp_path):
    dest, log = tmp_path / "cache" / "base", tmp_path / "log"
    assert _three_at_once(_build_once_shared, dest, log) == [0, 0, 0]
    assert log.read_text() == "built\n" and (dest / "weights").read_text() == "w"
