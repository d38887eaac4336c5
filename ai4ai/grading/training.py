"""Train one seed under the caps: the device, the data, the sandbox, the checkpoints.

`run_training` is the one way a training process is started, for grading, proxy calls and
calibration alike: it takes the device (`device_lock`, held by the caller), builds the training
sandbox in a neutral stage folder, runs the repo's entry under the CPU cap and the wall clock,
and copies the checkpoints out within bounds. Choosing among them and scoring are grading.py's.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import os
import secrets
import shlex
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ai4ai.core import hostspeed
from ai4ai.core.console import TrainingBar, printable
from ai4ai.core.layout import KERNELS, OUT, REPO, TRAIN_HOME, RunDir, file_lock, write_json
from ai4ai.core.provenance import python_executable
from ai4ai.core.task import Task
from ai4ai.grading.context import RunContext
from ai4ai.grading.devices import EnvironmentFault, require_idle_gpu
from ai4ai.grading.evaluation import CKPT_RE, MAX_CKPT_OVERHEAD
from ai4ai.repo.meter import MeterFault, Served, remove_held, serving
from ai4ai.repo.preparing import read_sums, shrink_env, write_sums
from ai4ai.repo.submission import Submission, apply
from ai4ai.repo.workspace import copy_repo, make_read_only, make_writable
from ai4ai.sandbox.box import KERNELS_DIR, Mount, Sandbox, default_memory_limit
from ai4ai.sandbox.walk import MAX_DEPTH, WalkRefused, walk

MAX_CKPT_FILES = 3


def training_seed(ctx: RunContext, label: str, default: int) -> int:
    """The --seed a training process gets: a 31-bit value derived from the run's nonce."""
    if ctx.nonce is None:
        return default
    return int.from_bytes(hmac.new(ctx.nonce.encode(), label.encode(), hashlib.sha256).digest()[:4], "big") >> 1


def stage_dir(ctx: RunContext, label: str | None = None) -> Path:
    """A host folder for what a training sandbox mounts, of one shape for every training run
    (<run>/.harness/t/<16 hex>): /proc/self/mountinfo shows a mount's host path, and it must not
    tell a proxy call from a grading seed. Named from the nonce when `label` is given (resumable)."""
    token = (
        hmac.new((ctx.nonce or "").encode(), label.encode(), hashlib.sha256).hexdigest()[:16]
        if label
        else secrets.token_hex(8)
    )
    return RunDir(ctx.run_dir).stage(token)


def run_nonce(run_dir: Path) -> str:
    """The run's secret, made once and kept with the harness's files (a resumed grading reuses it)."""
    path = RunDir(run_dir).nonce
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secrets.token_hex(16))
    return path.read_text().strip()


# A training cut by the liveness net while under its CPU cap is the environment's fault (an `error`,
# retried) only if its threads spent at least this share of the wall time runnable but waiting for
# a CPU: load starved it. A tree that slept instead (or lowered its own priority) chose not to run,
# and the seed is `invalid`. The CPU cap is at most 1/LIVENESS_FACTOR of what the net would allow
# an unstarved tree, so a busy tree the net cuts got under a quarter of its cores and waited for
# the rest: its share is well above this.
STARVED_SHARE = 0.5


def build_training_copy(task: Task, sub: Submission, dest: Path, graded: Path | None = None) -> Path:
    """Pristine repo + accepted patch, validation data and the meter's held files removed, read-only.
    `graded`: the graded instance's prepared models (preparing.graded_artifacts), each put in place of
    the visible one at its repo-relative path and listed in the SHA256SUMS beside it; one the meter
    holds (a teacher) is removed with the other held files: it goes to the meter's copy only."""
    copy_repo(task, dest)
    apply(sub, dest)
    for v in task.validation_files:
        (dest / v).unlink(missing_ok=True)
    if graded is not None:
        put_graded(graded, dest)
    remove_held(task, dest)  # last: nothing the meter holds reaches the copy, a graded file neither
    make_read_only(dest)
    return dest


