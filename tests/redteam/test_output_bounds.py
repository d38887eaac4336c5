"""Route: what training writes, copied without bounds. A sparse 2 GiB checkpoint, a flood of output
without newlines, thousands of files and a folder filled past any checkpoint's need: each is bounded
before any copy (the checkpoint size against the model's, the file count, the log with a marker)."""

import os

from ai4ai.grading.training import build_training_copy, checkpoint_limit, run_training, snapshot_checkpoints
from ai4ai.repo.submission import from_patch

from .conftest import grade_setup, needs_bwrap, train_py_patch


def _train(tmp_path, task, pristine, code):
    sub = from_patch(task, pristine, train_py_patch(task, "order = torch.Generator", code))
    assert sub.files and not sub.rejected, sub.rejected
    repo = build_training_copy(task, sub, tmp_path / "train_repo")
    return run_training(grade_setup(tmp_path, task, 240), repo, 0, tmp_path / "seed_0", [], {}, "probe")


def _du(path) -> int:
    return sum(os.lstat(os.path.join(r, f)).st_blocks * 512 for r, _, fs in os.walk(path) for f in fs)


def test_sparse_and_oversized_checkpoints_are_refused_before_any_copy(tmp_path, task):
    out = tmp_path / "out"
    out.mkdir()
    with open(out / "ckpt_00000009.safetensors", "wb") as f:  # 2 GiB that hold nothing
        f.truncate(2 << 30)
    (out / "ckpt_00000008.safetensors").write_bytes(os.urandom(1 << 20) * 2)  # dense, too big at ci
    honest = os.urandom(1000)
    (out / "ckpt_00000007.safetensors").write_bytes(honest)
    refused = {}
    taken = snapshot_checkpoints(out, tmp_path / "checkpoints", checkpoint_limit(task, "ci"), refused)
    assert [t.name for t in taken] == ["ckpt_00000007.safetensors"] and taken[0].read_bytes() == honest
    assert "ckpt_00000009.safetensors" in refused and "ckpt_00000008.safetensors" in refused, refused
    assert "more than the model's parameters need" in refused["ckpt_00000008.safetensors"]
    assert _du(tmp_path / "checkpoints") < 1 << 20


def test_sparse_file_with_a_small_size_is_refused(tmp_path, task):
    out = tmp_path / "out"
    out.mkdir()
    with open(out / "ckpt_00000001.safetensors", "wb") as f:
        f.truncate(200_000)  # under the size bound, but a hole
        f.seek(199_999)
        f.write(b"x")
    refused = {}
    assert snapshot_checkpoints(out, tmp_path / "checkpoints", checkpoint_limit(task, "ci"), refused) == []
    assert refused == {"ckpt_00000001.safetensors": "a sparse file"}


@needs_bwrap
def test_log_flood_without_newlines_is_truncated_with_a_marker(tmp_path, task, pristine):
    code = (
        "import sys as _s\n_chunk = 'y' * (1 << 20)\n"
        "for _ in range(64):\n    _s.stdout.write(_chunk)\n_s.stdout.flush()\nraise SystemExit(5)\n"
    )
    outcome, ckpts, reason = _train(tmp_path, task, pristine, code)
    log = tmp_path / "seed_0" / "train.log"
    assert log.stat().st_size < (8 << 20) + 4096
    assert "[ai4ai: log truncated at" in log.read_text(errors="replace")
    assert reason and "exited with code 5" in reason


@needs_bwrap
def test_thousands_of_files_end_the_run_as_a_sandbox_limit(tmp_path, task, pristine):
    code = "import time as _t\nfor _i in range(5000):\n    open(f'{args.out}/f{_i}', 'w').close()\n_t.sleep(120)\n"
    outcome, ckpts, reason = _train(tmp_path, task, pristine, code)
    assert outcome.limit and "more than 1024 files" in outcome.limit, outcome
    assert reason and reason.startswith("training ended by the sandbox") and not ckpts


@needs_bwrap
def test_filling_the_output_folder_ends_the_run(tmp_path, task, pristine):
    code = (
        "import os as _o, time as _t\nwith open(f'{args.out}/fill.bin', 'wb') as _f:\n"
        "    for _ in range(2048):\n        _f.write(_o.urandom(1 << 20))\n        _f.flush()\n_t.sleep(120)\n"
    )
    outcome, ckpts, reason = _train(tmp_path, task, pristine, code)
    assert outcome.limit and "MiB in its output folder" in outcome.limit, outcome
    assert _du(tmp_path / "seed_0" / "out") < 1 << 30
