"""The meter's wire and server (ai4ai/sandbox/meter_wire.py), against a real server process and a toy repo."""

import json
import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from ai4ai.core.task import TaskError, load_task, parse_meter
from ai4ai.repo.meter import held_files, read_report, remove_held, serving
from ai4ai.sandbox import meter_wire

TOY = """
import dataclasses
import numpy as np
import torch


class BudgetExhausted(RuntimeError):
    pass


@dataclasses.dataclass
class Batch:
    x: np.ndarray
    n: int


class Episode:
    def __init__(self, k):
        self.k = k
        self.t = 0

    def step(self, a):
        self.t += 1
        return torch.full((2,), float(self.k + a)), self.t


class Split:
    def __init__(self, scale, seed):
        self.secret = torch.arange(100).reshape(50, 2)
        self.budget, self.served, self.scale, self.seed = 10, 0, scale, seed

    def __len__(self):
        return 50

    @property
    def remaining(self):
        return self.budget - self.served

    def get(self, idx):
        if self.served + len(idx) > self.budget:
            raise BudgetExhausted(f"budget of {self.budget} is spent")
        self.served += len(idx)
        return self.secret[idx]

    def batch(self, n):
        return Batch(np.arange(n, dtype=np.int64), n)

    def total(self, b):
        return int(b.x.sum()) + b.n

    def episode(self, k):
        return Episode(k)

    def describe(self):
        return {"scale": self.scale, "pair": (1, 2.5), "none": None, "flags": [True, False]}
"""

SPEC = {
    "classes": {
        "toy.Split": {
            "construct": ["scale", "seed"],
            "unit": "items",
            "budget": "@budget",
            "exhausted": "toy.BudgetExhausted",
            "methods": {
                "get": {
                    "args": {"idx": {"tensor": ["int64"], "ndim": 1, "range": [0, "@len"]}},
                    "count": {"rows": "idx"},
                },
                "batch": {"args": {"n": {"int": [0, 100]}}, "count": "free"},
                "total": {"args": {"b": {"value": "toy.Batch"}}, "count": "free"},
                "episode": {"args": {"k": {"int": [0, None]}}, "count": "free"},
                "describe": {"args": {}, "count": "free"},
            },
            "attributes": ["budget", "served", "remaining"],
            "len": True,
        },
        "toy.Episode": {
            "methods": {"step": {"args": {"a": {"int": [0, 9]}}, "count": "free"}},
            "attributes": ["t"],
            "len": False,
        },
    },
    "values": ["toy.Batch"],
}
PINS = {"scale": "ci", "seed": 7, "device": "cpu"}