def build_meter_copy(task: Task, dest: Path, graded: Path) -> Path:
    """The pristine repo in which a graded run's meter serves (meter.serving's `repo`): the graded
    instance's prepared models in place of the visible ones, so that a teacher the meter holds is the
    one prepared on the graded instance. No patch: the meter runs protected code only. Read-only."""
    copy_repo(task, dest)
    put_graded(graded, dest)
    make_read_only(dest)
    return dest


def meter_needs_graded(task: Task, graded: Path | None) -> bool:
    """Whether a graded run's meter must serve from a copy holding the graded instance's prepared
    models: the task has some and its meter holds one of them (data.grading_artifacts, meter.held)."""
    return (
        graded is not None
        and task.meter is not None
        and any(fnmatch.fnmatchcase(rel, g) for rel in read_sums(graded) for g in task.meter.held)
    )


def put_graded(graded: Path, dest: Path) -> None:
    """Each file of `graded` (listed in its SHA256SUMS by repo-relative path) into the repo copy `dest`
    at that path, listed in the SHA256SUMS beside it."""
    for rel, digest in read_sums(graded).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(graded / rel, target)
        listing = read_sums(target.parent)
        listing[target.name] = digest
        write_sums(target.parent, listing)


def build_once(dest: Path, build) -> Path:
    """`build(folder)` into dest.partial, renamed to dest when done; an existing dest is reused. Processes
    that need the same dest at once take turns on its lock: one builds, the rest reuse it."""
    if dest.exists():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.with_name(dest.name + ".lock")):
        if dest.exists():
            return dest
        tmp = dest.with_name(dest.name + ".partial")
        if tmp.exists():
            make_writable(tmp)
            shutil.rmtree(tmp)
        build(tmp)
        tmp.rename(dest)
    return dest


def _entry_argv(task: Task, sb: Sandbox, seed: int, scale: str, cap_s: float, device: str) -> list[str]:
    argv = shlex.split(task.entry)
    if argv and argv[0] in ("python", "python3"):
        argv[0] = python_executable()
    return argv + [
        "--out",
        sb.path(OUT),
        "--seed",
        str(seed),
        "--scale",
        scale,
        "--budget-s",
        f"{cap_s:.0f}",
        "--device",
        device,
    ]


MAX_META_BYTES = 64 << 10  # a metadata file larger than this is not copied (the reader ignores it too)


MAX_OUT_FILES = 1024  # entries a training run may leave in its output folder


def checkpoint_limit(task: Task, scale: str) -> int:
    """Largest checkpoint file the harness copies: the model's fp32 parameters plus header slack
    (the strict loader refuses any other size later; this bounds the copy itself)."""
    return task.scale(scale).n_params * 4 + MAX_CKPT_OVERHEAD


def out_guard(out: Path, max_bytes: int, max_files: int = MAX_OUT_FILES):
    """A check for Sandbox.run's watch: what the run has written so far, bounded before any copy."""

    def check() -> str | None:
        # walk.walk, not os.walk: a folder chain deeper than Python's recursion limit raised
        # RecursionError here; a folder deeper than walk.MAX_DEPTH is a limit of its own, since
        # what is under it would go uncounted
        size, deep = 0, {}
        try:
            if not out.is_dir():
                return None
            for _, fd, entries in walk(out, max_entries=max_files, problems=deep):
                for e in entries:
                    try:
                        st = os.stat(e.name, dir_fd=fd, follow_symlinks=False)
                    except OSError:
                        continue
                    size += st.st_blocks * 512  # space it takes: a sparse file costs what it holds
                    if size > max_bytes:
                        return f"more than {max_bytes >> 20} MiB in its output folder"
        except WalkRefused:
            return f"more than {max_files} files in its output folder"
        except OSError:
            return None
        if any("levels deep" in why for why in deep.values()):
            return f"folders more than {MAX_DEPTH} levels deep in its output folder"
        return None

    return check


