"""The meter server of one training run: started before the training sandbox, stopped after it.

The task's `meter:` block (task.Meter) names the classes it serves and the files it holds. The
server is meter_wire.py run in the task's pristine repo (its protected code and every held file,
the full-scale data cache included), outside the training sandbox, with the run's thread count. The training
sandbox sees a folder with the socket and the client module (`ai4ai_meter`) only, and a copy of
the repo without the held files. When the run ends, the server writes what each served object
counted (`meter.json` in the seed folder): the budget as the harness saw it served. Per class,
`served`, `budget`, `remaining` (in `unit`) are the wire's own count, kept by the server on what
it sent and checked against each method's declared signature before the repo's method ran: that
count is authoritative; what the repo's object says of itself is kept beside it under `class`.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ai4ai.core.layout import METER_DIR
from ai4ai.core.provenance import python_executable
from ai4ai.core.task import Task
from ai4ai.repo.preparing import shrink_env
from ai4ai.sandbox import meter_wire
from ai4ai.sandbox.box import Mount

WIRE = Path(meter_wire.__file__)  # run as the server; copied into the sandbox as ai4ai_meter
SOCKET = "meter.sock"
START_TIMEOUT_S = 300.0  # the server's imports and its first objects (a teacher's weights)


class MeterFault(RuntimeError):
    """The meter server could not start or died: the harness's failure, not the submission's."""


@dataclass(frozen=True)
class Served:
    """What a training sandbox needs to reach the meter: one read-only mount and its variables."""

    mounts: list
    env: dict  # inside paths (the caller maps them for the `none` backend)
    report: Path  # written when the server stops


def held_files(task: Task, repo: Path) -> list[Path]:
    """The files of `repo` the task's meter holds back from the training copy."""
    if task.meter is None:
        return []
    out = []
    for p in sorted(repo.rglob("*")):
        rel = p.relative_to(repo).as_posix()
        if p.is_file() and any(fnmatch.fnmatchcase(rel, g) for g in task.meter.held):
            out.append(p)
    return out


def remove_held(task: Task, repo: Path) -> list[str]:
    """Delete the held files from a training copy; returns their repo-relative paths."""
    gone = []
    for p in held_files(task, repo):
        gone.append(p.relative_to(repo).as_posix())
        p.unlink()
    return gone


@contextmanager
def serving(
    task: Task,
    scale: str,
    seed: int,
    device: str,
    log: Path,
    report: Path,
    data_env: dict | None = None,
    threads: int = 1,
    repo: Path | None = None,
) -> Iterator[Served | None]:
    """Run the meter for one training run of `task` (None when the task meters nothing this way).

    `data_env`: host paths of the full-scale data cache ({task.data_env: folder}); the meter reads
    it, the training sandbox no longer mounts it. `threads`: the training run's own thread count, so
    that what the meter computes (a reward, a teacher's answer) is the same float for float as the
    same code computed in the training process. `repo`: the pristine copy to serve from, where a
    graded run's meter holds the graded instance's prepared models (training.build_meter_copy); else
    the task's repo."""
    if task.meter is None:
        yield None
        return
    # a short host path: a unix socket's path is limited to 108 bytes
    folder = Path(tempfile.mkdtemp(prefix="ai4ai-meter-"))
    lib = folder / "lib"
    lib.mkdir()
    shutil.copyfile(WIRE, lib / "ai4ai_meter.py")
    for p in (folder, lib, lib / "ai4ai_meter.py"):
        os.chmod(p, 0o755)
    sock = folder / SOCKET
    report.parent.mkdir(parents=True, exist_ok=True)
    report.unlink(missing_ok=True)
    pins = {"scale": scale, "seed": seed, "device": device}
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(folder),
        "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "OMP_WAIT_POLICY": "PASSIVE",
        "KMP_BLOCKTIME": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **shrink_env(),
        **{k: str(v) for k, v in (data_env or {}).items()},
    }
    for k in ("CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET", "ATEN_CPU_CAPABILITY"):
        if k in os.environ:
            env[k] = os.environ[k]
    argv = [
        python_executable(),
        "-s",
        str(WIRE),
        "serve",
        str(sock),
        json.dumps(task.meter.wire()),
        json.dumps(pins),
        str(report),
    ]
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            argv,
            cwd=repo or task.repo,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    try:
        t0 = time.monotonic()
        while not sock.exists():
            if proc.poll() is not None:
                raise MeterFault(
                    f"the meter server of {task.name} exited with code {proc.returncode} "
                    f"before it was ready: {_tail(log)}"
                )
            if time.monotonic() - t0 > START_TIMEOUT_S:
                raise MeterFault(f"the meter server of {task.name} was not ready in {START_TIMEOUT_S:.0f} s")
            time.sleep(0.02)
        yield Served(
            mounts=[Mount(METER_DIR, folder, False)],
            env={"AI4AI_METER": f"{METER_DIR}/{SOCKET}", "AI4AI_METER_LIB": f"{METER_DIR}/lib"},
            report=report,
        )
    finally:
        _stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)  # the server writes its report, then exits
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def read_report(report: Path) -> dict | None:
    try:
        return json.loads(report.read_text())
    except (OSError, ValueError):
        return None


def _tail(log: Path, n: int = 400) -> str:
    try:
        return log.read_text(errors="replace").strip()[-n:]
    except OSError:
        return ""
