"""Graded-instance prepared models committed beside the hidden grader (preparing.committed_graded).

sft's base and distillation's teacher for the graded instance were made by each host's own run of the
repo's prepare step, which rounds by the host's kernels; at ci the shipped sft run scored exact match
0.12 to 0.37 over five pretraining draws of that base, and 0.035 on one CI host's. At ci and smoke the
grader now carries the bytes, so every CPU grades from the same model."""

import shutil
import sys
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from ai4ai.core.task import load_task
from ai4ai.repo import preparing
from ai4ai.repo.preparing import sha256_file

# (task, scale, the file, the repo's builder of the model it holds)
COMMITTED = [
    (task, scale, f"artifacts/{stem}_{scale}.safetensors", builder)
    for task, stem, builder in (("sft", "base", "build_model"), ("distillation", "teacher", "build_teacher"))
    for scale in ("ci", "smoke")
]


def _build(repo, builder: str, scale: str) -> torch.nn.Module:
    sys.path.insert(0, str(repo))
    try:
        for name in ("model", "config"):
            sys.modules.pop(name, None)
        import model

        return getattr(model, builder)(scale)
    finally:
        sys.path.remove(str(repo))
        for name in ("model", "config"):
            sys.modules.pop(name, None)


@pytest.mark.parametrize("name,scale,rel,builder", COMMITTED)
def test_the_committed_graded_model_is_used_without_the_prepare_step(name, scale, rel, builder, monkeypatch):
    task = load_task(name)

    def no_prepare(*a, **k):
        raise AssertionError("the prepare step ran although the graded model is committed")

    monkeypatch.setattr(preparing, "run_prepare_step", no_prepare)
    folder = preparing.graded_artifacts(task, scale)
    assert folder == task.grader / "prepared" / scale
    assert set(preparing.read_sums(folder)) == {rel} and not preparing.verify(folder)
    # the graded instance's model, not a copy of the visible one the agent has
    assert sha256_file(folder / rel) != sha256_file(task.repo / rel)
    weights = load_file(str(folder / rel))
    model = _build(task.repo, builder, scale)
    assert set(weights) == {k for k, _ in model.named_parameters()}
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_a_damaged_committed_model_is_refused_by_name(tmp_path):
    task = load_task("sft")
    grader = tmp_path / "grader"
    shutil.copytree(task.grader, grader, ignore=shutil.ignore_patterns("calibration", "__pycache__"))
    base = grader / "prepared" / "ci" / "artifacts" / "base_ci.safetensors"
    raw = bytearray(base.read_bytes())
    raw[-1] ^= 1
    base.write_bytes(bytes(raw))
    with pytest.raises(
        RuntimeError, match=r"damaged \(artifacts/base_ci.safetensors does not match its sha256\).*git checkout"
    ):
        preparing.graded_artifacts(replace(task, grader=grader), "ci")
    base.unlink()
    with pytest.raises(RuntimeError, match="base_ci.safetensors is missing"):
        preparing.graded_artifacts(replace(task, grader=grader), "ci")


def test_full_still_runs_the_prepare_step():
    """Nothing is committed for full: its prepared models are made on the device (python -m ai4ai.prepare)."""
    for name in ("sft", "distillation"):
        assert preparing.committed_graded(load_task(name), "full") is None