def _refusal(fd: int, limit: int | None) -> str | None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if limit is not None and st.st_size > limit:
        return f"{st.st_size} bytes, more than the model's parameters need ({limit})"
    try:  # a hole anywhere: the file claims more than it holds
        hole = os.lseek(fd, 0, os.SEEK_HOLE) if st.st_size else 0
    except OSError:
        hole = st.st_size
    finally:
        os.lseek(fd, 0, os.SEEK_SET)  # SEEK_HOLE moved the offset: the copy reads from the start
    return "a sparse file" if hole < st.st_size else None


def snapshot_checkpoints(
    out: Path, dest: Path, max_bytes: int | None = None, refused: dict | None = None
) -> list[Path]:
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
            try:  # O_NONBLOCK: a FIFO planted under a checkpoint's name must not hang the harness
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


def training_sandbox(
    ctx: RunContext, train_repo: Path, seed_dir: Path, extra_mounts: list, extra_env: dict, served: Served | None = None
) -> Sandbox:
    """Read-only repo copy, a writable output folder and private HOME (under `seed_dir`); no network;
    the meter's socket when the task has one (`served`)."""
    out, home = seed_dir / "out", seed_dir / "home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    if served is not None:
        extra_mounts, extra_env = [*extra_mounts, *served.mounts], {**extra_env, **served.env}
    mounts = [
        Mount(REPO, train_repo, False),
        Mount(OUT, out, True),
        Mount(TRAIN_HOME, home, True),
        Mount(KERNELS, KERNELS_DIR, False),
        *extra_mounts,
    ]
    gpu = ctx.device.startswith("cuda")
    # no address-space limit on a GPU: CUDA reserves far more virtual memory than it uses
    sb = Sandbox(
        backend=ctx.backend,
        mounts=mounts,
        network=False,
        gpu=gpu,
        max_memory_bytes=None if gpu else default_memory_limit(),
    )
    env = sb.base_env(TRAIN_HOME)
    env.update(hostspeed.thread_env(ctx.threads), **{k: sb.path(v) for k, v in extra_env.items()})
    env.update(shrink_env())  # the harness's sizes of `full` (tests shrink them), the same in every run
    if ctx.cpu_cap_s is not None:
        env["AI4AI_CPU_BUDGET_S"] = f"{ctx.cpu_cap_s:.0f}"
    if ctx.backend == "none":
        env["PYTHONPATH"] = str(train_repo)
    if served is not None:  # the client module `ai4ai_meter`, which the repo's protected code imports
        env["PYTHONPATH"] = ":".join(x for x in (env.get("PYTHONPATH"), env["AI4AI_METER_LIB"]) if x)
    sb.env = env
    return sb


@contextmanager
def _meter(ctx: RunContext, seed: int, seed_dir: Path, data_env: dict, repo: Path | None = None) -> Iterator[Served]:
    """The run's meter server (serving from `repo`, or the task's repo when None); one that cannot
    start or dies is the machine's fault, not the submission's (EnvironmentFault: the seed is an
    `error`, retried)."""
    try:
        with serving(
            ctx.task,
            ctx.scale,
            seed,
            ctx.device,
            seed_dir / "meter.log",
            seed_dir / "meter.json",
            data_env,
            ctx.threads,
            repo,
        ) as served:
            yield served
    except MeterFault as e:
        raise EnvironmentFault(f"meter: {e}") from e


