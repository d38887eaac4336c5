"""Build what a task needs at a scale whose data and prepared models are not committed (the GPU
tiers, quick and full).

The library of `python -m ai4ai.prepare task=sft scale=full [device=cuda]` (prepare.py), and of
the data mounts every training run gets (training.data_mounts).

Two phases, each resumable and checksummed:
  1. data: the hidden grader's prepare function (`data.prepare` in the task config, e.g.
     materialize) writes the training splits into the harness's cache, outputs/.cache/data/<task>/
     <scale>/<key> (key: the grader's content hash), the layout training.data_mounts mounts from.
     A complete cache (its .complete marker) is reused after every file is checked against its
     SHA256SUMS; a damaged one is set aside and rebuilt; a partial one (a prepare killed midway)
     is regenerated from its seeds, which gives the same bytes.
  2. artifacts: the repo's own prepare step (`data.artifacts.command`) makes the prepared models
     the scale needs (a base LM, a teacher, ...) inside the repo, where its loaders check them
     against the repo's SHA256SUMS. Artifacts already there with matching checksums are kept.
A killed prepare resumes at the phase it was in; a complete one is skipped.

AI4AI_SHRINK (hidden.SHRINK_ENV, which the graders read through hidden.shrunk) shrinks `quick` and `full`
to CPU sizes for the test suite; the cache key carries it, so a shrunk split is never taken for a real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from ai4ai import PROJECT_ROOT
from ai4ai.core.console import TrainingBar, say
from ai4ai.core.hidden import SHRINK_ENV, load_grader, sha256_file
from ai4ai.core.layout import DATA, file_lock
from ai4ai.core.provenance import UNVERSIONED, cpu_capability, python_executable, tree_sha256
from ai4ai.core.task import GPU_SCALES, Task
from ai4ai.repo.workspace import copy_repo, make_writable
from ai4ai.sandbox.box import Mount

CACHE_ROOT = PROJECT_ROOT / "outputs" / ".cache"  # the harness's data cache (never mounted whole)


def shrink() -> str | None:
    return os.environ.get(SHRINK_ENV) or None


def shrink_env() -> dict[str, str]:
    """What a training sandbox (and every process that builds a task's model) must see so that it
    agrees with the harness on the sizes of the GPU tiers: passed unchanged to proxy and grading runs."""
    s = shrink()
    return {SHRINK_ENV: s} if s else {}


def needs_data(task: Task, scale: str) -> bool:
    """Whether the scale's training splits come from the grader's prepare function (as in data_mounts)."""
    return bool(task.prepare and task.data_env and scale in GPU_SCALES)


def needs_artifacts(task: Task, scale: str) -> bool:
    return task.artifacts is not None and scale in task.artifacts.scales


def cache_key(task: Task) -> str:
    key = tree_sha256(task.grader, UNVERSIONED)[:16]
    return f"{key}-shrunk-{shrink()}" if shrink() else key


def data_dir(task: Task, scale: str, cache_root: Path = CACHE_ROOT) -> Path:
    return Path(cache_root) / "data" / task.name / scale / cache_key(task)


def expected_files(task: Task, scale: str) -> list[str]:
    return [w.format(scale=scale) for w in task.prepare_writes]


def written(expected: str, sums: dict) -> bool:
    """Whether a data.writes entry is among a folder's checksums: a file by its name, a folder
    (`name/`, a `datasets` split) by at least one file under it."""
    if expected.endswith("/"):
        return any(k.startswith(expected) for k in sums)
    return expected in sums


def read_sums(folder: Path) -> dict[str, str]:
    listing = Path(folder) / "SHA256SUMS"
    if not listing.exists():
        return {}
    return {name: digest for digest, name in (ln.split() for ln in listing.read_text().splitlines() if ln.strip())}


def write_sums(folder: Path, sums: dict[str, str]) -> None:
    """folder/SHA256SUMS listing {name: sha256}, sorted by name (the layout read_sums reads)."""
    (Path(folder) / "SHA256SUMS").write_text("".join(f"{d}  {n}\n" for n, d in sorted(sums.items())))


def run_prepare_step(
    argv: list[str], cwd: Path, env: dict, log: Path, what: str, bar: TrainingBar | None = None
) -> None:
    """Run a repo's prepare step, its output into `log` (and `bar`); a failure raises with the log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in proc.stdout:
            f.write(line)
            if bar is not None:
                bar.on_line(line)
        rc = proc.wait()
    if bar is not None:
        bar.close()
    if rc != 0:
        tail = log.read_text().strip().splitlines()[-5:]
        raise RuntimeError(f"{what} exited with {rc} (log {log}):\n  " + "\n  ".join(tail))


def verify(folder: Path, may_be_absent: tuple[str, ...] = ()) -> list[str]:
    """Problems with a cache folder (empty: every file matches its SHA256SUMS). Files in
    `may_be_absent` (validation splits, which data_mounts removes before training) may be missing."""
    folder = Path(folder)
    sums = read_sums(folder)
    if not sums:
        return [f"{folder}: no SHA256SUMS"]
    problems = []
    for name, digest in sorted(sums.items()):
        p = folder / name
        if not p.exists():
            if name not in may_be_absent:
                problems.append(f"{name} is missing")
        elif sha256_file(p) != digest:
            problems.append(f"{name} does not match its sha256")
    return problems


@dataclass(frozen=True)
class CacheState:
    path: Path
    state: str  # complete | partial | absent | damaged
    files: tuple[str, ...]  # listed in its SHA256SUMS (complete or damaged), else expected
    problems: tuple[str, ...] = ()


def cache_state(task: Task, scale: str, cache_root: Path = CACHE_ROOT, check: bool = True) -> CacheState:
    dest = data_dir(task, scale, cache_root)
    if (dest / ".complete").exists():
        problems = verify(dest, _validation_names(task)) if check else []
        return CacheState(dest, "damaged" if problems else "complete", tuple(sorted(read_sums(dest))), tuple(problems))
    partial = dest.with_name(dest.name + ".partial")
    return CacheState(dest, "partial" if partial.exists() else "absent", tuple(expected_files(task, scale)))


def _validation_names(task: Task) -> tuple[str, ...]:
    return tuple(Path(v).name for v in task.validation_files)


class _Heartbeat:
    """A progress line every `every` seconds while a grader function writes into `folder`."""

    def __init__(self, label: str, folder: Path, every: float = 15.0):
        self.label, self.folder, self.every = label, Path(folder), every
        self.t0, self.stop = time.monotonic(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.every):
            size = sum(p.stat().st_size for p in self.folder.glob("*") if p.is_file()) if self.folder.exists() else 0
            say(f"  {self.label}: {time.monotonic() - self.t0:.0f} s, {size / 2**20:.1f} MiB written so far")

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


def _build_cached(dest: Path, label: str, write, may_be_absent: tuple[str, ...] = ()) -> Path:
    """Reuse `dest` when complete and verified; else run `write(folder) -> {name: sha256}` into
    dest.partial, check every file against what it returned, write SHA256SUMS and .complete, and
    rename it into place (so a killed write never passes for a complete one). Processes that need the
    same folder at once (a multirun's gradings) take turns on its lock: one builds, the rest reuse it."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.with_name(dest.name + ".lock")):
        return _build_locked(dest, label, write, may_be_absent)


def _build_locked(dest: Path, label: str, write, may_be_absent: tuple[str, ...]) -> Path:
    if (dest / ".complete").exists():
        problems = verify(dest, may_be_absent)
        if not problems:
            say(f"  {label}: cached in {dest}, {len(read_sums(dest))} files verified")
            return dest
        stale = dest.with_name(f"{dest.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        say(f"  {label}: cache damaged ({'; '.join(problems[:3])}); moved to {stale.name}, rebuilding")
        dest.rename(stale)
    tmp = dest.with_name(dest.name + ".partial")
    if tmp.exists():
        say(f"  {label}: a previous prepare stopped midway; regenerating (same seeds, same bytes)")
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    t0 = time.monotonic()
    with _Heartbeat(label, tmp):
        sums = write(tmp)
    wrong = [n for n, d in sums.items() if sha256_file(tmp / n) != d]
    if wrong:
        raise RuntimeError(f"{label}: files differ from the checksums their writer returned: {wrong}")
    write_sums(tmp, sums)
    (tmp / ".complete").write_text("ok")
    tmp.rename(dest)
    size = sum((dest / n).stat().st_size for n in sums)
    say(f"  {label}: wrote {len(sums)} files ({size / 2**20:.1f} MiB) in {time.monotonic() - t0:.0f} s to {dest}")
    return dest


def materialize_cached(task: Task, scale: str, cache_root: Path = CACHE_ROOT) -> Path | None:
    """Phase 1: the grader's prepare function into the cache (None where the scale needs none)."""
    if not needs_data(task, scale):
        return None
    grader = load_grader(task.name, task.grader)
    fn = getattr(grader, task.prepare)
    dest = _build_cached(
        data_dir(task, scale, cache_root),
        f"{task.name} {scale} data ({task.prepare})",
        lambda d: fn(scale, d),
        _validation_names(task),
    )
    missing = [f for f in expected_files(task, scale) if not written(f, read_sums(dest))]
    if missing:
        raise RuntimeError(f"{task.name}: data.writes lists {missing}, which {task.prepare}() did not write")
    return dest


def data_mounts(task: Task, scale: str, cache_root: Path = CACHE_ROOT) -> tuple[list, dict]:
    """The training split folder of a GPU tier (materialized once, shrink-aware key, checksums verified
    on reuse), mounted read-only at /data, its path in the task's data env var; nothing at ci and
    smoke, whose splits are committed in the repo."""
    dest = materialize_cached(task, scale, cache_root)
    if dest is None:
        return [], {}
    for v in _validation_names(task):  # the validation split never reaches the grader's training
        (dest / v).unlink(missing_ok=True)
    return [Mount(DATA, dest, False)], {task.data_env: DATA}


def grading_mounts(task: Task, scale: str, cache_root: Path = CACHE_ROOT) -> tuple[list, dict]:
    """The data a graded training run (grading, calibration, audit) is served: where the task grades on
    a fresh instance of its source (data.grading), that instance's training split, written once by the
    grader into the cache and read by the meter only; else what every run gets (data_mounts). The
    agent's own proxy runs keep data_mounts: they train on the instance the agent sees."""
    if not task.grading_data:
        return data_mounts(task, scale, cache_root)
    fn = getattr(load_grader(task.name, task.grader), task.grading_data)
    dest = _build_cached(
        Path(cache_root) / "data" / task.name / f"{scale}-graded" / cache_key(task),
        f"{task.name} {scale} graded instance ({task.grading_data})",
        lambda d: fn(scale, d),
    )
    return [Mount(DATA, dest, False)], {task.data_env: DATA}


def _graded_files(task: Task, scale: str) -> list[str]:
    """data.grading_artifacts at `scale`: the repo-relative files of the graded instance's prepared models."""
    return [w.format(scale=scale) for w in task.grading_artifacts]


def committed_graded(task: Task, scale: str) -> Path | None:
    """The graded instance's prepared models as committed beside the hidden grader
    (<grader>/prepared/<scale>/: the files by repo-relative path, and a SHA256SUMS of them), or None
    where none are committed for `scale`. Committed at ci and smoke, so that every CPU grades from the
    same bytes: the repo's prepare step rounds by the host's kernels, and a base model pretrained on
    another host (sft at ci: exact match after the shipped run 0.12 to 0.37 over five bases, 0.035 on
    one CI host) would move the number with the machine. At full the prepare step runs on the device.
    A damaged or incomplete folder is an error, not a reason to regenerate silently."""
    folder = Path(task.grader) / "prepared" / scale
    if not folder.is_dir():
        return None
    listed = read_sums(folder)
    problems = verify(folder) + [
        f"{rel} is not listed in its SHA256SUMS" for rel in _graded_files(task, scale) if rel not in listed
    ]
    if problems:
        raise RuntimeError(
            f"{task.name}: the committed graded models in {folder} are damaged ({'; '.join(problems)}); "
            f"restore them from git (git checkout -- {folder.relative_to(PROJECT_ROOT) if folder.is_relative_to(PROJECT_ROOT) else folder}) "
            f"or remake them with `python tools/commit_graded_artifacts.py {task.name} {scale}`"
        )
    return folder


def graded_artifacts(
    task: Task,
    scale: str,
    device: str = "cpu",
    cache_root: Path = CACHE_ROOT,
    graded: Path | None = None,
    committed: bool = True,
) -> Path | None:
    """The prepared models of the graded instance (data.grading_artifacts), or None where the task has
    none: the repo's own prepare step (data.artifacts.command), run once in a scratch copy of the
    pristine repo whose data files are replaced by the graded instance's files of the same names
    (grading_data's, their data/SHA256SUMS lines too), and the files it made kept in the cache under
    their repo-relative paths. A graded run's training copy holds them in place of the visible
    instance's (training.build_training_copy); the agent's own runs keep the committed ones.
    `graded`: the graded instance's files (grading_mounts' folder), when the caller has them.
    Where the grader commits them for `scale` (committed_graded), those are used instead;
    `committed=False` makes them anyway (tools/commit_graded_artifacts.py)."""
    # with your own model the derived task keeps the artifacts step only where its output is used beside
    # your model (distillation's teacher, which depends on the instance); elsewhere yours replaces it
    if not task.grading_artifacts or task.artifacts is None:
        return None
    if committed and (kept := committed_graded(task, scale)) is not None:
        say(
            f"  {task.name} {scale} graded instance's prepared models: committed in {kept}, "
            f"{len(read_sums(kept))} files verified"
        )
        return kept
    wanted = _graded_files(task, scale)
    if graded is None:
        graded = grading_mounts(task, scale, cache_root)[0][0].host
    key = f"{cache_key(task)}-{tree_sha256(task.repo, UNVERSIONED)[:16]}"
    if device == "cpu":  # a model trained on the CPU rounds by its kernels' instruction set (provenance.cpu_capability)
        key += f"-{cpu_capability()}"

    def make(out: Path) -> dict:
        scratch = Path(tempfile.mkdtemp(prefix=f"{task.name}-graded-", dir=out.parent))
        try:
            repo = copy_repo(task, scratch / "repo")
            make_writable(repo)
            data = repo / Path(task.data_checksums).parent
            listing = read_sums(data)
            for name, digest in read_sums(graded).items():
                if (data / name).exists():
                    shutil.copyfile(graded / name, data / name)
                    listing[name] = digest
            write_sums(data, listing)
            env = {k: v for k, v in os.environ.items() if k != task.data_env}
            run_prepare_step(
                artifact_command(task, scale, device, graded),
                repo,
                dict(env, PYTHONDONTWRITEBYTECODE="1"),
                Path(cache_root) / "prepare" / f"{task.name}_{scale}_graded.log",
                f"{task.name}: the repo's prepare step on the graded instance",
            )
            sums = {}
            for rel in wanted:
                if not (repo / rel).is_file():
                    raise RuntimeError(
                        f"{task.name}: data.grading_artifacts lists {rel}, which `{task.artifacts.command}` "
                        "did not write"
                    )
                (out / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(repo / rel, out / rel)
                sums[rel] = sha256_file(out / rel)
            return sums
        finally:
            make_writable(scratch)
            shutil.rmtree(scratch, ignore_errors=True)

    return _build_cached(
        Path(cache_root) / "artifacts" / task.name / f"{scale}-graded" / key,
        f"{task.name} {scale} graded instance's prepared models",
        make,
    )


def artifact_state(task: Task, scale: str) -> dict[str, str]:
    """Each file the repo's prepare step writes at `scale`: ok | missing | checksum mismatch | unlisted."""
    if not needs_artifacts(task, scale):
        return {}
    out = {}
    for rel in task.artifacts.files(scale):
        p = task.repo / rel
        listed = read_sums(p.parent).get(p.name)
        out[rel] = (
            "missing"
            if not p.exists()
            else "unlisted"
            if listed is None
            else "ok"
            if sha256_file(p) == listed
            else "checksum mismatch"
        )
    return out


def readable(task: Task) -> None:
    """Make the prepared artifacts (and their SHA256SUMS) readable by everyone: training runs as an
    unprivileged user in the sandbox, and safetensors (0.8) writes its files with mode 0600, so a
    prepared model would otherwise be unreadable there (PermissionError in every training run)."""
    for rel in task.artifacts.all_files():
        for p in (task.repo / rel, (task.repo / rel).parent / "SHA256SUMS"):
            if p.is_file() and not p.is_symlink() and (p.stat().st_mode & 0o444) != 0o444:
                p.chmod(p.stat().st_mode | 0o444)


def artifact_command(task: Task, scale: str, device: str, data: Path | None) -> list[str]:
    import shlex

    argv = shlex.split(task.artifacts.command.format(scale=scale, device=device, data=str(data or "")))
    if argv and argv[0] in ("python", "python3"):
        argv[0] = python_executable()
    return argv


def prepare_artifacts(
    task: Task, scale: str, device: str, data: Path | None, progress: bool = True, cache_root: Path = CACHE_ROOT
) -> dict[str, str]:
    """Phase 2: run the repo's prepare step unless every artifact it writes is there and checks out."""
    if not needs_artifacts(task, scale):
        return {}
    state = artifact_state(task, scale)
    if all(v == "ok" for v in state.values()):
        readable(task)
        say(f"  {task.name} {scale} artifacts: {', '.join(state)} present, checksums match")
        return state
    if task.artifacts.data_function:  # what the command reads, written by the grader (never committed)
        fn = getattr(load_grader(task.name, task.grader), task.artifacts.data_function)
        data = _build_cached(
            Path(cache_root) / "data" / task.name / task.artifacts.data_function / cache_key(task),
            f"{task.name} {task.artifacts.data_function}",
            fn,
        )
    argv = artifact_command(task, scale, device, data)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    if data is not None and task.data_env:
        env[task.data_env] = str(data)
    say(
        f"  {task.name} {scale} artifacts: {', '.join(f'{k} ({v})' for k, v in state.items())}; "
        f"running `{' '.join(argv[1:])}` in {task.repo}"
    )
    t0 = time.monotonic()
    run_prepare_step(
        argv,
        task.repo,
        env,
        cache_root / "prepare" / f"{task.name}_{scale}.log",
        f"{task.name}: the repo's prepare step",
        TrainingBar(f"  {task.name} prepare", progress),
    )
    readable(task)
    state = artifact_state(task, scale)
    bad = {k: v for k, v in state.items() if v != "ok"}
    if bad:
        raise RuntimeError(f"{task.name}: after the prepare step, {bad}")
    say(
        f"  {task.name} {scale} artifacts: {', '.join(state)} written and checked in {time.monotonic() - t0:.0f} s "
        f"(inside {task.repo.relative_to(PROJECT_ROOT)}: part of the benchmark version, so calibrate after)"
    )
    return state


def prepare(task: Task, scale: str, device: str, progress: bool = True, cache_root: Path = CACHE_ROOT) -> dict:
    """Both phases (and, at quick and full, the graded instance's prepared models); returns {"data": folder or
    None, "artifacts": {file: state}, "graded": folder or None}."""
    t0 = time.monotonic()
    # at the GPU tiers, the graded instance's prepared models too (on the device), so the first grading does
    # not wait for them; at ci and smoke the first grading makes them (about 90 s on one CPU thread)
    graded = scale in GPU_SCALES and bool(task.grading_artifacts) and task.artifacts is not None
    todo = [
        p
        for p, need in (
            ("data", needs_data(task, scale)),
            ("artifacts", needs_artifacts(task, scale)),
            ("graded instance", graded),
        )
        if need
    ]
    if not todo:
        say(f"{task.name} at {scale}: nothing to prepare (its data and prepared models are committed)")
        return {"data": None, "artifacts": {}, "graded": None}
    say(f"preparing {task.name} at {scale}{f' (shrunk: {shrink()})' if shrink() else ''}: {' + '.join(todo)}")
    data = None
    if "data" in todo:
        say(f"[{todo.index('data') + 1}/{len(todo)}] data")
        data = materialize_cached(task, scale, cache_root)
    arts = {}
    if "artifacts" in todo:
        say(f"[{todo.index('artifacts') + 1}/{len(todo)}] artifacts")
        arts = prepare_artifacts(task, scale, device, data, progress, cache_root)
    made = None
    if "graded instance" in todo:
        say(f"[{todo.index('graded instance') + 1}/{len(todo)}] graded instance (data.grading_artifacts)")
        made = graded_artifacts(task, scale, device, cache_root)
    say(f"{task.name} at {scale} prepared in {time.monotonic() - t0:.0f} s")
    return {"data": data, "artifacts": arts, "graded": made}
