"""task.adapter: a brought model (task.model_path) fine-tuned with a LoRA adapter (peft) by the repos that
fine-tune one (sft, dpo, reward_model, distillation, unlearning), merged by the protected checkpoint
writer, graded like any other run; the choice is part of
the derived repo, so its anchors are its own. The graded runs (slow) use a tiny Llama saved with
save_pretrained and the real peft; the refusals are one line each, before anything trains."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from safetensors.torch import load_file

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.core.provenance import task_version
from ai4ai.core.task import TaskError, load_task, parse_task
from ai4ai.repo import models

from . import test_byo_model
from .test_byo_model import hooked, saved  # noqa: F401 - the fixtures: tiny saved models, a shrunk task


def test_auto_picks_lora_for_a_large_model_or_a_small_gpu_and_only_where_a_repo_trains_one():
    sft, pruning = load_task("sft"), load_task("pruning")
    gib = 1 << 30
    assert models.resolve_adapter(sft, 100_000, gpu_bytes=0) == "full"
    assert models.resolve_adapter(sft, models.LORA_FROM_PARAMS, gpu_bytes=0) == "lora"
    # 500M parameters fine-tuned in full take ~8 GB: lora on a 12 GiB GPU, full on an 80 GiB one
    assert models.resolve_adapter(sft, 500_000_000, gpu_bytes=12 * gib) == "lora"
    assert models.resolve_adapter(sft, 500_000_000, gpu_bytes=80 * gib) == "full"
    assert models.resolve_adapter(pruning, 10 * models.LORA_FROM_PARAMS, gpu_bytes=gib) == "full"  # no lora there
    for name in ("dpo", "reward_model", "distillation", "unlearning"):
        assert models.resolve_adapter(load_task(name), models.LORA_FROM_PARAMS, gpu_bytes=0) == "lora"
    for given in ("full", "lora"):
        assert models.resolve_adapter(replace(sft, adapter=given), 10 * models.LORA_FROM_PARAMS, gpu_bytes=0) == given


def test_bad_adapter_settings_are_one_line(saved):  # noqa: F811
    raw = __import__("yaml").safe_load((PROJECT_ROOT / "conf" / "task" / "sft.yaml").read_text())
    with pytest.raises(TaskError, match=r"adapter must be one of auto, full, lora .* got 'qlora'"):
        parse_task({**raw, "adapter": "qlora"}, "sft.yaml")
    with pytest.raises(TaskError, match=r"task.adapter=lora applies to a model you bring \(task.model_path=FOLDER\)"):
        models.with_model(replace(load_task("sft"), adapter="lora"))
    with pytest.raises(
        models.ModelPathError, match=r"the pruning repo does not fine-tune your model; .* distillation and unlearning"
    ):
        models.with_model(replace(load_task("pruning"), model_path=str(saved["llama"]), adapter="lora"))


def test_a_bad_adapter_on_the_command_line_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "ai4ai.grade", "task=sft", "scale=ci", "task.adapter=qlora", f"outputs={tmp_path}"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = [ln for ln in (r.stderr + r.stdout).splitlines() if ln.strip()]
    assert r.returncode == 2 and len(said) == 1 and "adapter must be one of auto, full, lora" in said[0], said


# Where each repo's start is (byom/) and the prefix its keys take in a checkpoint; the checkpoint's
# keys beyond the start's (a fresh part that trains in full)
START = {
    "sft": ("base.safetensors", "", set()),
    "dpo": ("policy.safetensors", "", set()),
    "reward_model": ("base.safetensors", "backbone.", {"head.weight", "head.bias"}),  # the LM without its head
    "distillation": ("base.safetensors", "", set()),
    "unlearning": ("memorised.safetensors", "", set()),
}
# What an adapter's plumbing needs of the costliest run, in the copy the `hooked` task trains
# (test_byo_model.SHRUNK_PREPARE's form): distillation's student 40 passes over the distilled set,
# not 200. (Unlearning's memorising prepare stays at 400 steps: at 150 the tiny llama has memorised
# too little for the shipped unlearning to beat the no-information model, and calibration refuses.)
LORA_SHRUNK = {"distillation": ("train.py", "EPOCHS = 200 ", "EPOCHS = 40 ")}


@pytest.mark.slow
@pytest.mark.parametrize("task_name", list(START))
def test_a_lora_adapter_on_a_saved_llama_is_trained_merged_and_graded(
    task_name,
    saved,  # noqa: F811
    hooked,  # noqa: F811
    compose_cfg,
    tmp_path,
    monkeypatch,
):
    if task_name in LORA_SHRUNK:
        monkeypatch.setitem(test_byo_model.SHRUNK_PREPARE, task_name, LORA_SHRUNK[task_name])
    model = saved["llama_2400" if task_name == "unlearning" else "llama"]  # unlearning's symbols need 2,400 tokens
    cfg = compose_cfg("grade", [f"task={task_name}", "scale=ci", f"task.model_path={model}", "task.adapter=lora"])
    run_dir = tmp_path / "run"
    pipeline.grade(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded", r["reason"]
    assert r["provenance"]["model"]["adapter"] == "lora" and 0.0 <= r["score"] <= 1.0
    seed = r["checkpoints"]["per_seed"][0]
    assert len(seed["candidates"]) == 3 and all(c["valid"] for c in seed["candidates"]), seed["candidates"]

    # the derived repo carries the choice; its version (and the anchors calibrated for it) is not full's
    own = models.with_model(hooked(replace(load_task(task_name), model_path=str(model), adapter="lora")))
    full = models.with_model(hooked(replace(load_task(task_name), model_path=str(model), adapter="full")))
    assert json.loads((own.repo / "byom" / "adapter.json").read_text()) == {"adapter": "lora"}
    assert not (full.repo / "byom" / "adapter.json").exists()
    assert r["anchors"]["provenance"]["key"]["task_version"] == task_version(own, "ci") != task_version(full, "ci")
    assert "with a LoRA adapter" in own.description

    # an adapter trained and was merged: a checkpoint holds the model's own keys, its embedding is the
    # start's (all-linear leaves it frozen) and its attention projections moved
    file, prefix, fresh = START[task_name]
    start = {prefix + k: v for k, v in load_file(str(own.repo / "byom" / file)).items()}
    ckpt = load_file(str(sorted(run_dir.rglob("ckpt_*.safetensors"))[-1]))
    assert set(ckpt) == set(start) | fresh and not any("lora" in k for k in ckpt), sorted(set(ckpt) ^ set(start))[:6]
    emb = next(k for k in start if "embed_tokens" in k)
    assert torch.equal(ckpt[emb], start[emb])
    moved = [k for k in start if k.endswith("q_proj.weight") and not torch.equal(ckpt[k], start[k])]
    assert moved, "no attention projection moved: the adapter did not train, or was not merged"