def run_training(
    ctx: RunContext,
    train_repo: Path,
    seed: int,
    seed_dir: Path,
    extra_mounts: list,
    extra_env: dict,
    label: str,
    meter_repo: Path | None = None,
) -> tuple:
    """Train once under the caps; returns (outcome, snapshotted checkpoints, invalid reason or None).
    `meter_repo`: the repo copy the meter serves from (build_meter_copy), where it is not the task's.

    Raises EnvironmentFault when the liveness net cut a run that was under its CPU cap while other
    processes of the host held the CPUs it was allotted (self_made_contention): load slowed it, so
    its checkpoints say nothing about the submission."""
    require_idle_gpu(ctx.device)
    # The sandbox's folders live in a neutral stage folder while it runs (see stage_dir) and move
    # to the seed's folder afterwards.
    stage = stage_dir(ctx)
    seed_dir.mkdir(parents=True, exist_ok=True)
    data_env: dict = {}
    if ctx.task.meter is not None:
        # the full-scale split folder is the meter's to read, not the training sandbox's
        hosts = {m.inside: m.host for m in extra_mounts}
        data_env = {k: hosts[v] for k, v in extra_env.items() if v in hosts}
        extra_mounts = [m for m in extra_mounts if m.host not in data_env.values()]
        extra_env = {k: v for k, v in extra_env.items() if k not in data_env}
    with _meter(ctx, seed, seed_dir, data_env, meter_repo) as served:
        sb = training_sandbox(ctx, train_repo, stage, extra_mounts, extra_env, served)
        bar = TrainingBar(label, ctx.progress)
        ckpt_bytes = checkpoint_limit(ctx.task, ctx.scale)
        # room for every checkpoint a run might keep and their metadata, plus logs and caches
        sb.watch = out_guard(stage / "out", 64 * ckpt_bytes + (256 << 20))
        outcome = sb.run(
            _entry_argv(ctx.task, sb, seed, ctx.scale, ctx.cap_s, ctx.device),
            REPO,
            ctx.cap_s,
            seed_dir / "train.log",
            on_line=bar.on_line,
            cpu_limit_s=ctx.cpu_cap_s,
        )
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
    elif outcome.cut == "wall" and ctx.cpu_cap_s is not None:
        used = (
            f"{outcome.cpu_s:.0f} of {ctx.cpu_cap_s:.0f} CPU-s in {outcome.wall_s:.0f} s, "
            f"{outcome.run_delay_s:.0f} s waiting for a CPU"
        )
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
            reason = self_made_contention(outcome, ctx.threads, used)
            if reason is None:
                idle = outcome.host_idle_cores
                raise EnvironmentFault(
                    f"cut by the liveness net under its CPU cap ({used}; host idle "
                    f"{'unknown' if idle is None else f'{idle:.2f} cores'}, other processes kept "
                    f"{_cores(outcome.others_cores)} busy): the machine was too loaded"
                )
    elif not outcome.timed_out and outcome.returncode != 0:
        reason = f"training exited with code {outcome.returncode}: {_log_tail(seed_dir / 'train.log')}"
    elif not ckpts and refused:
        reason = "no checkpoint could be taken: " + "; ".join(f"{k}: {v}" for k, v in list(refused.items())[:3])
    elif not ckpts:
        reason = {"cpu": "CPU budget spent with no checkpoint", "wall": "timed out with no checkpoint"}.get(
            outcome.cut, "training wrote no checkpoint"
        )
    return outcome, ckpts, reason


def _cores(x: float | None) -> str:
    return "unknown" if x is None else f"{x:.2f} cores"


def self_made_contention(outcome, threads: int, used: str) -> str | None:
    """Why a training its threads' waiting starved is the submission's doing, or None when the host's
    load is to blame. Waiting (run delay) is no evidence by itself: a tree makes its own, pinning
    itself to fewer CPUs than it was allotted or running more threads than there are cores. Only
    what the tree cannot make counts for the environment: the rest of the host's CPU use during the
    run (host busy time less the run's own, read from its cgroup where there is one), which must have
    left the run less than STARVED_SHARE of the CPUs it was allotted."""
    ncpu = os.cpu_count() or 1
    allotted = max(1, min(threads, ncpu))
    if outcome.affinity_cpus is not None and outcome.affinity_cpus < allotted:
        return (
            f"restricted its own CPU affinity to {outcome.affinity_cpus} of its {allotted} CPUs and ran past "
            f"the liveness net ({used})"
        )
    others = outcome.others_cores
    if others is not None and ncpu - others >= STARVED_SHARE * allotted:
        return (
            f"waited for CPUs its own processes held and ran past the liveness net ({used}; other processes "
            f"kept {_cores(others)} of {ncpu} busy, leaving it at least {ncpu - others:.2f})"
        )
    return None


def _log_tail(path: Path, n: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return printable(lines[-1] if lines else "")[-n:]
