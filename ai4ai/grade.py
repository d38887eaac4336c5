"""Grade a submission: pristine copy + patch -> train per grader seed under the cap in the
sandbox -> choose among the last 3 checkpoints on the selection split -> hidden evaluation
of the chosen one in a separate process -> sigma.

    python -m ai4ai.grade task=optimizer patch=examples/optimizer/warmup_cosine.patch [scale=smoke]
"""
from __future__ import annotations

import fcntl
import json
import math
import os
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
from .console import TrainingBar, say
from .evaluation import CKPT_RE, EvalSpec, WorkerError, run_worker
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
    cap_s: float
    run_dir: Path
    progress: bool = True


@contextmanager
def device_lock(device: str, threads: int = 0):
    """Gradings (and proxy runs) share a device only as far as its cores go, across processes.

    A CPU is shared out in one-core slots and a grading of `threads` threads holds that many:
    a 2-core host grades two 1-thread tasks at once, and a 2-thread task takes the whole host.
    A GPU is one slot. Waiters queue at a gate first and take their slots while holding it, so
    a stream of 1-thread gradings cannot overtake a 2-thread one that is waiting for both cores.
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
        with open(lock_dir / f"{name}.gate", "w") as gate:
            fcntl.flock(gate, fcntl.LOCK_EX)        # one waiter at a time takes slots; others queue here
            if need == 1:       # any free slot
                while not any(_try_lock(f) for f in files):
                    time.sleep(0.5)
            else:               # several slots, always taken in the same order (no deadlock)
                for f in files[:need]:
                    fcntl.flock(f, fcntl.LOCK_EX)
        yield                                       # the gate is closed (released) before the work
    finally:
        for f in files:
            f.close()


def _try_lock(f) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def cap_seconds(task: Task, scale: str, record: anchor_store.Record | None) -> float:
    b = task.scale(scale)
    if record is None:
        return b.default_cap_s
    return max(b.cap_min_s, b.cap_factor * record.train_wall_s)


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


def snapshot_checkpoints(out: Path, dest: Path) -> list[Path]:
    """Copy the last 3 checkpoints (by step in the name) out of the training folder.

    Only regular files are taken (no symlinks followed), so nothing the run leaves behind
    can change what is evaluated afterwards.
    """
    dest.mkdir(parents=True, exist_ok=True)
    found = []
    for p in out.iterdir() if out.exists() else []:
        m = CKPT_RE.match(p.name)
        if m:
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                found.append((int(m.group(1)), p))
    taken = []
    for _, p in sorted(found)[-MAX_CKPT_FILES:]:
        for src in (p, p.with_suffix(".json")):
            try:   # O_NONBLOCK: a FIFO planted under a checkpoint's name must not hang the harness
                fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                os.close(fd)
                continue
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb") as fin, open(dest / src.name, "wb") as fout:
                shutil.copyfileobj(fin, fout)
        taken.append(dest / p.name)
    return taken


def training_sandbox(setup: GradeSetup, train_repo: Path, seed_dir: Path, extra_mounts: list,
                     extra_env: dict) -> Sandbox:
    """Read-only repo copy, a writable output folder and private HOME; no network."""
    out, home = seed_dir / "out", seed_dir / "home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    mounts = [Mount("/repo", train_repo, False), Mount("/out", out, True), Mount("/home/sandbox", home, True),
              Mount("/opt/ai4ai/ai4ai_kernels", KERNELS_DIR, False), *extra_mounts]
    gpu = setup.device.startswith("cuda")
    # no address-space limit on a GPU: CUDA reserves far more virtual memory than it uses
    sb = Sandbox(backend=setup.backend, mounts=mounts, network=False, gpu=gpu,
                 max_memory_bytes=None if gpu else default_memory_limit())
    env = sb.base_env("/home/sandbox")
    env.update(OMP_NUM_THREADS=str(setup.threads), MKL_NUM_THREADS=str(setup.threads),
               **{k: sb.path(v) for k, v in extra_env.items()})
    if setup.backend == "none":
        env["PYTHONPATH"] = str(train_repo)
    sb.env = env
    return sb


def run_training(setup: GradeSetup, train_repo: Path, seed: int, seed_dir: Path, extra_mounts: list,
                 extra_env: dict, label: str) -> tuple:
    """Train once under the cap; returns (outcome, snapshotted checkpoints, invalid reason or None)."""
    sb = training_sandbox(setup, train_repo, seed_dir, extra_mounts, extra_env)
    bar = TrainingBar(label, setup.progress)
    outcome = sb.run(_entry_argv(setup.task, sb, seed, setup.scale, setup.cap_s, setup.device), "/repo",
                     setup.cap_s, seed_dir / "train.log", on_line=bar.on_line)
    bar.close()
    ckpts = snapshot_checkpoints(seed_dir / "out", seed_dir / "checkpoints")
    reason = None
    if outcome.limit:
        reason = f"training ended by the sandbox: {outcome.limit}"
    elif not outcome.timed_out and outcome.returncode != 0:
        reason = f"training exited with code {outcome.returncode}: {_log_tail(seed_dir / 'train.log')}"
    elif not ckpts:
        reason = "timed out with no checkpoint" if outcome.timed_out else "training wrote no checkpoint"
    return outcome, ckpts, reason


def eval_spec(setup: GradeSetup, pristine: Path, ckpts: list, mode: str = "grade") -> EvalSpec:
    task = setup.task
    return EvalSpec(task=task.name, repo=str(pristine), grader=str(task.grader), model=task.model,
                    scale=setup.scale, candidates=[str(c) for c in ckpts], direction=task.metric.direction,
                    transform=task.metric.transform, metadata_keys=list(task.checkpoint_metadata),
                    device=setup.device, threads=setup.threads, mode=mode)


def train_and_evaluate(setup: GradeSetup, train_repo: Path, pristine: Path, seed: int,
                       seed_dir: Path, extra_mounts: list, extra_env: dict) -> SeedResult:
    outcome, ckpts, reason = run_training(setup, train_repo, seed, seed_dir, extra_mounts, extra_env,
                                          f"  seed {seed} training")
    base = dict(seed=seed, train_s=round(outcome.wall_s, 2), timed_out=outcome.timed_out)
    if reason:
        return SeedResult(status="invalid", reason=reason, raw=None, **base)
    res = run_worker(eval_spec(setup, pristine, ckpts), seed_dir / "eval")
    if res["chosen"] is None:
        reasons = "; ".join(c.get("reason", "") for c in res["candidates"])
        return SeedResult(status="invalid", reason=f"no valid checkpoint: {reasons}", raw=None,
                          candidates=res["candidates"], **base)
    return SeedResult(status="graded", reason=None, raw=res["test_metric"], candidates=res["candidates"],
                      chosen=res["chosen"], validation_metric=res.get("validation_metric"),
                      test_excess_se=res.get("test_excess_se"), weights_sha256=res.get("weights_sha256"), **base)


def _log_tail(path: Path, n: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return ""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return printable(lines[-1] if lines else "")[-n:]


def printable(text: str) -> str:
    """Text from a submission, safe for a terminal and a log: control characters escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def grade_seeds(setup: GradeSetup, sub: Submission, seeds: list[int], workdir: Path,
                pristine: Path | None = None) -> list[SeedResult]:
    """Train and evaluate `sub` once per seed. Harness faults become `error` seeds.

    `pristine`: the run's own verified pristine copy, when it has one; else one is made here."""
    task = setup.task
    workdir.mkdir(parents=True, exist_ok=True)
    # Each copy is built under a temporary name and renamed when complete, so a harness killed
    # mid-copy leaves nothing that a resumed grading would take for a finished copy.
    if pristine is None:
        pristine = _build_once(workdir / ".pristine", lambda d: pristine_copy(task, d))
    train_repo = _build_once(workdir / "train_repo", lambda d: build_training_copy(task, sub, d))
    mounts, env = data_mounts(task, setup.scale, PROJECT_ROOT / "outputs" / ".cache")
    results = []
    with device_lock(setup.device, setup.threads):
        for seed in seeds:
            say(f"grading seed {seed} ({setup.scale}, cap {setup.cap_s:.0f}s, sandbox {setup.backend})")
            seed_dir = workdir / f"seed_{seed}"
            if seed_dir.exists():
                shutil.rmtree(seed_dir)
            try:
                r = train_and_evaluate(setup, train_repo, pristine, seed, seed_dir, mounts, env)
            except Exception as e:  # the harness's fault: recorded as error, never scored
                seed_dir.mkdir(parents=True, exist_ok=True)   # the fault may come before the phase made it
                # the reason stays one line; the traceback (and the worker's own output) is kept here
                (seed_dir / "harness_error.txt").write_text(traceback.format_exc()
                                                            + (f"\n{e.detail}\n" if isinstance(e, WorkerError) else ""))
                r = SeedResult(seed=seed, status="error", reason=f"harness error: {type(e).__name__}: {e}",
                               raw=None, train_s=0.0, timed_out=False)
            msg = f"  seed {seed}: {r.status}"
            msg += f", {task.metric.name} {r.raw:.4f} (chose {r.chosen})" if r.raw is not None else f" ({r.reason})"
            say(msg)
            results.append(r)
    return results


def _build_once(dest: Path, build) -> Path:
    if dest.exists():
        return dest
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
