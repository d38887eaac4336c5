"""Issue 39, part 1: the meter served more than it charged.

A served method's arguments reached the repo's class unchecked, and the classes charged
`len(index)` while returning `rows[index]`. At ci, before the fix (the real meter server of each
task, asked from this process as the training sandbox asks it):

    optimizer         get(zeros(1, N))       1 charged, 2,048 sequences returned (4,096 with N = 4,096)
    sft               get(zeros(1, N))       1 charged, 4,096 returned
    reward_model      get(zeros(1, N))       1 charged, 1,024 returned
    pruning           get(zeros(1, N))       1 charged, 256 returned (budget 32)
    graph_diffusion   get(zeros(1, N))       1 charged, as many as asked
    unlearning        get_forget(zeros(1, N)) 1 charged, 6,000 facts (budget 2,048)
    agentic_rl        sample_levels(-k)      the budget refunded: remaining above the budget

(the figures of this file's before run are in the commit that added it). Now every served method
has a declared signature the server checks before the repo's method runs, and the server counts
what it returns, in the budget's unit, on the wire: a request whose reply would go past the budget
is refused, and the count never goes down.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ai4ai.core.task import load_task
from ai4ai.repo.meter import read_report, serving
from ai4ai.sandbox import meter_wire

from .conftest import assert_gains_nothing, grade_train_py, needs_bwrap

ROW_TASKS = {  # task: (class, methods that serve rows by index)
    "optimizer": ("data.TrainingSplit", ["get"]),
    "sft": ("data.TrainingSplit", ["get"]),
    "reward_model": ("data.PreferencePairs", ["get"]),
    "pruning": ("data.CalibrationSplit", ["get"]),
    "graph_diffusion": ("data.TrainingGraphs", ["get"]),
    "dpo": ("data.PairSplit", ["get"]),
    "distillation": ("data.TrainingSplit", ["get"]),
    "unlearning": ("data.UnlearningData", ["get_forget", "get_retain"]),
}
REPO_MODULES = ("data", "env", "config", "teacher", "model", "reward", "levels", "tasks", "checkpoint")


def _forget_repo_modules() -> None:
    for m in REPO_MODULES:
        sys.modules.pop(m, None)


@contextlib.contextmanager
def metered(tmp_path: Path, name: str, seed: int = 5):
    """The task's real meter server at ci; yields (connection, report path). The client is this
    process, with the repo's modules importable (its value classes, its exceptions)."""
    task = load_task(name)
    report = tmp_path / f"{name}-meter.json"
    with serving(task, "ci", seed, "cpu", tmp_path / f"{name}-meter.log", report) as served:
        sock = served.mounts[0].host / "meter.sock"
        old_env = os.environ.get(meter_wire.ENV)
        os.environ[meter_wire.ENV] = str(sock)
        sys.path.insert(0, str(task.repo))
        sys.modules["ai4ai_meter"] = meter_wire
        _forget_repo_modules()
        meter_wire._Connection._conn = None
        try:
            yield meter_wire._Connection.get(), report
        finally:
            meter_wire._Connection._conn = None
            _forget_repo_modules()
            sys.modules.pop("ai4ai_meter", None)
            sys.path.remove(str(task.repo))
            if old_env is None:
                os.environ.pop(meter_wire.ENV, None)
            else:
                os.environ[meter_wire.ENV] = old_env


def new(conn, cls: str, *args):
    return conn.call({"op": "new", "cls": cls}, args)


def server_pid(conn) -> int:
    cred = conn.sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", cred)[0]


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def arrays_of(value) -> list:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return [value]
    if isinstance(value, (tuple, list)):
        return [a for v in value for a in arrays_of(v)]
    return []


def charged(obj) -> int:
    """What the served object counts against its budget (the class's own figure)."""
    for a in ("served", "used"):
        try:
            return int(getattr(obj, a))
        except AttributeError:
            continue
    raise AssertionError("no count on the served object")


def row_size(obj, method: str) -> int:
    """Elements of one served row (of the first returned array), from one legitimate request."""
    return arrays_of(getattr(obj, method)(torch.tensor([0])))[0].numel()


