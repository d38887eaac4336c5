"""Grade a submission: pristine copy + patch -> train per grader seed under the cap in the
sandbox -> choose among the last 3 checkpoints on the selection split -> hidden evaluation
of the chosen one in a separate process -> sigma.

    python -m ai4ai.grade task=optimizer patch=examples/optimizer/warmup_cosine.patch [scale=smoke]
"""
from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import math
import os
import secrets
import shlex
import shutil
import socket
import stat
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import PROJECT_ROOT
from . import anchors as anchor_store
from .console import TrainingBar, printable, say
from .evaluation import CKPT_RE, MAX_CKPT_OVERHEAD, EvalSpec, WorkerError, run_worker
from .hidden import load_grader
from .provenance import UNVERSIONED, python_executable, tree_sha256
from .sandbox import KERNELS_DIR, Mount, Sandbox, default_memory_limit
from .scoring import Anchors, bootstrap_interval, phi, pooled_sigma, sigma
from .submission import Submission, apply
from .task import Task
from .workspace import copy_repo, make_read_only, make_writable, pristine_copy

MAX_CKPT_FILES = 3


@dataclass(frozen=True)
class SeedResult:
    seed: int
    status: str                   # graded | invalid | error
    reason: str | None
    raw: float | None
    train_s: float
    timed_out: bool
    candidates: list = field(default_factory=list)
    chosen: str | None = None
    validation_metric: float | None = None
    test_excess_se: float | None = None
    cpu_s: float | None = None            # CPU time of the training tree, measured from the host
    cut: str | None = None                # cpu | wall: the harness ended training (None: it exited)
    steps: int | None = None              # the chosen checkpoint's step (from its name)
    training_seed: int | None = None      # the --seed the training process got (see training_seed)
    host_idle_cores: float | None = None  # the host's idle CPUs during training (load evidence)
    weights_sha256: str | None = None   # of the chosen checkpoint's loaded tensors (replicates compared)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass(frozen=True)
class GradeSetup:
    task: Task
    scale: str
    device: str
    threads: int
    backend: str
    cap_s: float                   # wall clock: the budget at full, a wide liveness net when cpu_cap_s is set
    run_dir: Path
    progress: bool = True
    cpu_cap_s: float | None = None     # CPU seconds of the training tree (metered scales, once calibrated)
    # The run's secret: training seeds and sandbox folder names derive from it, so a training
    # process cannot tell a proxy call from a grading seed. None: the seeds pass unchanged
    # (calibration and check_task, which grade no submission).
    nonce: str | None = None


def training_seed(setup: GradeSetup, label: str, default: int) -> int:
    """The --seed a training process gets: a 31-bit value derived from the run's nonce."""
    if setup.nonce is None:
        return default
    return int.from_bytes(hmac.new(setup.nonce.encode(), label.encode(), hashlib.sha256).digest()[:4], "big") >> 1


def stage_dir(setup: GradeSetup, label: str | None = None) -> Path:
    """A host folder for what a training sandbox mounts, of one shape for every training run
    (<run>/.harness/t/<16 hex>): /proc/self/mountinfo shows a mount's host path, and it must not
    tell a proxy call from a grading seed. Named from the nonce when `label` is given (resumable)."""
    token = (hmac.new((setup.nonce or "").encode(), label.encode(), hashlib.sha256).hexdigest()[:16]
             if label else secrets.token_hex(8))
    return setup.run_dir / ".harness" / "t" / token


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
                    fcntl.flock(gate, fcntl.LOCK_EX)    # one ordinary waiter at a time; others queue here
                    while True:
                        fcntl.flock(prio, fcntl.LOCK_SH)
                        got = _take(files, need, block=False)
                        fcntl.flock(prio, fcntl.LOCK_UN)
                        if got:
                            break
                        time.sleep(0.2)
        yield                                       # gate and priority file are released before the work
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


# At the metered scales the wall clock is only a liveness net this many times wider than the cap
# it replaced (cap_factor x the shipped wall time): seen here, a 2-core host loaded by two other
# gradings ran the shipped optimizer at a third of its idle speed.
LIVENESS_FACTOR = 4.0
# A training cut by the liveness net while under its CPU cap is the environment's fault (an `error`,
# retried) only if its threads spent at least this share of the wall time runnable but waiting for
# a CPU: load starved it. A tree that slept instead (or lowered its own priority) chose not to run,
# and the seed is `invalid`. The CPU cap is at most 1/LIVENESS_FACTOR of what the net would allow
# an unstarved tree, so a busy tree the net cuts got under a quarter of its cores and waited for
# the rest: its share is well above this.
STARVED_SHARE = 0.5


