import os
import shutil

import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.core.task import SCALES, list_tasks, load_task
from ai4ai.repo.leaks import INFO_FLOOR_BYTES, INFO_FRACTION, information_budget
from ai4ai.repo.patches import PatchFormatError, parse_patch
from ai4ai.repo.submission import MAX_PATCH_BYTES, apply, from_patch, from_workspace, unified_diff

from .conftest import example


def _sub(task, repo, ws):
    return from_workspace(task, repo, ws)


def test_unchanged_workspace_is_an_empty_submission(optimizer_task, repo_copy):
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert sub.files == {} and sub.rejected == {} and sub.patch == ""


def test_editable_change_round_trips(optimizer_task, repo_copy, tmp_path):
    p = repo_copy / "optim.py"
    p.write_text(p.read_text().replace("LR = 3e-3", "LR = 2e-3"))
    (repo_copy / "algorithm" / "sched.py").write_text("def f():\n    return 1")  # no trailing newline
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert sorted(sub.files) == ["algorithm/sched.py", "optim.py"] and not sub.rejected
    again = from_patch(optimizer_task, optimizer_task.repo, sub.patch)
    assert again.files == sub.files
    dest = tmp_path / "applied"
    import shutil

    shutil.copytree(optimizer_task.repo, dest)
    apply(again, dest)
    assert (dest / "optim.py").read_text() == p.read_text()
    assert (dest / "algorithm" / "sched.py").read_text() == "def f():\n    return 1"


@pytest.mark.parametrize(
    "rel,reason",
    [
        ("model.py", "protected"),
        ("data.py", "protected"),
        ("notes/plan.py", "outside the editable paths"),
        ("algorithm/weights.txt", "outside the editable paths"),
    ],
)
def test_changes_outside_the_editable_region_are_rejected(optimizer_task, repo_copy, rel, reason):
    target = repo_copy / rel
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():
        target.write_text(target.read_text() + "\nHACK = 1\n")
    else:
        target.write_text("x = 1\n")
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert reason in sub.rejected[rel] and rel not in sub.files


def test_symlink_is_rejected(optimizer_task, repo_copy):
    (repo_copy / "optim.py").unlink()
    os.symlink("/etc/passwd", repo_copy / "optim.py")
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert sub.rejected["optim.py"] == "symlink" and "optim.py" not in sub.files


def test_binary_is_rejected(optimizer_task, repo_copy):
    (repo_copy / "algorithm" / "blob.py").write_bytes(b"x = 1\n\x00\x01\x02")
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert "binary" in sub.rejected["algorithm/blob.py"]