# Index shapes a client can send: each is a request for one row's charge (or a few) that indexes many.
def index_attacks(n: int) -> dict:
    return {
        "2-D (1, N)": torch.zeros((1, n), dtype=torch.int64),
        "2-D (2, N/2)": torch.arange(n).reshape(2, n // 2),
        "nested list [[...]]": [list(range(n))],
        "numpy (1, N)": np.zeros((1, n), dtype=np.int64),
        "3-D (1, 1, N)": torch.zeros((1, 1, n), dtype=torch.int64),
    }


@pytest.mark.parametrize("name", sorted(ROW_TASKS))
def test_an_index_of_another_shape_is_refused_not_served(tmp_path, name):
    cls, methods = ROW_TASKS[name]
    over = {}
    with metered(tmp_path, name) as (conn, report):
        obj = new(conn, cls, "ci")
        budget = int(obj.budget)
        for method in methods:
            width = row_size(obj, method)
            size = {"get_forget": "n_forget", "get_retain": "n_retain"}.get(method)
            n = min(4096, int(getattr(obj, size)) if size else len(obj)) // 2 * 2
            for label, idx in index_attacks(n).items():
                before = charged(obj)
                try:
                    got = getattr(obj, method)(idx)
                except Exception:  # refused (by the signature, the budget, or the repo's own indexing)
                    continue
                rows = arrays_of(got)[0].numel() // width
                cost = charged(obj) - before
                if rows > cost:
                    over[f"{method} {label}"] = f"{cost} charged, {rows} returned (budget {budget})"
        final = charged(obj)
    wire = read_report(report)[cls]
    print(name, over)
    assert not over, f"{name}: served more than charged: {over}"
    assert wire["served"] <= wire["budget"] and wire["served"] == final, wire


@pytest.mark.parametrize("name", ["optimizer", "unlearning"])
def test_a_huge_index_is_refused_before_the_meter_allocates(tmp_path, name):
    cls, methods = ROW_TASKS[name]
    with metered(tmp_path, name) as (conn, report):
        obj = new(conn, cls, "ci")
        pid = server_pid(conn)
        base = peak_rss_mib(pid)
        idx = torch.zeros((1, 1 << 21), dtype=torch.int64)  # 16 MiB asked; the reply would be GiBs
        t0 = time.monotonic()
        with pytest.raises(Exception) as e:
            getattr(obj, methods[0])(idx)
        peak = peak_rss_mib(pid)
        print(
            f"{name}: huge index: {type(e.value).__name__}: {str(e.value)[:200]}; peak RSS {base:.0f} -> {peak:.0f} MiB"
        )
        assert peak - base < 200, (base, peak)
        assert time.monotonic() - t0 < 30
        assert charged(obj) == 0
    assert read_report(report)[cls]["served"] == 0


def test_a_negative_count_refunds_nothing(tmp_path):
    with metered(tmp_path, "agentic_rl") as (conn, report):
        env = new(conn, "env.TrainingEnv", "ci", 5)
        budget = int(env.budget)
        env.sample_levels(4)
        before = int(env.served)
        for bad in (-1000, -1, 0.5, 2.5, True, np.int64(-3), torch.tensor(-3), [4], "4"):
            with contextlib.suppress(Exception):
                env.sample_levels(bad)
            now = int(env.served)
            assert now >= before, f"sample_levels({bad!r}) refunded {before - now} steps (budget {budget})"
            assert int(env.remaining) <= budget - before
            before = now
    wire = read_report(report)["env.TrainingEnv"]
    assert 0 <= wire["served"] <= wire["budget"]


def test_steps_on_played_levels_are_counted_per_env_per_step(tmp_path):
    """The shipped use, counted the same on the wire as by the class: each sampled level prepays its
    episode, its steps spend the prepaid ones, an early end gives the rest back; a level played but
    not sampled costs its steps; a level sampled once and reset twice is paid once."""
    with metered(tmp_path, "agentic_rl") as (conn, report):
        env = new(conn, "env.TrainingEnv", "ci", 5)
        max_steps = int(env.scale.max_steps)
        levels = env.sample_levels(8)
        assert int(env.served) == 8 * max_steps
        batch = env.reset(levels)
        again = env.reset(levels)  # no prepaid credit left for these copies
        n = len(batch)
        steps = 0
        for _ in range(max_steps):
            done = np.asarray(batch.done)
            if done.all():
                break
            batch.step(torch.randint(0, 4, (n,)))
            steps += int((~done).sum())
        assert bool(np.asarray(batch.done).all())
        assert int(env.served) == steps, (int(env.served), steps)
        for bad in (
            torch.zeros(n + 1, dtype=torch.int64),
            torch.full((n,), -1),
            torch.full((n,), 1.5),
            torch.zeros((1, n), dtype=torch.int64),
            [0] * n,
        ):
            with contextlib.suppress(Exception):
                again.step(bad)
        assert int(env.served) == steps
        again.step(torch.zeros(n, dtype=torch.int64))  # unpaid: 8 steps
        assert int(env.served) == steps + n
    wire = read_report(report)["env.TrainingEnv"]
    assert wire["served"] == steps + n and wire["class"]["served"] == steps + n, wire


def test_the_shipped_calls_are_served_and_counted_as_the_class_counts(tmp_path):
    """distillation's train.py: every prompt once, then the teacher's completions in chunks of 1,024;
    and diffusion_rl's judge on a batch: the wire counts what the class counts, to the token."""
    with metered(tmp_path, "distillation") as (conn, report):
        split, teacher = new(conn, "data.TrainingSplit", "ci"), new(conn, "teacher.Teacher", "ci", "cpu")
        prompts = split.get(torch.arange(len(split)))
        comp = torch.cat([teacher.generate(prompts[i : i + 1024]) for i in range(0, len(prompts), 1024)])
        logits = teacher.logits(torch.cat([prompts[:8], comp[:8]], 1))
        assert logits.shape[0] == 8
        used = int(teacher.used)
    r = read_report(report)
    assert r["data.TrainingSplit"]["served"] == r["data.TrainingSplit"]["class"]["served"] == len(prompts)
    assert r["teacher.Teacher"]["served"] == r["teacher.Teacher"]["class"]["used"] == used > 0
    with metered(tmp_path, "diffusion_rl") as (conn, report):
        judge = new(conn, "env.Judge", "ci")
        judge.rewards(torch.rand(32, 64), torch.randint(0, 10, (32,)))
        r, g = judge.rewards_and_grads(torch.rand(16, 64), torch.randint(0, 10, (16,)))
        assert r.shape == (16,) and g.shape == (16, 64)
    r = read_report(report)["env.Judge"]
    assert r["served"] == r["class"]["used"] == 48


@pytest.mark.slow
@needs_bwrap
def test_a_wrong_shaped_index_in_training_gains_nothing(compose_cfg, tmp_path):
    """The filed attack, through the real pipeline at ci: unlearning's train.py asks for every forget
    fact as one (1, N) index (before: 6,000 facts for a charge of 2 against a budget of 2,048,
    score 0.356 against the shipped 0.1). Now the meter refuses it; the run falls back to the
    shipped loop and gains nothing (measured on branch i39-meter: refused, 1,600 facts served, score 0.107; 131 s)."""
    task = load_task("unlearning")
    old = (task.repo / "train.py").read_text()
    loop = "perm = torch.randperm(data.n_forget, generator=order)\nfor step"
    assert loop in old
    attack = (
        "try:\n"
        "    every = data.get_forget(torch.arange(data.n_forget)[None])[0]\n"
        "    print(f'ATTACK got {len(every)} facts, charged {data.served}', flush=True)\n"
        "except Exception as e:\n"
        "    print('ATTACK refused', type(e).__name__, str(e)[:300], flush=True)\n"
    )
    new = old.replace(loop, attack + loop)
    r = grade_train_py(compose_cfg, tmp_path, task, new, "wrong_shape")
    log = (tmp_path / "run" / "grade" / "seed_0" / "train.log").read_text()
    meter = read_report(tmp_path / "run" / "grade" / "seed_0" / "meter.json")["data.UnlearningData"]
    print("meter", meter, "score", r["score"])
    assert "ATTACK refused" in log and "ATTACK got" not in log, log[-2000:]
    assert meter["served"] <= meter["budget"] and meter["served"] == meter["class"]["served"]
    assert_gains_nothing(r)
