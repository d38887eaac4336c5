"""A cgroup per sandboxed run: the kernel's count of the run's CPU time, its limits, and its end.

A process tree's own figures (each live member's time plus what it reaped) lose CPU time: a child
whose parent ignores SIGCHLD is reaped by the kernel and its time discarded, and a daemon that
left the tree takes its time with it. The kernel charges every CPU-nanosecond of every task to its
cgroup whatever happens to the task afterwards, and a task cannot leave a cgroup it has no write
access to (a sandboxed phase sees no /sys, holds no capability and is not root). So a run is
started inside a fresh cgroup of its own (a trampoline joins it before exec'ing the phase, so
nothing of the run is ever outside it), the CPU cap reads the cgroup's usage, the run is ended by
killing the whole cgroup, and the final figure is read after everything in it is dead.

Hierarchies: cgroup v2 (`cpu.stat` usage_usec, `cgroup.kill`, `cgroup.freeze`, `memory.max`,
`pids.max` where those controllers are enabled) is preferred; where v2 is not usable, v1 `cpuacct`
(`cpuacct.usage`, with `freezer` to stop the tree before killing it). Memory and pids limits go
to whichever hierarchy holds that controller (on a hybrid host, v1's `memory` and `pids`). Each
cgroup is made under the harness's own cgroup of that hierarchy (limits nest; nothing escapes
the harness's own limits), named `ai4ai-<harness pid>-<random>`: concurrent runs never share one,
and one left by a harness that died (its pid gone) is killed and removed by the next create.

Where none can be made (not root, cgroupfs read-only or absent, AI4AI_CGROUP=off), `create`
returns None with the reason, and the sandbox falls back to the process tree's figures; the
run's outcome says which (`cpu_accounting`: cgroup-v2 | cgroup-v1 | process-tree).
"""

from __future__ import annotations

import os
import secrets
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

PREFIX = "ai4ai-"
# Tasks (threads count: torch starts one pool per process) one run may hold at once. The sandbox's
# own limit on processes (MAX_PROCS, polled) ends a run with a reason; this one is the kernel's
# backstop between two polls: a fork bomb meets EAGAIN, never the host.
DEFAULT_MAX_TASKS = int(os.environ.get("AI4AI_CGROUP_MAX_TASKS", "8192"))


def default_memory_max() -> int:
    """Resident memory (plus page cache) of a whole run: AI4AI_CGROUP_MEMORY_BYTES, else 80% of physical
    memory. RLIMIT_AS bounds each process's address space; this bounds the tree's sum, which
    RLIMIT_AS cannot (N processes could each take the per-process limit)."""
    env = os.environ.get("AI4AI_CGROUP_MEMORY_BYTES")
    if env:
        return int(env)
    return int(psutil.virtual_memory().total * 0.8)


