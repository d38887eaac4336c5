"""The device a training or evaluation runs on: shared between gradings and proxy runs as far as its
cores go (`device_lock`, across processes), and a GPU refused while another process uses it
(`require_idle_gpu`). `EnvironmentFault`: the machine's fault, never the submission's.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import time
from contextlib import contextmanager

from ai4ai import PROJECT_ROOT


@contextmanager
def device_lock(device: str, threads: int = 0, priority: bool = False):
    """Gradings (and proxy runs) share a device only as far as its cores go, across processes.

    A CPU is shared out in one-core slots and a grading of `threads` threads holds that many:
    a 2-core host grades two 1-thread tasks at once, and a 2-thread task takes the whole host.
    A GPU is one slot. Waiters queue at a gate first and take their slots while holding it, so
    a stream of 1-thread gradings cannot overtake a 2-thread one that is waiting for both cores.
    `priority` (a running agent's proxy call, whose wait eats its window) goes ahead of the gate:
    ordinary waiters try their slots only while holding the priority file shared, all or none at
    once, so a priority waiter holding it exclusively takes the next free slots before any of them.
    """
    lock_dir = PROJECT_ROOT / "outputs" / ".locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    # one lock per physical device: host + device + visible GPUs (outputs/ may be on a shared filesystem)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "") if device.startswith("cuda") else ""
    name = f"{socket.gethostname()}_{device}_{gpu}".replace(":", "_").replace(",", "-").replace("/", "_")
    cpu = device == "cpu" and threads > 0
    total = (os.cpu_count() or 1) if cpu else 1
    need = min(total, threads) if cpu else 1
    files = [open(lock_dir / (f"{name}.lock" + (f".{i}" if i else "")), "w") for i in range(total)]
    try:
        with open(lock_dir / f"{name}.priority", "w") as prio:
            if priority:
                fcntl.flock(prio, fcntl.LOCK_EX)
                _take(files, need, block=True)
            else:
                with open(lock_dir / f"{name}.gate", "w") as gate:
                    fcntl.flock(gate, fcntl.LOCK_EX)  # one ordinary waiter at a time; others queue here
                    while True:
                        fcntl.flock(prio, fcntl.LOCK_SH)
                        got = _take(files, need, block=False)
                        fcntl.flock(prio, fcntl.LOCK_UN)
                        if got:
                            break
                        time.sleep(0.2)
        yield  # gate and priority file are released before the work
    finally:
        for f in files:
            f.close()


def _take(files: list, need: int, block: bool) -> bool:
    """Take `need` slots: any free one when one is needed, else the first `need` in order (the same
    order for everyone: no deadlock). Without `block`, all or none."""
    if need == 1:
        while True:
            if any(_try_lock(f) for f in files):
                return True
            if not block:
                return False
            time.sleep(0.2)
    taken = []
    for f in files[:need]:
        if block:
            fcntl.flock(f, fcntl.LOCK_EX)
        elif not _try_lock(f):
            for t in taken:
                fcntl.flock(t, fcntl.LOCK_UN)
            return False
        taken.append(f)
    return True


def _try_lock(f) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


class EnvironmentFault(RuntimeError):
    """The machine, not the submission, ended a training run (recorded as `error`, retried)."""


# At full the wall clock is the budget, so a GPU that another process is using makes the number
# depend on that process. A training run starts only on a GPU with no other compute process and at
# most this much memory in use; it fails closed (an `error`, retried) when that cannot be checked.
GPU_BUSY_MIB = 512


def gpu_users(query: str, own: set[int] = frozenset()) -> list[str]:
    """Other processes on the GPU, from `nvidia-smi --query-compute-apps=pid,used_memory
    --format=csv,noheader,nounits` output ("pid, MiB" a line); `own`: pids of this harness."""
    out = []
    for line in query.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit() and int(parts[0]) not in own:
            out.append(f"pid {parts[0]} ({parts[1]} MiB)")
    return out


def require_idle_gpu(device: str) -> None:
    """Raise EnvironmentFault unless the GPU `device` names is idle (see GPU_BUSY_MIB)."""
    if not device.startswith("cuda"):
        return
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise EnvironmentFault(
            "cannot check that the GPU is idle (nvidia-smi not found); a shared GPU makes "
            "the wall-clock cap meaningless, so grading at full needs nvidia-smi on PATH"
        )
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    sel = ["-i", visible] if visible else []

    def query(what: str) -> str:
        return subprocess.run(
            [smi, *sel, what, "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=30, check=True
        ).stdout

    try:
        apps = query("--query-compute-apps=pid,used_memory")
        used = query("--query-gpu=memory.used").split()
    except (OSError, subprocess.SubprocessError) as e:
        raise EnvironmentFault(f"cannot check that the GPU is idle: nvidia-smi failed ({e})")
    others = gpu_users(apps, {os.getpid()})
    mib = float(used[0]) if used and used[0].replace(".", "", 1).isdigit() else None
    if others or mib is None or mib > GPU_BUSY_MIB:
        raise EnvironmentFault(
            f"the GPU is in use ({', '.join(others) or 'no process listed'}; "
            f"{'unknown' if mib is None else f'{mib:.0f} MiB'} of its memory taken): grading "
            "needs it to itself; stop the other work (nvidia-smi lists it) and rerun"
        )
