"""The evaluation worker started ahead (evaluation.Worker): it prepares while a seed trains and is
given its candidates afterwards. Invariant: what it judges is exactly the spec it was started with
plus the candidates the harness snapshotted; any other field that differs (another repo, grader,
scale, mode, device) is refused on both sides of the pipe, and a worker never given candidates
leaves no process behind, nor does one whose harness was killed. Checked on the real worker
process with real checkpoints."""

import os
from dataclasses import replace

import pytest
from safetensors.torch import save_file

from ai4ai.grading.evaluation import Worker, WorkerError, run_worker
from ai4ai.grading.seeds import eval_spec

from .conftest import grade_setup
from .test_checkpoints import _params


def _ckpts(tmp_path, task, n=2):
    p = _params(task)
    d = tmp_path / "ckpts"
    d.mkdir(exist_ok=True)
    paths = []
    for step in range(1, n + 1):
        paths.append(d / f"ckpt_{step:08d}.safetensors")
        save_file({k: v.contiguous() for k, v in p.items()}, str(paths[-1]))
    return paths


def test_a_worker_started_ahead_judges_as_a_fresh_one(tmp_path, task, pristine):
    paths = _ckpts(tmp_path, task)
    spec = eval_spec(grade_setup(tmp_path, task), pristine, paths)
    ahead = Worker(replace(spec, candidates=[]), tmp_path / "ahead")
    fresh = run_worker(spec, tmp_path / "fresh")
    got = run_worker(spec, tmp_path / "ahead", worker=ahead)
    assert ahead.proc.returncode == 0
    for r in (fresh, got):
        for c in r["candidates"]:
            c.pop("eval_s", None)
    assert got == fresh and got["chosen"] in [p.name for p in paths]


FIELDS = {
    "repo": lambda s, t: str(t / "elsewhere"),
    "grader": lambda s, t: str(t / "other_grader"),
    "scale": lambda s, t: "smoke" if s.scale != "smoke" else "ci",
    "mode": lambda s, t: "proxy",
    "threads": lambda s, t: s.threads + 1,
    "device": lambda s, t: "cuda",
    "direction": lambda s, t: "max" if s.direction == "min" else "min",
}


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_a_spec_that_differs_but_in_its_candidates_is_refused(tmp_path, task, pristine, field):
    paths = _ckpts(tmp_path, task, n=1)
    spec = eval_spec(grade_setup(tmp_path, task), pristine, paths)
    ahead = Worker(replace(spec, candidates=[]), tmp_path / "ahead")
    other = replace(spec, **{field: FIELDS[field](spec, tmp_path)})
    with pytest.raises(ValueError, match="differs"):
        run_worker(other, tmp_path / "ahead", worker=ahead)
    assert ahead.proc.poll() is not None  # refused and ended, not left waiting


def test_the_worker_side_refuses_a_spec_file_that_differs(tmp_path, task, pristine):
    """The worker checks what it reads as well: a spec file swapped between the parent's check and the
    worker's read (another grader) is refused there, and the seed is a harness error, not a verdict."""
    paths = _ckpts(tmp_path, task, n=1)
    spec = eval_spec(grade_setup(tmp_path, task), pristine, paths)
    w = Worker(replace(spec, candidates=[]), tmp_path / "w")
    swapped = tmp_path / "swapped.json"
    import json

    swapped.write_text(json.dumps(replace(spec, grader=str(tmp_path)).__dict__))
    w.proc.stdin.write(f"{swapped}\t{tmp_path / 'out.json'}\n".encode())
    w.proc.stdin.close()
    assert w.proc.wait(timeout=300) != 0
    w.close()
    assert "differs" in (tmp_path / "w" / "eval.log").read_text()
    assert not (tmp_path / "out.json").exists()


def test_a_worker_never_given_candidates_leaves_no_process(tmp_path, task, pristine):
    spec = eval_spec(grade_setup(tmp_path, task), pristine, [])
    workers = [Worker(spec, tmp_path / f"w{i}") for i in range(3)]
    for w in workers:
        w.close()
    for w in workers:
        assert w.proc.poll() is not None
        with pytest.raises(ProcessLookupError):
            os.kill(w.proc.pid, 0)


def test_a_worker_that_fails_while_preparing_is_a_harness_error(tmp_path, task, pristine):
    paths = _ckpts(tmp_path, task, n=1)
    spec = replace(eval_spec(grade_setup(tmp_path, task), pristine, paths), model="no_such_module:build")
    w = Worker(replace(spec, candidates=[]), tmp_path / "w")
    w.proc.wait(timeout=300)  # it has ended before its candidates come
    with pytest.raises(WorkerError, match="exit 1") as e:
        run_worker(spec, tmp_path / "w", worker=w)
    assert "no_such_module" in e.value.detail


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (a reparented child may wait unreaped)."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads process states from /proc")
def test_a_worker_ends_with_the_harness_that_started_it(tmp_path, task, pristine):
    """A harness killed while its worker judges (SIGKILL: nothing of it runs) leaves no worker
    behind: before, the worker went on judging every candidate and wrote its verdict for nobody."""
    import signal
    import time

    paths = _ckpts(tmp_path, task, n=40)  # enough candidates to judge for many seconds
    spec = eval_spec(grade_setup(tmp_path, task), pristine, paths)
    wdir, pid_file = tmp_path / "w", tmp_path / "worker.pid"
    harness = os.fork()
    if harness == 0:  # the harness: starts the worker, gives it its candidates, waits for the verdict
        try:
            w = Worker(replace(spec, candidates=[]), wdir)
            pid_file.write_text(str(w.proc.pid))
            w.result(spec)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 300
    while not ((wdir / "eval_spec.json").exists() and pid_file.exists()) and time.monotonic() < deadline:
        time.sleep(0.05)
    if not pid_file.exists():
        os.kill(harness, signal.SIGKILL)
        os.waitpid(harness, 0)
        pytest.fail("the forked harness never started its worker")
    worker = int(pid_file.read_text())
    time.sleep(1.0)  # it has read its spec and is judging
    assert _running(worker)
    os.kill(harness, signal.SIGKILL)
    os.waitpid(harness, 0)
    gone_by = time.monotonic() + 10
    while _running(worker) and time.monotonic() < gone_by:
        time.sleep(0.05)
    still = _running(worker)
    if still:
        os.kill(worker, signal.SIGKILL)
    assert not still, "the evaluation worker outlived the harness that started it"
    assert not (wdir / "eval_result.json").exists()
