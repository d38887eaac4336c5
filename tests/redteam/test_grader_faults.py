"""Route: a submission turning its own grading into a harness `error` (not scored, retried forever).

What a submission controls (checkpoint bytes, metadata, what the hidden grader computes from its
weights) may only make a candidate invalid; `error` is the harness's own fault, and a cell that
errors the same way twice is reported as such instead of being retried on every rerun.
"""

import json
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from safetensors.torch import save_file

from ai4ai import pipeline
from ai4ai.core.record import connect
from ai4ai.grading.evaluation import InvalidCheckpoint, read_metadata, run_worker
from ai4ai.grading.seeds import eval_spec, grade_seeds
from ai4ai.repo.submission import from_patch

from .conftest import CI, grade_setup, needs_bwrap, train_py_patch, write_patch
from .test_checkpoints import _params

# Training that runs `prepare`, writes three untrained checkpoints, each with a metadata file whose
# text is the Python expression `meta`, and exits before the loop: real checkpoints from the
# submission's own training run in the sandbox, at the cost of a start-up.
WRITE_AND_EXIT = """
from checkpoint import save_checkpoint as _save
import pathlib as _pl
{prepare}
for _s in (1, 2, 3):
    _save(model, args.out, _s)
    _pl.Path(args.out, f"ckpt_{{_s:08d}}.json").write_text({meta})
raise SystemExit(0)
"""

# Finite weights that make the optimizer grader's math.exp(mean NLL) overflow: ln_f's gain scaled
# by 1e6 makes logits of order 1e6, so the mean NLL is far above exp's limit (~709).
OVERFLOW = "with torch.no_grad():\n    model.transformer.ln_f.weight.mul_(1e6)"


def _grade(tmp_path, task, pristine, code: str):
    sub = from_patch(task, pristine, train_py_patch(task, "order = torch.Generator", code))
    [r] = grade_seeds(grade_setup(tmp_path, task), sub, [0], tmp_path / "grade")
    return r


def _no_leak(text: str):
    for bad in ("Traceback", 'File "', "grader_hidden", "math.exp(float("):
        assert bad not in text, (bad, text)


@needs_bwrap
def test_metadata_bomb_is_invalid_not_error(tmp_path, task, pristine):
    """Probe: checkpoint metadata of 50,000 `[` (the JSON parser recurses past Python's limit).
    Found open: RecursionError escaped the evaluation worker, which exited 1, and the seed was recorded
    `error` (not scored, retried on every rerun). Now: every candidate is invalid (malformed metadata),
    the seed is `invalid` with a short reason and no traceback."""
    r = _grade(tmp_path, task, pristine, WRITE_AND_EXIT.format(prepare="", meta="'[' * 50000"))
    assert r.status == "invalid", (r.status, r.reason)
    assert "metadata" in r.reason and r.raw is None
    assert [c["valid"] for c in r.candidates] == [False] * 3
    _no_leak(r.reason)


@needs_bwrap
def test_weights_that_overflow_the_grader_are_invalid_not_error(tmp_path, task, pristine):
    """Probe: finite weights (ln_f gain x 1e6) that make the hidden grader's math.exp overflow.
    Found open: OverflowError escaped grader.evaluate, the worker exited 1 and the seed became `error`.
    Now: the candidates are invalid ("the grader raised OverflowError ..."), the seed `invalid`."""
    r = _grade(tmp_path, task, pristine, WRITE_AND_EXIT.format(prepare=OVERFLOW, meta="'{\"tokens_seen\": 0}'"))
    assert r.status == "invalid", (r.status, r.reason)
    assert "OverflowError" in r.reason and r.raw is None
    _no_leak(r.reason)


def test_read_metadata_is_bounded(tmp_path):
    """Probe: metadata the reader must survive: nesting deep enough to overflow the parser's recursion,
    NaN and Infinity literals, an integer of 4,000 digits, booleans, a long string, a whitelisted key
    holding an object. Found open: the deep nesting raised RecursionError (only ValueError was caught).
    Now: each is refused as malformed metadata (InvalidCheckpoint, the submission's fault), never a crash;
    keys outside the whitelist are ignored whatever they hold (within the size and depth bounds)."""
    c = tmp_path / "ckpt_00000001.safetensors"
    meta = c.with_suffix(".json")
    bad = [
        "[" * 50000,
        '{"step": ' + "[" * 5000 + "]" * 5000 + "}",
        '{"step": NaN}',
        '{"step": Infinity}',
        '{"step": ' + "9" * 4000 + "}",
        '{"step": true}',
        json.dumps({"step": "x" * 5000}),
        json.dumps({"step": {"nested": 1}}),
        json.dumps({"step": 1, "other": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}),
    ]
    for text in bad:
        meta.write_text(text)
        with pytest.raises(InvalidCheckpoint, match="metadata"):
            read_metadata(c, ["step"])
    meta.write_text(json.dumps({"step": 7, "tokens_seen": 1.5e9, "note": {"free": ["form"]}}))
    assert read_metadata(c, ["step", "tokens_seen"]) == {"step": 7, "tokens_seen": 1.5e9}
    meta.unlink()
    assert read_metadata(c, ["step"]) == {}