@dataclass(frozen=True)
class Budget:
    wall_s: float                  # --budget-s and the harness's wall-clock cut
    cpu_s: float | None            # the training tree's CPU cap; None where the wall clock binds
    source: str                    # how the caps were derived, for the record


def budget(task: Task, scale: str, record: anchor_store.Record | None, threads: int) -> Budget:
    """The caps of one training run.

    full: the wall clock binds, cap_factor x the shipped algorithm's wall time on this device
    class. ci and smoke: compute is capped in CPU time, cap_factor x the shipped algorithm's
    CPU time, which load does not change; the wall clock becomes a liveness net."""
    b = task.scale(scale)
    if record is None:
        return Budget(b.default_cap_s, None, "uncalibrated: default wall cap")
    wall_cap = max(b.cap_min_s, b.cap_factor * record.train_wall_s)
    if scale not in anchor_store.METERED_SCALES:
        return Budget(wall_cap, None, f"wall: {b.cap_factor} x shipped {record.train_wall_s:.1f} s")
    if record.train_cpu_s is not None:
        cpu, how = b.cap_factor * record.train_cpu_s, f"{b.cap_factor} x shipped {record.train_cpu_s:.1f} CPU-s"
    else:   # a record from before CPU accounting: its wall time x threads bounds the CPU it used
        cpu = b.cap_factor * record.train_wall_s * threads
        how = f"{b.cap_factor} x shipped wall {record.train_wall_s:.1f} s x {threads} threads (record has no CPU time)"
    return Budget(LIVENESS_FACTOR * wall_cap, round(cpu, 1), f"cpu: {how}; wall liveness net {LIVENESS_FACTOR} x {wall_cap:.0f} s")


def setup_for(task: Task, scale: str, device: str, threads: int, backend: str,
              record: anchor_store.Record | None, run_dir: Path, progress: bool = True,
              nonce: str | None = None) -> GradeSetup:
    """The grading setup of a task on this device, its caps derived from the anchor record."""
    b = budget(task, scale, record, threads)
    return GradeSetup(task=task, scale=scale, device=device, threads=threads, backend=backend, cap_s=b.wall_s,
                      run_dir=run_dir, progress=progress, cpu_cap_s=b.cpu_s, nonce=nonce)


def run_nonce(run_dir: Path) -> str:
    """The run's secret, made once and kept with the harness's files (a resumed grading reuses it)."""
    path = run_dir / ".harness" / "nonce"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


def cap_seconds(task: Task, scale: str, record: anchor_store.Record | None) -> float:
    """The wall-clock cap (budget at full, liveness net at the metered scales)."""
    return budget(task, scale, record, task.scale(scale).threads).wall_s


def data_mounts(task: Task, scale: str, cache_root: Path) -> tuple[list[Mount], dict]:
    """Splits too large to commit are materialized once into a cache, keyed by version.

    The `ci` and `smoke` splits are committed in the repo (tests and laptops need no prepare
    step); `full` splits are written by the grader's prepare function (`data.prepare`).
    """
    if not task.prepare or not task.data_env or scale != "full":
        return [], {}
    key = tree_sha256(task.grader, UNVERSIONED)[:16]
    dest = cache_root / "data" / task.name / scale / key
    if not (dest / ".complete").exists():
        say(f"materializing the {scale} training split into {dest} (once)")
        grader = load_grader(task.name, task.grader)
        dest.mkdir(parents=True, exist_ok=True)
        sums = getattr(grader, task.prepare)(scale, dest)
        (dest / "SHA256SUMS").write_text("".join(f"{v}  {k}\n" for k, v in sorted(sums.items())))
        (dest / ".complete").write_text("ok")
    # the validation split never reaches the grader's training
    for v in task.validation_files:
        (dest / Path(v).name).unlink(missing_ok=True)
    return [Mount("/data", dest, False)], {task.data_env: "/data"}


def build_training_copy(task: Task, sub: Submission, dest: Path) -> Path:
    """Pristine repo + accepted patch, validation data removed, read-only."""
    copy_repo(task, dest)
    apply(sub, dest)
    for v in task.validation_files:
        (dest / v).unlink(missing_ok=True)
    make_read_only(dest)
    return dest


