"""Records that stay current, around a brought model and from the command line: the base version a brought
model's records carry, the registry (models.yaml) pruned when a model is registered, and
tools/prune_records.py (its dry run changes nothing). The store's own rule is tested in test_anchors.py."""

import hashlib
import importlib.util
import shutil
import time
from dataclasses import replace
from types import SimpleNamespace

import pytest
import yaml

from ai4ai import PROJECT_ROOT
from ai4ai.core.provenance import base_version, model_sha256, task_version, tree_sha256
from ai4ai.core.task import list_tasks, load_task
from ai4ai.grading import anchors
from ai4ai.repo import models, registry


def _tool():
    spec = importlib.util.spec_from_file_location("prune_records", PROJECT_ROOT / "tools" / "prune_records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def brought(tmp_path):
    """optimizer on a grader copy in tmp_path, as models.with_model leaves it for a brought model (a model
    folder of one file; the repo stays the frozen one): (base task, derived task)."""
    grader = tmp_path / "grader"
    shutil.copytree(
        load_task("optimizer").grader,
        grader,
        ignore=shutil.ignore_patterns("anchors.yaml", "calibration", "__pycache__"),
    )
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "toy"}')
    base = replace(load_task("optimizer"), grader=grader)
    return base, replace(base, model_path=str(model), base_task=base)


def test_a_brought_models_base_version_is_its_tasks_without_the_model(brought):
    base, own = brought
    for s in (None, "ci", "smoke"):
        assert base_version(own, s) == task_version(base, s) != task_version(own, s)
        assert base_version(base, s) == task_version(base, s)
    # not derived (no base_task): the same task without the model
    assert base_version(replace(own, base_task=None), "ci") == task_version(base, "ci")


def test_a_brought_models_record_carries_its_base_version(brought):
    _, own = brought
    ctx = SimpleNamespace(task=own, scale="ci", backend="none", version="b")
    prov = anchors._provenance(ctx, time.monotonic(), "cmd")
    assert prov["base_version"] == base_version(own, "ci") and prov["model_sha256"] == model_sha256(own.model_path)
    ctx.task = own.base_task
    assert "base_version" not in anchors._provenance(ctx, time.monotonic(), "cmd")


def test_registering_a_model_prunes_the_entries_no_current_version_can_use(brought):
    base, own = brought
    frozen = tree_sha256(base.repo)[:16]
    old = [
        {"task_version": "legacy-stale", "frozen_repo": "0" * 16},
        {"task_version": "legacy-current-repo", "frozen_repo": frozen},
        {"task_version": "stale", "base_version": "0" * 16, "base_versions": {"ci": "x"}},
        {"task_version": "another-model", "base_version": task_version(base), "base_versions": {}},
    ]
    (base.grader / registry.REGISTRY).write_text(yaml.safe_dump({"models": old}))
    info = models.ModelInfo(
        path=own.model_path,
        sha256=model_sha256(own.model_path),
        architecture="Toy",
        model_type="toy",
        n_params=1,
        vocab_size=32,
        tokenizer_size=32,
        token_ids=[],
        symbols=[],
        n_layers=None,
        hidden_size=None,
    )
    registry.register(own, info, frozen_repo=frozen)
    entries = registry.entries(base.grader)
    assert [e["task_version"] for e in entries] == ["legacy-current-repo", "another-model", task_version(own)]
    assert entries[-1]["base_version"] == task_version(base)
    assert entries[-1]["base_versions"] == {s: task_version(base, s) for s in base.scales}


def test_the_tool_names_a_dropped_scale_of_the_records():
    tool = _tool()
    assert {"ci", "smoke"} <= tool.scales_in_records(load_task("optimizer").grader, "optimizer")


def test_the_tools_dry_run_lists_and_changes_nothing(capsys):
    def state():
        out = {}
        for n in list_tasks():
            g = load_task(n).grader
            for p in [g / "anchors.yaml", g / "models.yaml", *sorted((g / "calibration").glob("*"))]:
                if p.is_file():
                    out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        return out

    before = state()
    assert _tool().main(["--dry-run", "optimizer", "pruning"]) == 0
    out = capsys.readouterr().out
    assert state() == before
    assert out.startswith("optimizer: would remove ") and "\npruning: would remove " in out
    assert f"ci {task_version(load_task('pruning'), 'ci')}" in out and "would go" in out.splitlines()[-1]
