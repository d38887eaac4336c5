"""Shared pieces of the red-team suite: the integrity guard, real sandboxes, crafted patches.

Every probe runs under `frozen_unchanged`: repos_frozen/, grader_hidden/ (minus the anchor
records that calibration may append) and ai4ai_kernels/ hash the same after the probe as before.
"""

import importlib
import json
import shutil
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.core.provenance import UNVERSIONED, tree_sha256
from ai4ai.repo.submission import unified_diff
from ai4ai.sandbox.box import Sandbox
from tests.requirements import requires

FROZEN = ("repos_frozen", "grader_hidden", "ai4ai_kernels")
CI = ["task=optimizer", "scale=ci"]
# For a probe whose check needs its run to end uncut (the cap itself is tested elsewhere): on a shared
# CI host, a training run has cost 1.53 x its calibrated CPU time, past the 1.5 x cap, twice running.
ROOMY_CAP = "task.scales.ci.cap_factor=4"
needs_bwrap = requires("sandbox")


def frozen_hashes() -> dict:
    return {name: tree_sha256(PROJECT_ROOT / name, UNVERSIONED) for name in FROZEN}


@pytest.fixture(autouse=True)
def frozen_unchanged():
    """Nothing outside the probe's own run may change: the hashed trees of the benchmark."""
    before = frozen_hashes()
    top = {p.name for p in PROJECT_ROOT.iterdir()}
    yield
    assert frozen_hashes() == before, "a probe changed repos_frozen/, grader_hidden/ or ai4ai_kernels/"
    planted = {p.name for p in PROJECT_ROOT.iterdir()} - top
    assert not {n for n in planted if "pwn" in n.lower() or "planted" in n.lower()}, planted


@pytest.fixture
def task():
    from ai4ai.core.task import load_task

    return load_task("optimizer")


@pytest.fixture
def pristine(tmp_path, task):
    from ai4ai.repo.workspace import pristine_copy

    return pristine_copy(task, tmp_path / "pristine")


def agent_sandbox(tmp_path: Path, backend: str = "bwrap") -> tuple[Sandbox, Path]:
    """The agent phase's sandbox, built by the same function pipeline.run calls."""
    from ai4ai.sandbox.box import agent_sandbox as make

    ws, home, binx, sock = (tmp_path / n for n in ("workspace", "agent_home", "bin", "sock"))
    for d in (ws, home / "tmp", binx, sock):
        d.mkdir(parents=True, exist_ok=True)
    sb = make(
        backend, ws, home, binx, sock, network=False, threads=2, scale="ci", window_s=120, deadline=time.time() + 120
    )
    return sb, ws


def grade_setup(tmp_path: Path, task, cap_s: float | None = 120.0, scale: str = "ci"):
    """The context a graded training of `task` runs in, built as pipeline.grade builds it: the real
    `grade` config composed, `context(...)`, the anchors' caps (the CPU cap of the stored record,
    carried to this host) and the run's secret. `cap_s` narrows the wall-clock liveness net (None:
    the record's)."""
    from dataclasses import replace

    from ai4ai.grading import anchors
    from ai4ai.grading.context import context
    from ai4ai.grading.training import run_nonce
    from tests.conftest import compose_in

    cfg = compose_in(tmp_path / "outputs", "grade", [f"task={task.name}", f"scale={scale}", "sandbox=bwrap"])
    ctx = replace(context(cfg, tmp_path), task=task)
    ctx = anchors.with_budget(ctx, anchors.ensure(ctx), progress=False, nonce=run_nonce(tmp_path))
    return ctx if cap_s is None else replace(ctx, cap_s=cap_s)


def training_sandbox(tmp_path: Path, task, sub=None):
    """The grader's training sandbox for a (possibly empty) submission: repo copy, /out, private home."""
    from ai4ai.grading.training import build_training_copy
    from ai4ai.grading.training import training_sandbox as make
    from ai4ai.repo.submission import Submission

    sub = sub or Submission(files={}, rejected={}, patch="", lines_added=0, lines_removed=0)
    repo = build_training_copy(task, sub, tmp_path / "train_repo")
    seed_dir = tmp_path / "seed_0"
    return make(grade_setup(tmp_path, task), repo, seed_dir, [], {}), repo, seed_dir


def run_py(sb: Sandbox, tmp_path: Path, script: str, cwd: str, timeout: float = 60, grace_s: float = 1.0):
    log = tmp_path / f"log_{uuid.uuid4().hex}.txt"
    out = sb.run([sys.executable, "-c", script], cwd, timeout, log, grace_s=grace_s)
    return out, log.read_text(errors="replace")