def _entry_argv(task: Task, sb: Sandbox, seed: int, scale: str, cap_s: float, device: str) -> list[str]:
    argv = shlex.split(task.entry)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = python_executable()
    return argv + ["--out", sb.path("/out"), "--seed", str(seed), "--scale", scale,
                   "--budget-s", f"{cap_s:.0f}", "--device", device]


MAX_META_BYTES = 64 << 10        # a metadata file larger than this is not copied (the reader ignores it too)
MAX_OUT_FILES = 1024             # entries a training run may leave in its output folder


def checkpoint_limit(task: Task, scale: str) -> int:
    """Largest checkpoint file the harness copies: the model's fp32 parameters plus header slack
    (the strict loader refuses any other size later; this bounds the copy itself)."""
    return task.scale(scale).n_params * 4 + MAX_CKPT_OVERHEAD


def out_guard(out: Path, max_bytes: int, max_files: int = MAX_OUT_FILES):
    """A check for Sandbox.run's watch: what the run has written so far, bounded before any copy."""
    def check() -> str | None:
        n, size = 0, 0
        for root, dirs, files in os.walk(out):
            for name in dirs + files:
                n += 1
                if n > max_files:
                    return f"more than {max_files} files in its output folder"
                try:
                    st = os.lstat(os.path.join(root, name))
                except OSError:
                    continue
                size += st.st_blocks * 512     # space it takes: a sparse file costs what it holds
                if size > max_bytes:
                    return f"more than {max_bytes >> 20} MiB in its output folder"
        return None
    return check


def _refusal(fd: int, limit: int | None) -> str | None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if limit is not None and st.st_size > limit:
        return f"{st.st_size} bytes, more than the model's parameters need ({limit})"
    try:       # a hole anywhere: the file claims more than it holds
        hole = os.lseek(fd, 0, os.SEEK_HOLE) if st.st_size else 0
    except OSError:
        hole = st.st_size
    finally:
        os.lseek(fd, 0, os.SEEK_SET)       # SEEK_HOLE moved the offset: the copy reads from the start
    return "a sparse file" if hole < st.st_size else None


def snapshot_checkpoints(out: Path, dest: Path, max_bytes: int | None = None,
                         refused: dict | None = None) -> list[Path]:
    """Copy the last 3 checkpoints (by step in the name) out of the training folder.

    Only regular files are taken (no symlinks followed), so nothing the run leaves behind
    can change what is evaluated afterwards. Each is checked before any byte is copied: a
    checkpoint over `max_bytes` or with holes (sparse) is refused, and so is its metadata over
    MAX_META_BYTES; refusals go to `refused` (name -> reason).
    """
    dest.mkdir(parents=True, exist_ok=True)
    refused = {} if refused is None else refused
    found = []
    try:
        entries = list(os.scandir(out)) if out.exists() else []
    except OSError:
        entries = []
    if len(entries) > MAX_OUT_FILES:
        refused["*"] = f"more than {MAX_OUT_FILES} entries in the output folder"
        return []
    for e in entries:
        m = CKPT_RE.match(e.name)
        if m and e.is_file(follow_symlinks=False):
            found.append((int(m.group(1)), out / e.name))
    taken = []
    for _, p in sorted(found)[-MAX_CKPT_FILES:]:
        for src, limit in ((p, max_bytes), (p.with_suffix(".json"), MAX_META_BYTES)):
            try:   # O_NONBLOCK: a FIFO planted under a checkpoint's name must not hang the harness
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            why = _refusal(fd, limit)
            if why is not None:
                os.close(fd)
                if src == p or why != "not a regular file":
                    refused[src.name] = why
                continue
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb") as fin, open(dest / src.name, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        if (dest / p.name).exists():
            taken.append(dest / p.name)
    return taken


