"""Route 5: checkpoints as a control channel, tried on the real evaluation worker and snapshot."""

import importlib
import json
import os
import pickle
import sys

import torch
from safetensors.torch import save_file

from ai4ai.grading.evaluation import run_worker
from ai4ai.grading.training import snapshot_checkpoints

from .conftest import grade_setup


def _params(task):
    """The pristine model's parameters at ci (built from the frozen repo, then forgotten)."""
    sys.path.insert(0, str(task.repo))
    try:
        torch.manual_seed(0)
        model = importlib.import_module("model").build_model("ci")
        return {k: v.detach().clone() for k, v in model.named_parameters()}
    finally:
        sys.path.remove(str(task.repo))
        for m in ("model", "config"):
            sys.modules.pop(m, None)


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_malformed_checkpoints_are_invalid_with_their_reason(tmp_path, task, pristine):
    """Route 5: extra or missing keys, wrong shape, wrong dtype, NaN, inf, a pickle (with a code payload)
    disguised as safetensors, a huge (sparse) file, a safetensors header that lies about its length, and
    planted .py files beside the checkpoints; metadata keys outside the whitelist.
    Gains nothing: every bad candidate is invalid with its reason, the pickle never runs, the only valid
    (untrained) candidate is the one chosen, planted files are not imported, and only whitelisted
    metadata keys are recorded."""
    p = _params(task)
    name0 = next(iter(p))
    d = tmp_path / "ckpts"
    d.mkdir()
    marker = tmp_path / "PWNED_by_pickle"
    cases = {
        "extra key": {**p, "backdoor": torch.zeros(1)},
        "missing key": {k: v for k, v in p.items() if k != name0},
        "shape": {**p, name0: torch.zeros(*p[name0].shape[:-1], p[name0].shape[-1] + 1)},
        "dtype": {**p, name0: p[name0].double()},
        "nan": {**p, name0: torch.full_like(p[name0], float("nan"))},
        "inf": {**p, name0: torch.full_like(p[name0], float("inf"))},
    }
    paths, expect = [], {}
    for i, (case, tensors) in enumerate(cases.items(), start=1):
        path = d / f"ckpt_{i:08d}.safetensors"
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(path))
        paths.append(path)
        expect[path.name] = {
            "extra key": "keys differ",
            "missing key": "keys differ",
            "shape": "expected",
            "dtype": "expected",
            "nan": "non-finite",
            "inf": "non-finite",
        }[case]
    pk = d / "ckpt_00000020.safetensors"
    pk.write_bytes(pickle.dumps({"w": _Payload(marker)}))
    huge = d / "ckpt_00000021.safetensors"
    with open(huge, "wb") as f:
        f.truncate(8 << 30)
    liar = d / "ckpt_00000022.safetensors"
    liar.write_bytes((1 << 62).to_bytes(8, "little") + b"{}")
    good = d / "ckpt_00000030.safetensors"
    save_file(p, str(good))
    (d / "ckpt_00000030.json").write_text(
        json.dumps({"step": 30, "tokens_seen": 5, "score": 1.0, "chosen": True, "grader": {"x": 1}})
    )
    for plant in ("sitecustomize.py", "model.py", "config.py", "safetensors.py", "usercustomize.py"):
        (d / plant).write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    paths += [pk, huge, liar, good]
    expect.update(
        {
            pk.name: "not a readable safetensors",
            huge.name: "more than the model's parameters need",
            liar.name: "not a readable safetensors",
        }
    )
    from ai4ai.grading.seeds import eval_spec

    res = run_worker(eval_spec(grade_setup(tmp_path, task), pristine, paths), tmp_path / "eval")
    by = {c["name"]: c for c in res["candidates"]}
    for n, why in expect.items():
        assert by[n]["valid"] is False and why in by[n]["reason"], (n, by[n])
    assert res["chosen"] == good.name and by[good.name]["valid"]
    assert by[good.name]["metadata"] == {"step": 30, "tokens_seen": 5}
    assert not marker.exists()


def test_snapshot_takes_three_regular_files_and_never_blocks(tmp_path):
    """Route 5: more than 3 checkpoints (names lying about the step), symlinked checkpoints, a directory and
    a FIFO under checkpoint names (the FIFO would hang a blocking open), an oversized metadata file.
    Gains nothing: only the 3 highest-step regular files are taken, links and special files are
    skipped, and the snapshot returns. (Found open: a FIFO named ckpt_*.json hung the harness.)"""
    out = tmp_path / "out"
    out.mkdir()
    for step in (1, 2, 5, 99999990, 99999991):
        (out / f"ckpt_{step:08d}.safetensors").write_bytes(b"w")
    os.symlink("/etc/passwd", out / "ckpt_99999999.safetensors")
    (out / "ckpt_99999998.safetensors").mkdir()
    os.mkfifo(out / "ckpt_99999991.json")
    os.mkfifo(out / "ckpt_99999992.safetensors")
    (out / "ckpt_99999990.json").write_text(json.dumps({"step": 1, "pad": "x" * 200_000}))
    taken = snapshot_checkpoints(out, tmp_path / "checkpoints")
    assert [t.name for t in taken] == [
        "ckpt_00000005.safetensors",
        "ckpt_99999990.safetensors",
        "ckpt_99999991.safetensors",
    ]
    # the 200 KB metadata file is not copied at all (over MAX_META_BYTES; the reader would ignore it)
    assert sorted(x.name for x in (tmp_path / "checkpoints").iterdir()) == [
        "ckpt_00000005.safetensors",
        "ckpt_99999990.safetensors",
        "ckpt_99999991.safetensors",
    ]
    assert all(not x.is_symlink() for x in (tmp_path / "checkpoints").iterdir())


def test_read_metadata_whitelist(tmp_path):
    """Route 5: metadata outside the whitelist, nested values, a non-object, a huge file.
    Gains nothing: only whitelisted keys are read; a whitelisted key with a nested value, a non-object
    or a huge file is malformed metadata (the candidate is invalid), never a crash."""
    import pytest

    from ai4ai.grading.evaluation import InvalidCheckpoint, read_metadata

    c = tmp_path / "ckpt_00000001.safetensors"
    meta = c.with_suffix(".json")
    meta.write_text(json.dumps({"step": 1, "tokens_seen": 2, "selection_metric": {"nested": 0.0}}))
    assert read_metadata(c, ["step", "tokens_seen"]) == {"step": 1, "tokens_seen": 2}
    for text in (
        json.dumps({"step": 1, "tokens_seen": {"nested": 1}}),
        "[1, 2]",
        json.dumps({"step": 1, "pad": "x" * 70_000}),
    ):
        meta.write_text(text)
        with pytest.raises(InvalidCheckpoint, match="malformed metadata"):
            read_metadata(c, ["step", "tokens_seen"])