def _mounts() -> tuple[Path | None, dict[str, Path]]:
    """(the cgroup2 mount, {v1 controller: its mount}) from /proc/self/mountinfo."""
    v2, v1 = None, {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        left, _, right = line.partition(" - ")
        parts, rparts = left.split(), right.split()
        if len(parts) < 5 or len(rparts) < 3:
            continue
        mnt, fstype, opts = Path(parts[4]), rparts[0], rparts[2].split(",")
        if fstype == "cgroup2" and v2 is None:
            v2 = mnt
        elif fstype == "cgroup":
            for c in ("cpuacct", "memory", "pids", "freezer"):
                if c in opts and c not in v1:
                    v1[c] = mnt
    return v2, v1


def _own_paths() -> tuple[str | None, dict[str, str]]:
    """(this process's v2 cgroup path, {v1 controller: path}) from /proc/self/cgroup."""
    v2, v1 = None, {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None, {}
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            v2 = parts[2]
        for c in parts[1].split(","):
            v1[c] = parts[2]
    return v2, v1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _procs(d: Path) -> list[int]:
    try:
        return [int(x) for x in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _kill_dir(d: Path, freezer: Path | None = None, kill_file: bool = False, timeout_s: float = 5.0) -> bool:
    """SIGKILL every task of the cgroup `d` until it holds none; True when it is empty."""
    if kill_file and _write(d / "cgroup.kill", "1"):
        pass
    frozen = freezer is not None and _write(freezer / "freezer.state", "FROZEN")
    end = time.monotonic() + timeout_s
    while True:
        pids = _procs(d)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if frozen:
            _write(freezer / "freezer.state", "THAWED")  # a frozen task dies only once thawed
            frozen = False
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    if freezer is not None:
        _write(freezer / "freezer.state", "THAWED")
    return True


def _rmdir(d: Path, timeout_s: float = 5.0) -> bool:
    end = time.monotonic() + timeout_s
    while True:
        try:
            d.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > end:
                return False
            time.sleep(0.05)


def _sweep(parent: Path) -> None:
    """Kill and remove the run cgroups under `parent` whose harness is gone (a killed grading)."""
    try:
        entries = list(parent.iterdir())
    except OSError:
        return
    for d in entries:
        if not d.name.startswith(PREFIX) or not d.is_dir():
            continue
        try:
            owner = int(d.name[len(PREFIX) :].split("-", 1)[0])
        except ValueError:
            continue
        if owner == os.getpid() or _alive(owner):
            continue
        _kill_dir(d, kill_file=(d / "cgroup.kill").exists(), timeout_s=2.0)
        _rmdir(d, timeout_s=1.0)


@dataclass
class RunCgroup:
    """One run's cgroups: `cpu` (the one whose usage is read), plus one per other hierarchy that
    holds a limit (v1 only); every one of them is joined by the run's first process."""

    accounting: str  # cgroup-v2 | cgroup-v1
    cpu: Path
    dirs: list[Path]
    limits: dict = field(default_factory=dict)  # applied: memory_bytes, tasks
    freezer: Path | None = None  # v1 freezer cgroup, where v1 is the accounting hierarchy

    @property
    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs]

    def usage_s(self) -> float:
        """CPU seconds (user + system) every task of the run has used, the dead included."""
        try:
            if self.accounting == "cgroup-v2":
                for line in (self.cpu / "cpu.stat").read_text().splitlines():
                    k, _, v = line.partition(" ")
                    if k == "usage_usec":
                        return int(v) / 1e6
                return 0.0
            return int((self.cpu / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return 0.0

    def pids(self) -> list[int]:
        return sorted({p for d in self.dirs for p in _procs(d)})

    def kill(self) -> bool:
        """End every task of the run (cgroup.kill, else freeze and SIGKILL each); True when none is left."""
        ok = _kill_dir(self.cpu, self.freezer, kill_file=self.accounting == "cgroup-v2")
        for d in self.dirs:
            if d != self.cpu:
                ok = _kill_dir(d) and ok
        return ok

    def close(self) -> bool:
        """Kill what is left and remove every cgroup of the run; True when all are gone."""
        self.kill()
        ok = True
        for d in self.dirs + ([self.freezer] if self.freezer and self.freezer not in self.dirs else []):
            ok = _rmdir(d) and ok
        return ok


def _make(parent: Path, name: str) -> Path | None:
    try:
        _sweep(parent)
        d = parent / name
        d.mkdir()
        return d
    except OSError:
        return None


def create(memory_bytes: int | None = None, max_tasks: int | None = DEFAULT_MAX_TASKS) -> tuple[RunCgroup | None, str]:
    """A fresh cgroup for one run, its limits set where a hierarchy holds them; (None, why) where none
    can be made, and the caller counts the process tree instead."""
    if os.environ.get("AI4AI_CGROUP", "").lower() in ("0", "off", "no", "false"):
        return None, "disabled by AI4AI_CGROUP"
    if os.geteuid() != 0:
        return None, "the harness is not root"
    v2_mnt, v1_mnt = _mounts()
    v2_own, v1_own = _own_paths()
    name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    made: list[Path] = []
    cg: RunCgroup | None = None
    if v2_mnt is not None and v2_own is not None:
        parent = v2_mnt / v2_own.lstrip("/")
        d = _make(parent, name)
        if d is not None and (d / "cpu.stat").exists() and (d / "cgroup.procs").exists():
            made.append(d)
            cg = RunCgroup("cgroup-v2", d, [d])
            controllers = (
                set((d / "cgroup.controllers").read_text().split()) if (d / "cgroup.controllers").exists() else set()
            )
            if memory_bytes and "memory" in controllers and _write(d / "memory.max", str(int(memory_bytes))):
                _write(d / "memory.swap.max", "0")
                cg.limits["memory_bytes"] = int(memory_bytes)
            if max_tasks and "pids" in controllers and _write(d / "pids.max", str(int(max_tasks))):
                cg.limits["tasks"] = int(max_tasks)
        elif d is not None:
            _rmdir(d)
    if cg is None and "cpuacct" in v1_mnt and "cpuacct" in v1_own:
        d = _make(v1_mnt["cpuacct"] / v1_own["cpuacct"].lstrip("/"), name)
        if d is not None and (d / "cpuacct.usage").exists():
            made.append(d)
            cg = RunCgroup("cgroup-v1", d, [d])
            if "freezer" in v1_mnt and "freezer" in v1_own:
                f = _make(v1_mnt["freezer"] / v1_own["freezer"].lstrip("/"), name)
                if f is not None:
                    cg.freezer = f
                    if f != d:
                        cg.dirs.append(f)
    if cg is None:
        for d in made:
            _rmdir(d)
        return None, "no writable cgroup hierarchy with CPU accounting"
    # limits the accounting hierarchy lacks, in v1 hierarchies of their own (a hybrid host)
    for ctl, key, value, file in (
        ("memory", "memory_bytes", memory_bytes, "memory.limit_in_bytes"),
        ("pids", "tasks", max_tasks, "pids.max"),
    ):
        if not value or key in cg.limits or ctl not in v1_mnt or ctl not in v1_own:
            continue
        base = v1_mnt[ctl] / v1_own[ctl].lstrip("/")
        existing = next((x for x in cg.dirs if x.parent == base), None)
        d = existing or _make(base, name)
        if d is None:
            continue
        if _write(d / file, str(int(value))):
            cg.limits[key] = int(value)
            if d not in cg.dirs:
                cg.dirs.append(d)
        elif existing is None:
            _rmdir(d)
    return cg, ""