def training_sandbox(setup: GradeSetup, train_repo: Path, seed_dir: Path, extra_mounts: list,
                     extra_env: dict) -> Sandbox:
    """Read-only repo copy, a writable output folder and private HOME (under `seed_dir`); no network."""
    out, home = seed_dir / "out", seed_dir / "home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    mounts = [Mount("/repo", train_repo, False), Mount("/out", out, True), Mount("/home/sandbox", home, True),
              Mount("/opt/ai4ai/ai4ai_kernels", KERNELS_DIR, False), *extra_mounts]
    gpu = setup.device.startswith("cuda")
    # no address-space limit on a GPU: CUDA reserves far more virtual memory than it uses
    sb = Sandbox(backend=setup.backend, mounts=mounts, network=False, gpu=gpu,
                 max_memory_bytes=None if gpu else default_memory_limit())
    env = sb.base_env("/home/sandbox")
    # Passive thread pools: a spinning OpenMP worker burns CPU time while it waits for a core, and
    # under load that would charge the machine's contention to the run's CPU cap.
    env.update(OMP_NUM_THREADS=str(setup.threads), MKL_NUM_THREADS=str(setup.threads),
               OMP_WAIT_POLICY="PASSIVE", KMP_BLOCKTIME="0",
               **{k: sb.path(v) for k, v in extra_env.items()})
    if setup.cpu_cap_s is not None:
        env["AI4AI_CPU_BUDGET_S"] = f"{setup.cpu_cap_s:.0f}"
    if setup.backend == "none":
        env["PYTHONPATH"] = str(train_repo)
    sb.env = env
    return sb


class EnvironmentFault(RuntimeError):
    """The machine, not the submission, ended a training run (recorded as `error`, retried)."""


def run_training(setup: GradeSetup, train_repo: Path, seed: int, seed_dir: Path, extra_mounts: list,
                 extra_env: dict, label: str) -> tuple:
    """Train once under the caps; returns (outcome, snapshotted checkpoints, invalid reason or None).

    Raises EnvironmentFault when the liveness net cut a run that was under its CPU cap on a host
    with no idle capacity: load slowed it, so its checkpoints say nothing about the submission."""
    # The sandbox's folders live in a neutral stage folder while it runs (see stage_dir) and move
    # to the seed's folder afterwards.
    stage = stage_dir(setup)
    sb = training_sandbox(setup, train_repo, stage, extra_mounts, extra_env)
    bar = TrainingBar(label, setup.progress)
    seed_dir.mkdir(parents=True, exist_ok=True)
    ckpt_bytes = checkpoint_limit(setup.task, setup.scale)
    # room for every checkpoint a run might keep and their metadata, plus logs and caches
    sb.watch = out_guard(stage / "out", 64 * ckpt_bytes + (256 << 20))
    outcome = sb.run(_entry_argv(setup.task, sb, seed, setup.scale, setup.cap_s, setup.device), "/repo",
                     setup.cap_s, seed_dir / "train.log", on_line=bar.on_line, cpu_limit_s=setup.cpu_cap_s)
    bar.close()
    for part in ("out", "home"):
        (stage / part).rename(seed_dir / part)
    stage.rmdir()
    refused: dict = {}
    ckpts = snapshot_checkpoints(seed_dir / "out", seed_dir / "checkpoints", ckpt_bytes, refused)
    if refused:
        write_json(seed_dir / "refused.json", refused)
    reason = None
    if outcome.limit:
        reason = f"training ended by the sandbox: {outcome.limit}"
    elif outcome.cut == "wall" and setup.cpu_cap_s is not None:
        used = (f"{outcome.cpu_s:.0f} of {setup.cpu_cap_s:.0f} CPU-s in {outcome.wall_s:.0f} s, "
                f"{outcome.run_delay_s:.0f} s waiting for a CPU")
        busy = outcome.cpu_s + outcome.run_delay_s >= STARVED_SHARE * outcome.wall_s
        if outcome.lowered_priority:
            reason = f"lowered its own scheduling priority and ran past the liveness net ({used})"
        elif not busy:
            reason = f"idle past the liveness net: {used}"
        elif outcome.run_delay_s < STARVED_SHARE * outcome.wall_s:
            # it ran, unstarved, and met the net before its CPU cap (a net narrower than the CPU cap
            # allows, e.g. set by hand): the wall clock was its budget, as at full; what it wrote counts
            reason = None if ckpts else "timed out with no checkpoint"
        else:
            idle = outcome.host_idle_cores
            raise EnvironmentFault(f"cut by the liveness net under its CPU cap ({used}; host idle "
                                   f"{'unknown' if idle is None else f'{idle:.2f} cores'}): the machine was too loaded")
    elif not outcome.timed_out and outcome.returncode != 0:
        reason = f"training exited with code {outcome.returncode}: {_log_tail(seed_dir / 'train.log')}"
    elif not ckpts and refused:
        reason = "no checkpoint could be taken: " + "; ".join(f"{k}: {v}" for k, v in list(refused.items())[:3])
    elif not ckpts:
        reason = {"cpu": "CPU budget spent with no checkpoint", "wall": "timed out with no checkpoint"}.get(
            outcome.cut, "training wrote no checkpoint")
    return outcome, ckpts, reason


