import os

import pytest

from ai4ai.submission import (MAX_PATCH_BYTES, PatchFormatError, apply, from_patch, from_workspace,
                              parse_patch, unified_diff)

from .conftest import example


def _sub(task, repo, ws):
    return from_workspace(task, repo, ws)


def test_unchanged_workspace_is_an_empty_submission(optimizer_task, repo_copy):
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert sub.files == {} and sub.rejected == {} and sub.patch == ""


def test_editable_change_round_trips(optimizer_task, repo_copy, tmp_path):
    p = repo_copy / "optim.py"
    p.write_text(p.read_text().replace("LR = 3e-3", "LR = 2e-3"))
    (repo_copy / "algorithm" / "sched.py").write_text("def f():\n    return 1")   # no trailing newline
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


@pytest.mark.parametrize("rel,reason", [
    ("model.py", "protected"),
    ("data.py", "protected"),
    ("notes/plan.py", "outside the editable paths"),
    ("algorithm/weights.txt", "outside the editable paths"),
])
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
    lines = "".join(f"X{i} = {i}\n" for i in range(MAX_PATCH_BYTES // 8))
    (repo_copy / "algorithm" / "big.py").write_text(lines)
    (repo_copy / "optim.py").write_text((repo_copy / "optim.py").read_text() + "\n# small change\n")
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert sub.files == {} and "limit" in sub.rejected["algorithm/big.py"] and "optim.py" in sub.rejected


@pytest.mark.parametrize("code,what", [
    ('W = "' + "ab" * 3000 + '"\n', "string literal"),
    ("W = b'" + "\\x01" * 2000 + "'\n", "string literal"),
    ("W = 0." + "1" * 60 + "\n", "numeric literal"),
    ("W = [" + ", ".join(str(i * 0.5) for i in range(400)) + "]\n", "literal display"),
    ("W = {" + ", ".join(f"{i}: -{i}" for i in range(300)) + "}\n", "literal display"),
])
def test_long_literals_are_rejected(optimizer_task, repo_copy, code, what):
    (repo_copy / "algorithm" / "smuggle.py").write_text(code)
    sub = _sub(optimizer_task, optimizer_task.repo, repo_copy)
    assert what in sub.rejected["algorithm/smuggle.py"]


@pytest.mark.parametrize("path,reason", [
    ("/etc/passwd", "absolute path"),
    ("../escape.py", "path escapes"),
    ("algorithm/../model.py", "path escapes"),
    ("model.py", "protected"),
    ("algorithm/we ird.py", "characters"),
])
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