@pytest.fixture
def toy(tmp_path, monkeypatch):
    """A real meter server process serving the toy repo; the test process is its client."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "toy.py").write_text(TOY)
    sock = Path(f"/tmp/ai4ai-test-meter-{os.getpid()}-{time.monotonic_ns()}.sock")
    report = tmp_path / "report.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(meter_wire.__file__)),
            "serve",
            str(sock),
            json.dumps(SPEC),
            json.dumps(PINS),
            str(report),
        ],
        cwd=repo,
    )
    for _ in range(500):
        if sock.exists():
            break
        time.sleep(0.02)
    monkeypatch.setenv(meter_wire.ENV, str(sock))
    monkeypatch.syspath_prepend(str(repo))
    sys.modules.pop("toy", None)
    import toy as module

    meter_wire._Connection._conn = None
    yield module, sock, report, proc
    meter_wire._Connection._conn = None
    proc.terminate()
    proc.wait(10)
    sock.unlink(missing_ok=True)
    sys.modules.pop("toy", None)


def test_a_served_class_keeps_its_api_and_the_server_keeps_the_count(toy):
    module, _, report, proc = toy
    Split = meter_wire.remote(module.Split)
    s = Split("ci", 7)
    assert len(s) == 50 and s.budget == 10 and s.remaining == 10
    got = s.get(torch.tensor([3, 4]))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.int64 and got.tolist() == [[6, 7], [8, 9]]
    # the same arguments give the same object: one budget per run, however often it is built
    again = Split("ci", 7)
    assert again.served == 2
    b = s.batch(4)
    assert isinstance(b, module.Batch) and b.x.tolist() == [0, 1, 2, 3] and b.n == 4
    assert s.total(b) == 10  # a value travels back to the server
    ep = s.episode(5)
    assert ep.step(1)[0].tolist() == [6.0, 6.0] and ep.t == 1
    assert s.describe() == {"scale": "ci", "pair": (1, 2.5), "none": None, "flags": [True, False]}
    with pytest.raises(module.BudgetExhausted, match="budget of 10 items is spent"):
        s.get(torch.arange(9))
    assert s.served == 2
    proc.terminate()
    proc.wait(10)
    assert read_report(report) == {
        "calls": 15,  # every request the test made, the refused one included
        "toy.Split": {
            "unit": "items",
            "budget": 10,
            "served": 2,
            "remaining": 8,
            "delivered": 2,
            "reserved": 0,
            "class": {"budget": 10, "served": 2, "remaining": 8},
        },
    }


def test_what_is_not_declared_is_not_served(toy):
    module, _, _, _ = toy
    s = meter_wire.remote(module.Split)("ci")
    with pytest.raises(AttributeError, match="not served by the meter"):
        _ = s.secret  # the data itself stays on the server
    with pytest.raises(AttributeError):
        s.served = 0
    with pytest.raises(meter_wire.MeterError, match="this run's scale is 'ci', not 'smoke'"):
        meter_wire.remote(module.Split)("smoke")  # another scale's split (and budget) is not this run's
    with pytest.raises(meter_wire.MeterError, match="this run's seed is 7"):
        meter_wire.remote(module.Split)("ci", 8)  # nor is a second budget under another seed
    conn = meter_wire._Connection.get()
    for header in (
        {"op": "call", "ref": 1, "name": "__init__"},
        {"op": "get", "ref": 1, "name": "secret"},
        {"op": "new", "cls": "toy.Episode"},
        {"op": "new", "cls": "os.system"},
        {"op": "call", "ref": 99, "name": "get"},
    ):
        with pytest.raises(meter_wire.MeterError):
            conn.call(header)


def _raw(sock_path: Path, payload: bytes) -> bytes:
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(str(sock_path))
    c.sendall(payload)
    c.shutdown(socket.SHUT_WR)
    data = b""
    while True:
        chunk = c.recv(65536)
        if not chunk:
            break
        data += chunk
    c.close()
    return data


def _frame(header: dict, body: bytes = b"") -> bytes:
    h = json.dumps(header).encode()
    return struct.pack("<QI", 4 + len(h) + len(body), len(h)) + h + body


def test_malformed_frames_get_an_error_and_the_server_lives_on(toy):
    module, sock, _, proc = toy
    cases = [
        struct.pack("<QI", meter_wire.MAX_FRAME + 1, 10),  # too large
        _frame(
            {"op": "new", "cls": "toy.Split", "args": [{"$a": 0, "dtype": "int64", "shape": [4]}], "buffers": [3]},
            b"abc",
        ),  # shape against bytes
        _frame(
            {"op": "new", "cls": "toy.Split", "args": [{"$a": 0, "dtype": "object", "shape": [1]}], "buffers": [8]},
            b"x" * 8,
        ),  # no object arrays
        _frame({"op": "new", "cls": "toy.Split", "args": [{"$v": "os.environ", "f": {}}], "buffers": []}),
        _frame({"op": "new", "cls": "toy.Split", "args": [{"$r": 1}], "buffers": [5]}, b"ab"),  # buffers lie
    ]
    for payload in cases:
        reply = _raw(sock, payload)
        assert b"error" in reply, payload[:40]
    assert proc.poll() is None
    s = meter_wire.remote(module.Split)("ci")
    assert s.get(torch.tensor([0])).tolist() == [[0, 1]]


def test_a_forked_child_opens_its_own_connection(toy):
    module, _, _, _ = toy
    s = meter_wire.remote(module.Split)("ci")
    s.get(torch.tensor([1]))
    pid = os.fork()
    if pid == 0:
        try:
            t = meter_wire.remote(module.Split)("ci")
            os._exit(0 if t.get(torch.tensor([2])).tolist() == [[4, 5]] else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert s.served == 2


def test_without_the_variable_a_class_is_itself(monkeypatch):
    monkeypatch.delenv(meter_wire.ENV, raising=False)

    class C:
        pass

    assert meter_wire.remote(C) is C


def test_the_meter_block_is_parsed_strictly():
    ok = {
        "held": ["data/train_*.u8"],
        "classes": {
            "data.TrainingSplit": {
                "construct": ["scale"],
                "unit": "sequences",
                "methods": {
                    "get": {
                        "args": {"idx": {"tensor": ["int64"], "ndim": 1, "rows": "$remaining"}},
                        "count": {"rows": "idx"},
                    }
                },
                "attributes": ["served"],
                "len": True,
            }
        },
    }
    m = parse_meter(ok, "t")
    cls = ok["classes"]["data.TrainingSplit"]
    get = cls["methods"]["get"]
    assert m.held == ("data/train_*.u8",) and m.classes["data.TrainingSplit"].construct == ("scale",)
    bad = [
        {**ok, "held": ["/etc/passwd"]},
        {**ok, "held": ["../x"]},
        {**ok, "extra": 1},
        {**ok, "classes": {"TrainingSplit": ok["classes"]["data.TrainingSplit"]}},
        {**ok, "classes": {"data.S": {"construct": ["path"], "unit": "x", "methods": {}, "attributes": []}}},
        {
            **ok,
            "classes": {
                "data.S": {"construct": ["scale"], "unit": "x", "methods": {"__init__": get}, "attributes": []}
            },
        },
        {**ok, "classes": {"data.S": {"methods": {"get": get}, "attributes": []}}},
        # a served method without a signature, a count or a unit; a count of nothing it takes
        {**ok, "classes": {"data.S": {"construct": ["scale"], "unit": "x", "methods": ["get"], "attributes": []}}},
        {**ok, "classes": {"data.S": {"construct": ["scale"], "methods": {"get": get}, "attributes": []}}},
        {
            **ok,
            "classes": {
                "data.S": {"construct": ["scale"], "unit": "x", "methods": {"get": {"args": {}}}, "attributes": []}
            },
        },
        {**ok, "classes": {"data.S": {**cls, "methods": {"get": {**get, "count": {"rows": "other"}}}}}},
        {**ok, "classes": {"data.S": {**cls, "methods": {"get": {**get, "count": "steps"}}}}},
        {
            **ok,
            "classes": {
                "data.S": {**cls, "methods": {"get": {**get, "args": {"idx": {"tensor": ["object"], "ndim": 1}}}}}
            },
        },
        {**ok, "classes": {"data.S": {**cls, "methods": {"get": {**get, "args": {"idx": {"tensor": ["int64"]}}}}}}},
        {**ok, "classes": {"data.S": {**cls, "methods": {"get": {**get, "args": {"idx": {"int": [0, "os.system"]}}}}}}},
    ]
    for b in bad:
        with pytest.raises(TaskError):
            parse_meter(b, "t")


def test_the_held_files_leave_the_training_copy(tmp_path):
    task = load_task("optimizer")
    assert task.meter is not None
    import shutil

    shutil.copytree(task.repo, tmp_path / "r")
    held = {p.name for p in held_files(task, tmp_path / "r")}
    assert {"train_ci.u8", "train_smoke.u8"} <= held and "val.u8" not in held
    remove_held(task, tmp_path / "r")
    assert not list((tmp_path / "r" / "data").glob("train_*.u8"))


def test_serving_starts_the_repos_own_class_and_reports_what_it_served(tmp_path, monkeypatch):
    task = load_task("optimizer")
    log, report = tmp_path / "meter.log", tmp_path / "meter.json"
    with serving(task, "ci", 3, "cpu", log, report) as served:
        assert served is not None and served.env["AI4AI_METER"].endswith("meter.sock")
        host_sock = served.mounts[0].host / "meter.sock"
        monkeypatch.setenv(meter_wire.ENV, str(host_sock))
        meter_wire._Connection._conn = None
        proxy = meter_wire._Connection.get().call({"op": "new", "cls": "data.TrainingSplit"}, ("ci",))
        assert proxy.budget == 2048
        assert proxy.get(torch.arange(8)).shape[0] == 8
        meter_wire._Connection._conn = None
    assert read_report(report)["data.TrainingSplit"]["served"] == 8
    assert not host_sock.parent.exists()


def test_a_meter_that_cannot_start_is_the_machines_fault(tmp_path):
    # a repo whose served class cannot even be imported: the server exits before it listens, and
    # the training run reports an EnvironmentFault (the seed an `error`, retried), not the submission's failure
    import dataclasses
    import shutil
    from types import SimpleNamespace

    from ai4ai.grading.devices import EnvironmentFault
    from ai4ai.grading.training import _meter

    task = load_task("optimizer")
    repo = tmp_path / "repo"
    shutil.copytree(task.repo, repo)
    (repo / "data.py").write_text("raise ImportError('the split module is broken')\n")
    ctx = SimpleNamespace(task=dataclasses.replace(task, repo=repo), scale="ci", device="cpu", threads=1)
    with pytest.raises(EnvironmentFault, match="meter: the meter server of optimizer exited"):
        with _meter(ctx, 3, tmp_path, {}):
            pass
    assert "the split module is broken" in (tmp_path / "meter.log").read_text()


def test_a_graded_teacher_goes_to_the_meters_copy_only(tmp_path, monkeypatch):
    """distillation's meter holds the teacher, and the teacher depends on the instance: a graded run's
    meter serves from a copy holding the graded instance's teacher (training.build_meter_copy), and the
    training copy holds no teacher at all. Here the graded 'ci' teacher is the committed smoke teacher
    (same architecture, other weights, a real safetensors file), so the served answers tell them apart."""
    import hashlib
    import shutil

    from ai4ai.grading.training import build_meter_copy, build_training_copy, meter_needs_graded
    from ai4ai.repo.preparing import read_sums, write_sums
    from ai4ai.repo.submission import Submission

    task = load_task("distillation")
    graded = tmp_path / "graded"
    (graded / "artifacts").mkdir(parents=True)
    shutil.copyfile(
        task.repo / "artifacts" / "teacher_smoke.safetensors", graded / "artifacts" / "teacher_ci.safetensors"
    )
    digest = hashlib.sha256((graded / "artifacts" / "teacher_ci.safetensors").read_bytes()).hexdigest()
    write_sums(graded, {"artifacts/teacher_ci.safetensors": digest})
    assert meter_needs_graded(task, graded)
    assert not meter_needs_graded(task, None)
    assert not meter_needs_graded(load_task("sft"), graded)  # sft's meter holds data, not its base

    empty = Submission(files={}, rejected={}, patch="", lines_added=0, lines_removed=0)
    train = build_training_copy(task, empty, tmp_path / "train", graded)
    assert not list((train / "artifacts").glob("teacher_*")) and not list((train / "data").glob("train_*"))
    meter_repo = build_meter_copy(task, tmp_path / "meter", graded)
    assert read_sums(meter_repo / "artifacts")["teacher_ci.safetensors"] == digest
    assert (meter_repo / "artifacts" / "teacher_ci.safetensors").read_bytes() == (
        task.repo / "artifacts" / "teacher_smoke.safetensors"
    ).read_bytes()

    prompts = torch.from_numpy(
        np.frombuffer((task.repo / "data" / "val.u8").read_bytes(), np.uint8)
        .reshape(-1, 20)[:200, :12]
        .astype(np.int64)
    )

    def served_answers(repo):
        with serving(task, "ci", 3, "cpu", tmp_path / "meter.log", tmp_path / "meter.json", repo=repo) as served:
            monkeypatch.setenv(meter_wire.ENV, str(served.mounts[0].host / "meter.sock"))
            meter_wire._Connection._conn = None
            teacher = meter_wire._Connection.get().call({"op": "new", "cls": "teacher.Teacher"}, ("ci", "cpu"))
            out = teacher.generate(prompts)
            meter_wire._Connection._conn = None
            return out

    visible, graded_answers = served_answers(None), served_answers(meter_repo)
    # what each teacher itself answers, computed here from its file
    monkeypatch.syspath_prepend(str(task.repo))
    for m in ("config", "model"):
        sys.modules.pop(m, None)
    import model
    from safetensors.torch import load_file

    def own(path):
        t, state = model.build_teacher("ci"), load_file(str(path))
        with torch.no_grad():
            for k, p in t.named_parameters():
                p.copy_(state[k])
        return model.greedy_generate(t.eval(), prompts)

    assert torch.equal(graded_answers, own(graded / "artifacts" / "teacher_ci.safetensors"))
    assert torch.equal(visible, own(task.repo / "artifacts" / "teacher_ci.safetensors"))
    assert not torch.equal(visible, graded_answers)
    for m in ("config", "model"):
        sys.modules.pop(m, None)