def eval_spec(setup: GradeSetup, pristine: Path, ckpts: list, mode: str = "grade") -> EvalSpec:
    task = setup.task
    return EvalSpec(task=task.name, repo=str(pristine), grader=str(task.grader), model=task.model,
                    scale=setup.scale, candidates=[str(c) for c in ckpts], direction=task.metric.direction,
                    transform=task.metric.transform, metadata_keys=list(task.checkpoint_metadata),
                    device=setup.device, threads=setup.threads, mode=mode)


def train_and_evaluate(setup: GradeSetup, train_repo: Path, pristine: Path, seed: int,
                       seed_dir: Path, extra_mounts: list, extra_env: dict, train_seed: int) -> SeedResult:
    outcome, ckpts, reason = run_training(setup, train_repo, train_seed, seed_dir, extra_mounts, extra_env,
                                          f"  seed {seed} training")
    base = dict(seed=seed, train_s=round(outcome.wall_s, 2), timed_out=outcome.timed_out, cpu_s=outcome.cpu_s,
                cut=outcome.cut, host_idle_cores=outcome.host_idle_cores, training_seed=train_seed)
    if reason:
        return SeedResult(status="invalid", reason=reason, raw=None, **base)
    res = run_worker(eval_spec(setup, pristine, ckpts), seed_dir / "eval")
    if res["chosen"] is None:
        reasons = "; ".join(c.get("reason", "") for c in res["candidates"])
        return SeedResult(status="invalid", reason=f"no valid checkpoint: {reasons}", raw=None,
                          candidates=res["candidates"], **base)
    m = CKPT_RE.match(res["chosen"])
    return SeedResult(status="graded", reason=None, raw=res["test_metric"], candidates=res["candidates"],
                      chosen=res["chosen"], validation_metric=res.get("validation_metric"),
                      test_excess_se=res.get("test_excess_se"), steps=int(m.group(1)) if m else None,
                      weights_sha256=res.get("weights_sha256"), **base)