def test_oversized_patch_rejects_everything(optimizer_task, repo_copy):
    # repetitive text: within the information budget, so the size cap is what rejects it
    lines = "x = y  # the same line again\n" * (MAX_PATCH_BYTES // 20)
    (repo_copy / "algorithm" / "big.py").write_text(lines)
    (repo_copy / "optim.py").write_text((repo_copy / "optim.py").read_text() + "\n# small change\n")
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert sub.files == {} and "limit" in sub.rejected["algorithm/big.py"] and "optim.py" in sub.rejected


@pytest.mark.parametrize(
    "code,what",
    [
        ('W = "' + "ab" * 3000 + '"\n', "string literal"),
        ("W = b'" + "\\x01" * 2000 + "'\n", "string literal"),
        ("W = 0." + "1" * 60 + "\n", "numeric literal"),
        ("W = [" + ", ".join(str(i * 0.5) for i in range(400)) + "]\n", "literal display"),
        ("W = {" + ", ".join(f"{i}: -{i}" for i in range(300)) + "}\n", "literal display"),
    ],
)
def test_long_literals_are_rejected(optimizer_task, repo_copy, code, what):
    (repo_copy / "algorithm" / "smuggle.py").write_text(code)
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert what in sub.rejected["algorithm/smuggle.py"]


@pytest.mark.parametrize(
    "path,reason",
    [
        ("/etc/passwd", "absolute path"),
        ("../escape.py", "path escapes"),
        ("algorithm/../model.py", "path escapes"),
        ("model.py", "protected"),
        ("algorithm/we ird.py", "characters"),
    ],
)
def test_patch_paths_are_filtered(optimizer_task, path, reason):
    patch = f"--- /dev/null\n+++ b/{path.lstrip('/') if path.startswith('/') else path}\n@@ -0,0 +1,1 @@\n+x = 1\n"
    if path.startswith("/"):
        patch = f"--- /dev/null\n+++ {path}\n@@ -0,0 +1,1 @@\n+x = 1\n"
    sub = from_patch(optimizer_task, optimizer_task.repo, patch)
    assert sub.files == {}
    assert any(reason in r for r in sub.rejected.values()), sub.rejected


def test_a_hunk_that_does_not_apply_is_rejected(optimizer_task):
    patch = "--- a/optim.py\n+++ b/optim.py\n@@ -1,1 +1,1 @@\n-this line is not there\n+x = 1\n"
    sub = from_patch(optimizer_task, optimizer_task.repo, patch)
    assert "does not apply" in sub.rejected["optim.py"] and sub.files == {}


def test_malformed_patch_raises():
    with pytest.raises(PatchFormatError):
        parse_patch("--- a/x.py\nnot a plus line\n")


@pytest.mark.parametrize("name", ["warmup_cosine.patch", "muon.patch"])
def test_examples_apply_cleanly(optimizer_task, name):
    sub = from_patch(optimizer_task, optimizer_task.repo, example(name).read_text())
    assert sub.files and not sub.rejected


def test_unified_diff_of_identical_text_is_empty():
    assert unified_diff("a.py", "x\n", "x\n") == ""


# --------------------------------------------------------------------------- information budget

EXAMPLES = sorted((PROJECT_ROOT / "examples").glob("*/*.patch"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
@pytest.mark.parametrize("scale", [None, "ci", "smoke", "full"])
def test_every_example_is_within_the_information_budget(path, scale):
    """The budget is sized so that honest patches pass: every shipped example, at every scale and
    at the strictest (no scale named)."""
    task = load_task(path.parent.name)
    sub = from_patch(task, task.repo, path.read_text(), scale=scale)
    assert sub.files and not sub.rejected, sub.rejected


def test_information_budget_is_sized_per_scale_against_the_model():
    task = load_task("pruning")
    floor = information_budget(load_task("distillation"), "ci")[0]
    assert floor == INFO_FLOOR_BYTES  # a 14k-parameter model: the floor
    full = information_budget(task, "full")[0]
    assert full == int(INFO_FRACTION * 2 * task.scale("full").n_params) > information_budget(task, "ci")[0]
    assert information_budget(task)[0] == min(information_budget(task, s)[0] for s in task.scales)


def test_a_rejection_names_the_file_the_kind_and_the_line(optimizer_task, repo_copy):
    (repo_copy / "algorithm" / "notes.py").write_text("X = 1\n# " + "xy12QZ34" * 40 + "\n")
    (repo_copy / "optim.py").write_text((repo_copy / "optim.py").read_text() + "\n# tuned later\n")
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert list(sub.files) == ["optim.py"]
    assert sub.rejected == {
        "algorithm/notes.py": "320 characters of base64-like runs (32+ characters) from "
        "line 2 (320 in the patch, allowance 128)"
    }


def test_only_added_text_counts(optimizer_task, repo_copy):
    """Editing a file counts what the edit adds, not the file: a file holding many constants
    already may be changed by one line."""
    p = repo_copy / "algorithm" / "consts.py"
    p.write_text("".join(f"C{i} = {i}\n" for i in range(200)))
    first = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert "algorithm/consts.py" in first.files
    base = repo_copy.parent / "base"
    shutil.copytree(repo_copy, base)
    p.write_text(p.read_text() + "".join(f"D{i} = {i}\n" for i in range(100)))
    assert "algorithm/consts.py" in _sub(optimizer_task, base, repo_copy).files  # 100 added
    assert "numeric constants" in _sub(optimizer_task, optimizer_task.repo, repo_copy).rejected["algorithm/consts.py"]


COUNT_PARAMS = """
import json, sys
from pathlib import Path
out = {}
scales = json.loads(sys.argv[2])
for name, repo in json.loads(sys.argv[1]).items():
    sys.path.insert(0, repo)
    from model import build_model
    out[name] = {s: sum(p.numel() for p in build_model(s).parameters()) for s in scales}
    sys.path.remove(repo)
    for mod in [m for m, v in sys.modules.items() if str(getattr(v, "__file__", "") or "").startswith(repo)]:
        del sys.modules[mod]        # the next repo has its own model, config, data modules
print(json.dumps(out))
"""


def test_declared_parameter_counts_match_the_models():
    """n_params in each task's scales (what the budget is sized against) is what the repo's
    build_model(scale) builds: rebuilt here so the declaration cannot go stale."""
    import json
    import subprocess
    import sys

    tasks = {t: load_task(t) for t in list_tasks()}
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            COUNT_PARAMS,
            json.dumps({t: str(v.repo) for t, v in tasks.items()}),
            json.dumps(SCALES),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    built = json.loads(r.stdout.splitlines()[-1])
    declared = {t: {s: b.n_params for s, b in v.scales.items()} for t, v in tasks.items()}
    assert declared == built
