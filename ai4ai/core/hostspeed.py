"""Host speed: a CPU-second cap measured on one host, carried to another.

At the metered scales (ci, smoke) a training run's compute is capped in CPU seconds: cap_factor x
the shipped algorithm's CPU time in calibration. A CPU second is not the same amount of work on
every host of a device class: the class is what the CPU reports ("AMD EPYC", 2 threads), and a
VM's neighbours, its CPU generation and its disk all change what one second buys. Seen on two
hosts of this project: the shipped optimizer at ci took 16 CPU-s on one and did not finish in 33
on the other (CI), where it ran its steps 1.8x slower; both of its graded runs were cut by the cap,
so the repo's own algorithm scored 0.096 and 0.098 instead of 0.1, and an audit of the run
disagreed with it.

So the cap is carried in units of a fixed reference workload, the probe: a fresh interpreter that
imports torch and transformers (as every training run does, and at ci that is half of a run's CPU
time) and then trains a small GPT-2 for a few steps with AdamW, at the run's thread count and
thread-pool settings. Calibration times the probe on its host and stores the figure in the
record; grading times it again on its own host, and the CPU cap (and the wall-clock liveness net,
never narrowed) is scaled by the ratio here / there, less the probe's own spread (DEADBAND), within
CLAMP. The figure is the least of a
few runs, since load only ever adds to it, and a host's runs are reused for FRESH_S seconds.
result.json records both figures and the factor (timing.host_speed), and an audit re-grades under
the recorded cap scaled by its own host's probe against the recorded one.

The submission cannot reach the probe: the harness runs it before any training, outside every
sandbox, with nothing from the submission's repo on its path.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ai4ai import PROJECT_ROOT
from ai4ai.core.layout import file_lock

# The reference workload. Its work is fixed (seeded data, fixed sizes and steps); only its CPU time
# is measured, by the parent, for the whole process: interpreter start, imports and steps.
PROBE = r"""
import sys
import torch, transformers
threads = int(sys.argv[1])
torch.set_num_threads(threads)
torch.manual_seed(0)
transformers.logging.set_verbosity_error()
cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=128, vocab_size=64, n_positions=64,
                              bos_token_id=0, eos_token_id=0)
model = transformers.GPT2LMHeadModel(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(0, 64, (16, 64))
for _ in range(10):
    loss = model(input_ids=x, labels=x).loss
    loss.backward()
    opt.step()
    opt.zero_grad()
assert torch.isfinite(loss).item()
print("probe ok")
"""

RUNS = 2  # probe runs a grading takes the least of (a calibration takes CALIBRATION_RUNS)
CALIBRATION_RUNS = 3
FRESH_S = 900.0  # a host's probe runs are reused this long (same host, same boot)
CLAMP = (0.25, 4.0)  # the factor here/there is held within this range, and the result says so
# The probe's own spread on one host (least of two runs): about +-5%, single runs up to 10%. Only
# the part of here/there beyond this band moves the cap, so that two gradings on one host, or on
# hosts as alike as the probe can tell, get the same cap; a host 1.8x slower gets 1.7x.
DEADBAND = 0.10


def thread_env(threads: int) -> dict:
    """The thread-pool settings of a training run and of the probe. Passive pools: a spinning OpenMP
    worker burns CPU time while it waits for a core, and under load that would charge the machine's
    contention to the run's CPU cap."""
    env = {
        "OMP_NUM_THREADS": str(threads),
        "MKL_NUM_THREADS": str(threads),
        "OMP_WAIT_POLICY": "PASSIVE",
        "KMP_BLOCKTIME": "0",
    }
    if os.environ.get("ATEN_CPU_CAPABILITY"):  # a lowered kernel instruction set is part of the device class
        env["ATEN_CPU_CAPABILITY"] = os.environ["ATEN_CPU_CAPABILITY"]
    return env


def probe_env(threads: int) -> dict:
    """The probe's environment: the thread settings of a training run (thread_env), no more."""
    keep = {k: os.environ[k] for k in ("PATH", "HOME", "LANG", "TMPDIR") if k in os.environ}
    return {
        **keep,
        **thread_env(threads),
        "PYTHONDONTWRITEBYTECODE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }


def run_probe(threads: int) -> float:
    """CPU seconds (user + system) of one probe process, measured from outside it."""
    with tempfile.TemporaryDirectory(prefix="ai4ai_probe_") as tmp:
        err_path = Path(tmp) / "stderr"
        with open(err_path, "w") as err:
            p = subprocess.Popen(
                [sys.executable, "-I", "-c", PROBE, str(threads)],
                cwd=tmp,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=probe_env(threads),
            )
            _, status, usage = os.wait4(p.pid, 0)
            p.returncode = os.waitstatus_to_exitcode(status)
        if p.returncode != 0:
            raise RuntimeError(f"the host-speed probe failed (exit {p.returncode}): {err_path.read_text()[-1500:]}")
    return usage.ru_utime + usage.ru_stime


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def _cache_path(threads: int) -> Path:
    return PROJECT_ROOT / "outputs" / ".cache" / "hostspeed" / f"{socket.gethostname()}_{threads}threads.json"


def measure(threads: int, runs: int = RUNS, fresh_s: float = FRESH_S) -> dict:
    """This host's probe figure at `threads` threads: the least CPU time of `runs` runs, reusing this host's
    runs of the last `fresh_s` seconds. Returns {cpu_s, runs, threads, host, measured_at}."""
    path = _cache_path(threads)
    path.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(path.with_suffix(".lock")):
        now, boot = time.time(), _boot_id()
        try:
            old = json.loads(path.read_text())
        except (OSError, ValueError):
            old = {}
        recent = (
            [r for r in old.get("runs", []) if old.get("boot_id") == boot and now - r[0] <= fresh_s]
            if fresh_s > 0
            else []
        )
        while len(recent) < runs:
            recent.append([time.time(), round(run_probe(threads), 3)])
        recent = recent[-max(runs, CALIBRATION_RUNS) :]
        path.write_text(json.dumps({"boot_id": boot, "host": socket.gethostname(), "runs": recent}))
    used = [r[1] for r in recent[-runs:]]
    return {
        "cpu_s": min(used),
        "runs": used,
        "threads": threads,
        "host": socket.gethostname(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(max(r[0] for r in recent[-runs:]))),
    }


@dataclass(frozen=True)
class Speed:
    """How much slower (factor > 1) this host is than the one a record's CPU time was measured on."""

    here_cpu_s: float
    there_cpu_s: float
    factor: float  # here / there, less DEADBAND towards 1, within CLAMP
    clamped: bool

    def as_dict(self) -> dict:
        return {
            "probe_cpu_s_here": round(self.here_cpu_s, 3),
            "probe_cpu_s_record": round(self.there_cpu_s, 3),
            "factor": round(self.factor, 4),
            "clamped": self.clamped,
        }


def ratio(here_cpu_s: float, there_cpu_s: float) -> Speed:
    raw = here_cpu_s / there_cpu_s
    banded = 1.0 if abs(raw - 1.0) <= DEADBAND else raw - DEADBAND if raw > 1.0 else raw + DEADBAND
    factor = min(max(banded, CLAMP[0]), CLAMP[1])
    return Speed(here_cpu_s, there_cpu_s, factor, factor != banded)


def record_probe(raw_record: dict, threads: int) -> float | None:
    """A stored record's probe figure at `threads` threads (None: the record has none)."""
    p = raw_record.get("host_probe") or {}
    if p.get("cpu_s") is None or int(p.get("threads", -1)) != threads:
        return None
    return float(p["cpu_s"])
