"""The LM repos' train.py trains through accelerate's `Accelerator`: device placement, bf16 autocast at
the GPU tiers (config.Scale.bf16) and gradient accumulation. Its contract: at ci and smoke the
arithmetic is plain fp32 torch, so a run gives the same weights as the loop written without the
library (which the repos shipped before, and which the anchor records were measured with), and at
the GPU tiers it is torch's own bf16 autocast.

Each test runs the repo's real train.py, unmetered in a copy of the repo (its ci split is in the
copy), with the real accelerate, for a few steps; the oracle is the same file with the library
replaced by the plain torch it stands for (`PLAIN`): `.to(device)`, `torch.autocast`,
`loss.backward()`, `torch.nn.utils.clip_grad_norm_`. The weights must be equal bit for bit.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from ai4ai.core.task import load_task
from tests.forkserver import ForkServer

# the repos whose train.py uses accelerate, and the edit that makes each run a few steps
SHORT = {
    "optimizer": ("total_steps = split.budget // BATCH_SIZE\n", "total_steps = 6\n"),
    "sft": ("total_steps = split.budget // BATCH_SIZE\n", "total_steps = 6\n"),
    "reward_model": ("total_steps = pairs.budget // BATCH_SIZE\n", "total_steps = 6\n"),
    "dpo": ("    total_steps = split.budget // BATCH_SIZE\n", "    total_steps = 6\n"),
    "distillation": ("EPOCHS = 200 ", "EPOCHS = 1 "),
    "unlearning": ("STEPS = 50 ", "STEPS = 6 "),
}
BF16_AT_THE_SCALE = 'mixed_precision="bf16" if get_scale(args.scale).bf16 else "no"'
IMPORT = "from accelerate import Accelerator\n"

# What each Accelerator call stands for in a single-process run, in plain torch.
PLAIN = """import contextlib as _contextlib


class Accelerator:  # the oracle: plain torch in place of accelerate
    sync_gradients = True

    def __init__(self, mixed_precision="no", gradient_accumulation_steps=1, cpu=False):
        assert gradient_accumulation_steps == 1
        self.device = torch.device("cpu" if cpu else "cuda")
        self.bf16 = mixed_precision == "bf16"

    def prepare(self, *objs):
        return tuple(o.to(self.device) if isinstance(o, torch.nn.Module) else o for o in objs)

    def accumulate(self, model):
        return _contextlib.nullcontext()

    def autocast(self):
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, enabled=self.bf16)

    def backward(self, loss):
        loss.backward()

    def clip_grad_norm_(self, params, max_norm):
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
"""


def _variant(src: str, task: str, *, plain: bool, bf16: bool) -> str:
    old, new = SHORT[task]
    assert src.count(old) == 1, f"{task}/train.py changed: {old!r} is not there once"
    src = src.replace(old, new)
    assert src.count(IMPORT) == 1 and src.count(BF16_AT_THE_SCALE) == 1, (
        f"{task}/train.py no longer makes its Accelerator"
    )
    if bf16:  # the GPU tiers' precision, at ci's sizes on the CPU
        src = src.replace(BF16_AT_THE_SCALE, 'mixed_precision="bf16"')
    if plain:
        src = src.replace(IMPORT, "")
        head, sep, rest = src.partition("\n# ---")  # after the constants, before the setup
        if not sep:
            head, sep, rest = src.partition("\n\ndef ")
        src = head + "\n\n" + PLAIN + sep + rest
    return src


def _train(server, tmp_path, task: str, name: str, src: str) -> dict:
    repo = tmp_path / name
    shutil.copytree(load_task(task).repo, repo, ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "train.py").write_text(src)
    out = repo / "out"
    # `python train.py ...` in the copy, a fresh process forked from the module's server
    args = ["--out", str(out), "--seed", "3", "--scale", "ci", "--budget-s", "1e9"]
    r = server.run(repo, dict(os.environ), script="train.py", args=args, timeout=600)
    assert r.returncode == 0, f"{task} {name}: {r.stderr[-3000:]}"
    kept = sorted(out.glob("ckpt_*.safetensors"))
    assert len(kept) >= 2, f"{task} {name}: {len(kept)} checkpoints"
    first, last = load_file(kept[0]), load_file(kept[-1])
    # the run trained: its last kept checkpoint is not its first (so equal runs are not equal idleness)
    assert any(not torch.equal(first[k], last[k]) for k in last), f"{task} {name}: the weights never moved"
    return last


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    """_train with its runs shared by this module's tests: the same task and source give the same
    run (the comparisons are bit for bit), so the oracle test's plain optimizer loop is the plain run
    the optimizer case trained, not a second one. Each run is a child of one fork server
    (tests/forkserver.py), which imported torch once."""
    runs = {}
    server = ForkServer(tmp_path_factory.mktemp("forkserver"))

    def run(tmp_path, task: str, name: str, src: str) -> dict:
        if (task, src) not in runs:
            runs[task, src] = _train(server, tmp_path, task, name, src)
        return runs[task, src]

    yield run
    server.close()


# fp32 (ci and smoke, what the scores rest on) for every repo; bf16 for the three whose loss is not the
# model's own (dpo's reference under the autocast, distillation's and unlearning's fp32 cast of the
# logits): the other three ask for it the same way (tested below), and passed it too when written
CASES = [(t, False) for t in sorted(SHORT)] + [("distillation", True), ("dpo", True), ("unlearning", True)]


@pytest.mark.parametrize(
    ("task", "bf16"), CASES, ids=[f"{t}-{'bf16_as_gpu_tiers' if b else 'fp32_as_ci'}" for t, b in CASES]
)
def test_train_py_through_accelerate_gives_the_plain_torch_weights(tmp_path, train, task, bf16):
    src = (load_task(task).repo / "train.py").read_text()
    got = train(tmp_path, task, "accelerate", _variant(src, task, plain=False, bf16=bf16))
    want = train(tmp_path, task, "plain", _variant(src, task, plain=True, bf16=bf16))
    assert got.keys() == want.keys()
    for k in want:
        assert torch.equal(got[k], want[k]), f"{task}: {k} differs from plain torch"


def test_the_oracle_would_see_a_difference(tmp_path, train):
    """The comparison can fail: a plain loop at another learning rate gives other weights."""
    src = (load_task("optimizer").repo / "train.py").read_text()
    want = train(tmp_path, "optimizer", "plain", _variant(src, "optimizer", plain=True, bf16=False))
    other = _variant(src, "optimizer", plain=True, bf16=False).replace(
        'group["lr"] = lr_at(step, total_steps)', 'group["lr"] = 0.5 * lr_at(step, total_steps)'
    )
    assert other != _variant(src, "optimizer", plain=True, bf16=False)
    got = train(tmp_path, "optimizer", "half_lr", other)
    assert any(not torch.equal(got[k], want[k]) for k in want)


def test_the_ci_path_makes_no_autocast_and_the_gpu_tiers_bf16(tmp_path):
    """What train.py asks of accelerate per scale: mixed precision "no" where config.Scale.bf16 is off
    (ci, smoke) and "bf16" where it is on (quick, full), read from each repo's own config."""
    for task in SHORT:
        repo = load_task(task).repo
        code = (
            "import sys; sys.path.insert(0, '.')\n"
            "from config import get_scale\n"
            "print(*[int(get_scale(s).bf16) for s in ('ci', 'smoke', 'quick', 'full')])\n"
        )
        r = subprocess.run([sys.executable, "-c", code], cwd=repo, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr[-2000:]
        assert r.stdout.split() == ["0", "0", "1", "1"], (task, r.stdout)