def _log_tail(path: Path, n: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return printable(lines[-1] if lines else "")[-n:]


def grade_seeds(setup: GradeSetup, sub: Submission, seeds: list[int], workdir: Path,
                pristine: Path | None = None, training_seeds: dict | None = None) -> list[SeedResult]:
    """Train and evaluate `sub` once per seed. Harness faults become `error` seeds.

    `pristine`: the run's own verified pristine copy, when it has one; else one is made here.
    `training_seeds`: the --seed per grader seed (an audit replays a run's); else derived."""
    task = setup.task
    workdir.mkdir(parents=True, exist_ok=True)
    # Each copy is built under a temporary name and renamed when complete, so a harness killed
    # mid-copy leaves nothing that a resumed grading would take for a finished copy.
    if pristine is None:
        pristine = _build_once(workdir / ".pristine", lambda d: pristine_copy(task, d))
    train_repo = _build_once(stage_dir(setup, f"repo {workdir} {sub.sha256}") / "repo",
                             lambda d: build_training_copy(task, sub, d))
    mounts, env = data_mounts(task, setup.scale, PROJECT_ROOT / "outputs" / ".cache")
    results = []
    caps = (f"CPU cap {setup.cpu_cap_s:.0f} CPU-s, liveness net {setup.cap_s:.0f} s" if setup.cpu_cap_s is not None
            else f"cap {setup.cap_s:.0f}s")
    for seed in seeds:
        say(f"grading seed {seed} ({setup.scale}, {caps}, sandbox {setup.backend})")
        seed_dir = workdir / f"seed_{seed}"
        if seed_dir.exists():
            shutil.rmtree(seed_dir)
        # the device is held one seed at a time, so a waiting proxy call of a running agent goes
        # next (device_lock's priority) instead of waiting for a whole multi-seed grading
        with device_lock(setup.device, setup.threads):
            try:
                train_seed = (training_seeds[seed] if training_seeds and seed in training_seeds
                              else training_seed(setup, f"grade {seed}", seed))
                r = train_and_evaluate(setup, train_repo, pristine, seed, seed_dir, mounts, env, train_seed)
            except EnvironmentFault as e:   # the machine's fault: error, retried on rerun
                r = SeedResult(seed=seed, status="error", reason=f"environment: {e}", raw=None,
                               train_s=round(setup.cap_s, 2), timed_out=True, cut="wall")
            except Exception as e:  # the harness's fault: recorded as error, never scored
                seed_dir.mkdir(parents=True, exist_ok=True)   # the fault may come before the phase made it
                # the reason stays one line; the traceback (and the worker's own output) is kept here
                (seed_dir / "harness_error.txt").write_text(traceback.format_exc()
                                                            + (f"\n{e.detail}\n" if isinstance(e, WorkerError) else ""))
                r = SeedResult(seed=seed, status="error", reason=f"harness error: {type(e).__name__}: {e}",
                               raw=None, train_s=0.0, timed_out=False)
        msg = f"  seed {seed}: {r.status}"
        msg += f", {task.metric.name} {r.raw:.4f} (chose {r.chosen})" if r.raw is not None else f" ({r.reason})"
        if r.cut == "cpu":
            msg += f"; cut by its CPU cap at {r.cpu_s:.0f} CPU-s"
        say(msg)
        results.append(r)
    return results


def _build_once(dest: Path, build) -> Path:
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        make_writable(tmp)
        shutil.rmtree(tmp)
    build(tmp)
    tmp.rename(dest)
    return dest


@dataclass(frozen=True)
class Scored:
    status: str
    reason: str | None
    raw_per_seed: list
    score_per_seed: list
    raw_mean: float | None
    raw_std: float | None
    score: float | None
    phi_per_seed: list = field(default_factory=list)
    flags: list = field(default_factory=list)      # scored, but a reader must know (see replicate_flags)

    def interval(self, anchors: Anchors, task: Task) -> list | None:
        if not self.phi_per_seed:
            return None
        m = task.metric
        return list(bootstrap_interval(self.phi_per_seed,
                                       statistic=lambda ps: pooled_sigma(ps, anchors, m.direction, m.transform)))


def score_seeds(task: Task, results: list[SeedResult], anchors: Anchors) -> Scored:
    statuses = {r.status for r in results}
    raws = [r.raw for r in results]
    if "error" in statuses:
        errs = "; ".join(f"seed {r.seed}: {r.reason}" for r in results if r.status == "error")
        return Scored("error", errs, raws, [], None, None, None)
    m = task.metric
    scores = [sigma(r.raw, anchors, m.direction, m.transform) if r.status == "graded" else 0.0 for r in results]
    phis = [phi(r.raw, m.direction, m.transform) if r.status == "graded" else None for r in results]
    valid = [r.raw for r in results if r.status == "graded"]
    invalid = [f"seed {r.seed}: {r.reason}" for r in results if r.status == "invalid"]
    status = "graded" if valid else "invalid"
    mean = _phi_mean_raw(task, valid) if valid else None
    std = float(_std([p for p in phis if p is not None])) if valid else None
    return Scored(status, "; ".join(invalid) or None, raws, scores, mean, std,
                  pooled_sigma(phis, anchors, m.direction, m.transform), phis, replicate_flags(task, results))


def replicate_flags(task: Task, results: list[SeedResult]) -> list[str]:
    """`identical weights on seeds A and B` for each group of graded seeds whose chosen weights hash
    the same: the submission ignored --seed, so its replicates are one run counted several times.

    A flag, not `invalid`: training without randomness, or with a fixed data order, is a legitimate
    algorithm (the pruning task's shipped one is deterministic), and its mean score is no better for
    it. What collapsing costs is the noise estimate (std 0, a zero-width interval) and what it can
    buy is a seed chosen for luck; both are the reader's to judge, so the result says so wherever
    its number is shown. A task that declares its shipped algorithm deterministic gives identical
    weights by design, and the flag would fire on every submission there, the shipped one included.
    """
    if task.deterministic:
        return []
    groups: dict = {}
    for r in results:
        if r.status == "graded" and r.weights_sha256:
            groups.setdefault(r.weights_sha256, []).append(r.seed)
    flags = []
    for seeds in sorted(g for g in groups.values() if len(g) > 1):
        names = [str(x) for x in seeds]
        flags.append(f"identical weights on seeds {', '.join(names[:-1])} and {names[-1]}")
    return flags


def _std(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def _phi_mean_raw(task: Task, raws: list[float]) -> float:
    """The raw value whose phi is the mean phi (geometric mean under neg_log)."""
    if task.metric.transform == "neg_log":
        return math.exp(sum(math.log(r) for r in raws) / len(raws))
    return sum(raws) / len(raws)


def write_json(path: Path, obj) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)


def main() -> None:
    from .pipeline import grade_main
    grade_main()


if __name__ == "__main__":
    main()