FAKE_GRADER = """
import math
import torch
SPLITS = {{"selection": 1, "test": 1}}
def split(name, cfg=None):
    return name
def evaluate(model, split, cfg=None):
    w = max(float(p.detach().abs().max()) for p in model.parameters())
    if {always}:
        raise ValueError("grader bug at " + __file__)
    return math.exp(w)       # overflows on weights the submission made large
def uninformative(model):
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    return model
"""


def _fake_grader(tmp_path: Path, always: bool) -> Path:
    d = tmp_path / ("grader_always" if always else "grader_weights")
    d.mkdir()
    (d / "__init__.py").write_text(textwrap.dedent(FAKE_GRADER.format(always=always)))
    return d


def test_worker_blames_the_grader_only_when_pristine_weights_fail_too(tmp_path, task, pristine):
    """Probe: the worker path on its own, with a grader whose evaluate() raises (a) only on the
    submission's weights (math.exp of a large weight), (b) on any model (a grader bug).
    Found open: both made the worker exit 1 (`error`). Now: (a) the large-weight candidates are invalid
    and the ordinary one is chosen; (b) stays a harness error, since the grader fails on pristine weights
    as well: a fault of the grader is never pinned on a submission."""
    p = _params(task)
    d = tmp_path / "ckpts"
    d.mkdir()
    big = {k: (v * 0 + 1e3 if i == 0 else v) for i, (k, v) in enumerate(p.items())}
    paths = []
    for step, tensors in ((1, p), (2, big), (3, big)):
        paths.append(d / f"ckpt_{step:08d}.safetensors")
        save_file({k: v.contiguous() for k, v in tensors.items()}, str(paths[-1]))
    spec = eval_spec(grade_setup(tmp_path, task), pristine, paths)
    res = run_worker(replace(spec, grader=str(_fake_grader(tmp_path, False))), tmp_path / "eval_a")
    assert res["chosen"] == paths[0].name
    by = {c["name"]: c for c in res["candidates"]}
    for n in (paths[1].name, paths[2].name):
        assert by[n]["valid"] is False and "OverflowError" in by[n]["reason"], by[n]
        _no_leak(by[n]["reason"])
    with pytest.raises(RuntimeError):
        run_worker(replace(spec, grader=str(_fake_grader(tmp_path, True))), tmp_path / "eval_b")


def test_a_cell_that_errors_the_same_way_twice_is_reported_not_retried(
    compose_cfg, tmp_path, task, monkeypatch, capsys
):
    """Probe: a harness fault that recurs identically (the training phase failing before it starts).
    Found open: every rerun retried the cell, silently, forever. Now: the first error is retried; the
    second identical one records the cell as done with status `error` and a reason saying it repeated,
    the final line says so, a further rerun skips it, and skip_done=false still reruns it."""
    import ai4ai.grading.seeds as grade_mod

    def broken(*a, **k):
        raise OSError("sandbox lost")

    monkeypatch.setattr(grade_mod, "run_training", broken)
    patch = write_patch(tmp_path, train_py_patch(task, "order = torch.Generator", "raise SystemExit(3)\n"))
    cfg = compose_cfg("config", CI + ["agent=patch", f"agent.patch={patch}"])
    pipeline.run(cfg, tmp_path / "first")
    first = json.loads((tmp_path / "first" / "result.json").read_text())
    assert first["status"] == "error" and "repeated" not in first["reason"]
    capsys.readouterr()
    pipeline.run(cfg, tmp_path / "second")  # resumes the first run dir at grading
    second = json.loads((tmp_path / "first" / "result.json").read_text())
    assert second["status"] == "error" and "repeated" in second["reason"], second["reason"]
    assert "repeated" in capsys.readouterr().out
    assert pipeline.run(cfg, tmp_path / "third") is None and not (tmp_path / "third").exists()
    with connect(Path(cfg.results_db)) as con:
        assert [s for (s,) in con.execute("SELECT status FROM results ORDER BY id")] == ["error", "error"]
    again = compose_cfg("config", CI + ["agent=patch", f"agent.patch={patch}", "skip_done=false"])
    pipeline.run(again, tmp_path / "fourth")
    assert (tmp_path / "fourth" / "result.json").exists()
