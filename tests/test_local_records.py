"""Records outside the checkout: what a run calibrates goes to this machine's own store under
outputs/records/ (or $AI4AI_RECORDS_DIR), read on top of the committed records, which a run never
writes; commit=true and tools/promote_records.py write the committed ones. Each test works on a
copy of a task's grader folder inside a checkout made in tmp_path (layout.CHECKOUT pointed there)."""

import copy
import hashlib
import importlib.util
import shutil
from dataclasses import replace

import pytest
import yaml

from ai4ai import PROJECT_ROOT
from ai4ai.core import layout
from ai4ai.core.provenance import model_sha256, tree_sha256
from ai4ai.core.task import load_task
from ai4ai.grading import records
from ai4ai.grading.context import Key
from ai4ai.repo import models, registry


@pytest.fixture
def grader(tmp_path, monkeypatch):
    """optimizer's grader folder, committed records included, in a checkout at tmp_path/checkout."""
    root = tmp_path / "checkout"
    g = root / "grader_hidden" / "optimizer"
    shutil.copytree(load_task("optimizer").grader, g, ignore=shutil.ignore_patterns("__pycache__", "*.lock"))
    monkeypatch.setattr(layout, "CHECKOUT", root)
    monkeypatch.delenv(layout.RECORDS_ENV, raising=False)
    return g


def _files(folder):
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def _changed(record: dict) -> dict:
    r = copy.deepcopy(record)
    r["anchors"]["baseline"] = r["anchors"]["baseline"] * 0.999 + 0.001 * r["anchors"]["best"]
    r.setdefault("provenance", {})["host"] = "this-machine"
    return r


def test_a_stored_record_goes_to_the_machines_store_and_is_read_on_top(grader):
    before = _files(grader)
    committed = records._records(records.anchors_path(grader))
    assert committed, "the copy holds the committed records"
    r = _changed(committed[0])
    path = records.store(grader, r, detail={"per_seed": []})
    local = grader.parents[1] / "outputs" / "records" / "grader_hidden" / "optimizer"
    assert path == local / "anchors.yaml"
    assert _files(grader) == before, "the committed records are read-only at run time"
    assert [p.name for p in (local / "calibration").glob("*.json")] == [records.detail_path(local, r["key"]).name]
    found = records.find(grader, Key(**r["key"]))
    assert found.anchors.baseline == r["anchors"]["baseline"] != committed[0]["anchors"]["baseline"]
    # the local record replaces the committed one of its key: one record per key
    assert len(records.all_records(grader)) == len(committed)
    assert records.train_walls(grader, "optimizer", r["key"]["scale"])


def test_the_records_dir_variable_moves_the_machines_store(grader, tmp_path, monkeypatch):
    monkeypatch.setenv(layout.RECORDS_ENV, str(tmp_path / "elsewhere"))
    r = _changed(records._records(records.anchors_path(grader))[0])
    path = records.store(grader, r)
    assert path == tmp_path / "elsewhere" / "grader_hidden" / "optimizer" / "anchors.yaml"
    assert records.find(grader, Key(**r["key"])).anchors.baseline == r["anchors"]["baseline"]


def test_commit_writes_the_committed_records(grader):
    before = _files(grader)
    r = _changed(records._records(records.anchors_path(grader))[0])
    path = records.store(grader, r, commit=True)
    assert path == records.anchors_path(grader) and _files(grader) != before
    assert not (grader.parents[1] / "outputs").exists()
    assert r in records._records(records.anchors_path(grader))


def test_a_grader_folder_outside_the_checkout_is_its_own_store(tmp_path, grader):
    outside = tmp_path / "copy"
    shutil.copytree(grader, outside)
    assert layout.local_records_dir(outside) is None
    assert records.stores(outside) == [outside]
    # a folder of the checkout's outputs/ (a derived repo's, a local store) is a machine's own already
    assert layout.local_records_dir(grader.parents[1] / "outputs" / "x") is None
    r = _changed(records._records(records.anchors_path(outside))[0])
    assert records.store(outside, r) == records.anchors_path(outside)


def test_a_brought_models_entry_goes_to_the_machines_store(grader, tmp_path):
    before = _files(grader)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "toy"}')
    base = replace(load_task("optimizer"), grader=grader)
    own = replace(base, model_path=str(model), base_task=base)
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
    registry.register(own, info, frozen_repo=tree_sha256(base.repo)[:16])
    assert _files(grader) == before
    local = layout.local_records_dir(grader)
    assert [e["architecture"] for e in registry.entries(local)] == ["Toy"]
    assert any(e["architecture"] == "Toy" for e in registry.registered(base).values())


def _promote_tool(monkeypatch, grader):
    spec = importlib.util.spec_from_file_location("promote_records", PROJECT_ROOT / "tools" / "promote_records.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "load_task", lambda name: replace(load_task(name), grader=grader))
    return mod


def test_promoting_moves_local_records_into_the_committed_ones(grader, monkeypatch, capsys):
    tool = _promote_tool(monkeypatch, grader)
    committed = records._records(records.anchors_path(grader))
    r = _changed(committed[0])
    records.store(grader, r, detail={"per_seed": [{"seed": 1}]})
    local = layout.local_records_dir(grader)
    assert tool.main(["optimizer", "--dry-run"]) == 0
    assert "1 record(s) would move" in capsys.readouterr().out
    assert records._records(records.anchors_path(local)) == [r]
    assert tool.main(["optimizer"]) == 0
    assert "1 record(s) moved" in capsys.readouterr().out
    assert records._records(records.anchors_path(local)) == []
    assert not records.detail_path(local, r["key"]).exists()
    now = records._records(records.anchors_path(grader))
    assert r in now and committed[0] not in now
    detail = yaml.safe_load(records.detail_path(grader, r["key"]).read_text())
    assert detail["per_seed"] == [{"seed": 1}] and detail["key"] == r["key"]
    # nothing left to move
    assert tool.main(["optimizer"]) == 0
    assert "0 record(s) moved" in capsys.readouterr().out


def test_promoting_a_scale_moves_that_scale_only(grader, monkeypatch, capsys):
    tool = _promote_tool(monkeypatch, grader)
    by_scale = {}
    for rec in records._records(records.anchors_path(grader)):
        by_scale.setdefault(rec["key"]["scale"], rec)
    assert {"ci", "smoke"} <= by_scale.keys()
    for rec in by_scale.values():
        records.store(grader, _changed(rec))
    assert tool.main(["optimizer", "--scales", "smoke"]) == 0
    left = records._records(records.anchors_path(layout.local_records_dir(grader)))
    assert {x["key"]["scale"] for x in left} == set(by_scale) - {"smoke"}
