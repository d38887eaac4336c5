"""The process tree of a sandboxed phase, seen from the host: its CPU time and scheduling (the
CPU-time cap's measure), its signals, the harness's reaping of what it leaves behind, and its
bounded log. Nothing here trusts what the tree says of itself: every figure is read from /proc or
wait4() by the harness.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import psutil

MAX_LOG_BYTES = int(os.environ.get("AI4AI_MAX_LOG_BYTES", str(8 << 20)))


def host_cpu_times() -> tuple[float, float] | None:
    """(idle + iowait seconds summed over the host's CPUs, monotonic time) from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    return (int(fields[4]) + int(fields[5])) / hz, time.monotonic()


def idle_cores_since(start: tuple[float, float] | None) -> float | None:
    end = host_cpu_times()
    if start is None or end is None or end[1] <= start[1]:
        return None
    return round((end[0] - start[0]) / (end[1] - start[1]), 3)


def host_busy_times() -> tuple[float, float] | None:
    """(CPU seconds every process of the host has used, summed over its CPUs: user, nice, system,
    irq, softirq and steal; monotonic time) from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None
    hz = os.sysconf("SC_CLK_TCK")
    busy = sum(int(fields[i]) for i in (1, 2, 3, 6, 7, 8) if i < len(fields))
    return busy / hz, time.monotonic()


def others_cores_since(start: tuple[float, float] | None, run_cpu_s: float) -> float | None:
    """CPUs the rest of the host kept busy during a run, on average: the host's busy time less the
    run's own CPU time (`run_cpu_s`, the cgroup's where there is one). Load evidence the run cannot
    make itself, where its CPU time is counted in full."""
    end = host_busy_times()
    if start is None or end is None or end[1] <= start[1]:
        return None
    return round(max(0.0, (end[0] - start[0]) - run_cpu_s) / (end[1] - start[1]), 3)


def typical_affinity(per_sample: list[int]) -> int:
    """The CPUs a tree's runnable threads were allowed, from the union's size at each sample: the
    upper median, so a narrowed set must be read at more than half the samples. Not the fewest: CI met one sample of an unpinned training (a saturated host, no
    affinity call anywhere) that read one CPU, and that one reading made the machine's load the
    tree's fault. A tree that pins itself reads its narrowed set at most samples, and one that is
    pinned for less than half its run made less than half of its waiting."""
    return sorted(per_sample)[len(per_sample) // 2]


class TreeCpu:
    """CPU time and scheduling of a process tree, read from the host.

    CPU time: every live member's own time plus what it has reaped (a dead, reaped process's time
    lives on in its parent's `children_*`). A sample can count a child twice if it is reaped
    between reading it and reading its parent, so a limit acts only when two samples in a row
    exceed it; the exact figure comes from wait4() on the root once the tree has ended.

    Run delay: time the tree's threads spent runnable but waiting for a CPU (schedstat), the
    evidence that load, not the tree, kept it from running. `lowered` records a tree that lowered
    its own priority (nice above the harness's, SCHED_BATCH or SCHED_IDLE): its waiting is its own.
    `affinity_cpus` is how many CPUs the union of its runnable threads' affinities allowed over the
    run (typical_affinity): a tree that pinned itself to fewer CPUs than it was allotted made its own
    contention.
    """

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = 0.0
        self.run_delay = 0.0
        self.lowered = False
        self.affinity_cpus: int | None = None
        self._affinities: list[int] = []
        self._own_nice = os.getpriority(os.PRIO_PROCESS, 0)
        self._cpus: set[int] = set()

    def sample(self) -> tuple[float, int]:
        """(CPU seconds, processes) of the tree now."""
        try:
            root = psutil.Process(self.pid)
            procs = [root] + root.children(recursive=True)
        except psutil.NoSuchProcess:
            return self.peak, 0
        total, n, delay = 0.0, 0, 0.0
        self._cpus = set()
        for p in procs:
            try:
                t = p.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += t.user + t.system + t.children_user + t.children_system
            n += 1
            delay += self._threads(p.pid)
        self.peak = max(self.peak, total)
        self.run_delay = max(self.run_delay, delay)
        if self._cpus:
            self._affinities.append(len(self._cpus))
            self.affinity_cpus = typical_affinity(self._affinities)
        return total, n

    def _threads(self, pid: int) -> float:
        """Run delay summed over a process's threads; notes a lowered priority on the way."""
        out = 0.0
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return 0.0
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    out += int(f.read().split()[1]) / 1e9
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                nice, policy = int(fields[16]), int(fields[38])  # stat fields 19 and 41
                if nice > self._own_nice or policy in (3, 5):  # SCHED_BATCH, SCHED_IDLE
                    self.lowered = True
                if fields[0] == "R":  # runnable threads only: a sleeper's affinity makes no contention
                    self._cpus |= os.sched_getaffinity(int(tid))
            except (OSError, IndexError, ValueError):
                continue
        return out

    def exact(self, rusage) -> float:
        return max(self.peak, rusage.ru_utime + rusage.ru_stime) if rusage is not None else self.peak


def set_subreaper() -> None:
    # Orphans of a phase (double forks, setsid daemons) reparent to us, so we can end them.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def pump(stream, log, on_line, max_bytes: int = MAX_LOG_BYTES) -> None:
    """Copy the phase's output to its log, up to `max_bytes` (then a marker); keep draining the
    pipe so the phase never blocks on a full one."""
    written = 0
    for raw in iter(lambda: stream.readline(65536), b""):  # bounded: a line without an end is read in pieces
        if written < max_bytes:
            chunk = raw[: max_bytes - written]
            log.write(chunk)
            written += len(chunk)
            if written >= max_bytes:
                log.write(f"\n[ai4ai: log truncated at {max_bytes} bytes; the rest was discarded]\n".encode())
            log.flush()
        if on_line is not None:
            try:
                on_line(raw[:65536].decode("utf-8", "replace").rstrip("\n"))
            except Exception:  # a progress callback must never break the phase
                pass
    stream.close()


def signal_tree(pid: int, sig: int, include_root: bool = True) -> None:
    try:
        root = psutil.Process(pid)
        procs = ([root] if include_root else []) + root.children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for p in procs:
        try:
            p.send_signal(sig)
        except psutil.NoSuchProcess:
            pass
    if include_root:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_all(pid: int, me: psutil.Process, before: set[int]) -> int:
    """SIGKILL the phase's process group and every descendant of ours that it left behind."""
    n = 0
    for _ in range(3):
        victims = [c for c in me.children(recursive=True) if c.pid not in before]
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        live = []
        for c in victims:
            try:
                if c.status() != psutil.STATUS_ZOMBIE and c.pid != pid:
                    c.kill()
                    live.append(c)
            except psutil.NoSuchProcess:
                pass
        n += len(live)
        psutil.wait_procs(victims, timeout=2)
        if not live:
            break
    return n