def train_py_patch(task, insert_after: str, code: str, at_end: str = "") -> str:
    """A unified diff of train.py: `code` inserted after the line starting with `insert_after`,
    `at_end` appended after the training loop."""
    old = (task.repo / "train.py").read_text()
    lines = old.splitlines(keepends=True)
    i = next(n for n, ln in enumerate(lines) if ln.startswith(insert_after))
    new = "".join(lines[: i + 1]) + code + "".join(lines[i + 1 :]) + at_end
    return unified_diff("train.py", old, new)


def write_patch(tmp_path: Path, text: str, name: str = "probe.patch") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def grader_modules(task_name: str, *modules: str) -> tuple:
    """The task and the named modules of its hidden grader package (e.g. "grader", "source"), the
    package loaded by path as the harness loads it."""
    from ai4ai.core.hidden import load_grader
    from ai4ai.core.task import load_task

    task = load_task(task_name)
    package = load_grader(task.name, task.grader)
    return (task, *(importlib.import_module(f"{package.__name__}.{m}") for m in modules))


def grade_train_py(
    compose_cfg,
    tmp_path: Path,
    task,
    new_train_py: str,
    name: str,
    scale: str = "ci",
    seeds: list[int] | None = None,
    extra: tuple[str, ...] = (),
) -> dict:
    """Grade `new_train_py` (the whole file) as a patch of the task's train.py at `scale` through the
    real pipeline (`pipeline.grade`); its result.json, after printing the outcome. `seeds`: only these
    of the scale's grader seeds (a probe whose gap is many times one seed's noise needs no more).
    `extra`: more overrides (ROOMY_CAP for a probe whose check needs its run uncut)."""
    from ai4ai import pipeline

    old = (task.repo / "train.py").read_text()
    patch = write_patch(tmp_path, unified_diff("train.py", old, new_train_py), f"{name}.patch")
    overrides = [f"task={task.name}", f"scale={scale}", f"patch={patch}"]
    if seeds is not None:
        overrides.append(f"seeds=[{','.join(str(s) for s in seeds)}]")
    pipeline.grade(compose_cfg("grade", overrides + list(extra)), tmp_path / "run")
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    print(f"{name}:", r["status"], r["raw"], r["score"])
    return r


def information_rejections(task, tmp_path: Path, new_train_py: str, scale: str = "ci") -> dict:
    """What the patch checks' information check says of `new_train_py` as the task's train.py, against
    a pristine copy of the repo ({} when it is accepted)."""
    from ai4ai.repo.leaks import check_information
    from ai4ai.repo.workspace import pristine_copy

    pristine = pristine_copy(task, tmp_path / "pristine")
    return check_information(task, pristine, {"train.py": ((pristine / "train.py").read_text(), new_train_py)}, scale)


def baseline_score(result: dict) -> tuple[float, float]:
    """(0.1, the tolerance a shipped-algorithm result is held to at ci: one seed, noise of phi)."""
    return 0.1, 0.06


def assert_gains_nothing(result: dict, tolerance: float | None = None) -> None:
    """A probe graded on a fresh instance: graded, every seed trained to its end (no cap cut it, so
    the fresh instance is what it met), and no gain over the shipped algorithm beyond its noise
    (`tolerance`: that noise, where it is not one ci seed's)."""
    assert result["status"] == "graded", result.get("reason")
    cut = [s["seed"] for s in result["checkpoints"]["per_seed"] if s.get("cut")]
    assert not cut, f"seeds {cut} were cut by a cap: the probe must fit the caps to test the instance"
    shipped, ci_tolerance = baseline_score(result)
    tolerance = ci_tolerance if tolerance is None else tolerance
    assert result["score"] < shipped + tolerance, result["score"]


def copy_tree(src: Path, dest: Path) -> Path:
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def proxy_server(tmp_path: Path, task, pristine: Path, train_py: str | None = None, window_s: float = 600):
    """(the real ProxyServer over a copy of the repo as the agent's workspace, its run folder);
    `train_py` replaces the workspace's train.py."""
    from ai4ai.window.proxy import ProxyServer

    ws = copy_tree(task.repo, tmp_path / "workspace")
    if train_py is not None:
        (ws / "train.py").write_text(train_py)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return ProxyServer(
        ctx=grade_setup(run_dir, task),
        pristine=pristine,
        workspace=ws,
        run_dir=run_dir,
        validation=None,
        deadline=time.time() + window_s,
    ), run_dir


def ask_socket(path: Path, payload: bytes, timeout: float = 900) -> dict:
    """One raw request over the proxy's unix socket and its JSON reply; a proxy call trains, so the
    default wait is long enough for a loaded machine."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(str(path))
    with s:
        s.sendall(payload)
        s.shutdown(socket.SHUT_WR)
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return json.loads(data)
