"""Route 2 (the patch filter), route 7 (the harness's own tools, crafted file names) and the snapshot
side of route 8, tried on the real submission builders: from_patch and from_workspace."""

import json
import os
import shutil
import subprocess
import threading

import pytest

from ai4ai.core.console import say
from ai4ai.repo.submission import MAX_PATCH_BYTES, from_patch, from_workspace, unified_diff

from .conftest import copy_tree


def _diff(rel, old, new):
    return unified_diff(rel, old, new)


def _add(rel, text):
    return _diff(rel, None, text)


@pytest.mark.parametrize(
    "name,make,reason",
    [
        (
            "protected file",
            lambda r: _diff("model.py", (r / "model.py").read_text(), (r / "model.py").read_text() + "X = 1\n"),
            "protected file",
        ),
        ("protected deletion", lambda r: _diff("model.py", (r / "model.py").read_text(), None), "protected file"),
        ("dot-dot", lambda r: _add("algorithm/../model.py", "X = 1\n"), "escapes"),
        ("dot-dot out of the repo", lambda r: _add("../../grader_hidden/optimizer/grader.py", "X = 1\n"), "escapes"),
        ("absolute path", lambda r: "--- /dev/null\n+++ /etc/passwd\n@@ -0,0 +1 @@\n+x\n", "absolute path"),
        ("outside editable paths", lambda r: _add("sitecustomize.py", "import os\n"), "outside the editable paths"),
        (
            "nested in the editable folder",
            lambda r: _add("algorithm/sub/x.py", "X = 1\n"),
            "outside the editable paths",
        ),
        (
            "non-.py in the editable folder",
            lambda r: _add("algorithm/x.pth", "import os\n"),
            "outside the editable paths",
        ),
        ("data file", lambda r: _add("data/extra.u8", "abc\n"), "outside the editable paths"),
        ("odd characters", lambda r: _add("algorithm/a b.py", "X = 1\n"), "characters outside"),
        ("long string literal", lambda r: _add("algorithm/w.py", "W = '" + "A" * 5000 + "'\n"), "string literal"),
        ("long bytes literal", lambda r: _add("algorithm/w.py", "W = b'" + "A" * 5000 + "'\n"), "string literal"),
        ("long number literal", lambda r: _add("algorithm/w.py", "W = 0x" + "f" * 60 + "\n"), "numeric literal"),
        (
            "constant display",
            lambda r: _add("algorithm/w.py", "W = [" + ", ".join("0.1" for _ in range(400)) + "]\n"),
            "literal display",
        ),
        (
            "negative constant display",
            lambda r: _add("algorithm/w.py", "W = (" + ", ".join("-1" for _ in range(400)) + ")\n"),
            "literal display",
        ),
        (
            "oversized patch",
            lambda r: "".join(_add(f"algorithm/f{i}.py", "# " + "x" * 3000 + "\n" * 2) for i in range(40)),
            "limit",
        ),
    ],
)
def test_patch_filter_rejects(task, pristine, name, make, reason):
    """Route 2: a patch editing a protected file, escaping with `..`, with an absolute path, outside the
    editable paths, oversized, or smuggling weights as a long literal.
    Gains nothing: the file is rejected with a reason naming the route and nothing of it is applied."""
    sub = from_patch(task, pristine, make(task.repo))
    assert sub.files == {} and sub.patch == "", name
    assert sub.rejected and all(reason in r for r in sub.rejected.values()), sub.rejected


def test_rename_header_cannot_redirect_a_protected_file(task, pristine):
    """Route 2: a section whose old path is protected and new path editable (a rename) must not
    carry the protected file's text. Gains nothing: the hunks are applied to the editable file only."""
    old = (task.repo / "train.py").read_text()
    text = _diff("train.py", old, old + "# tail\n").replace("--- a/train.py", "--- a/model.py")
    sub = from_patch(task, pristine, text)
    assert list(sub.files) == ["train.py"] and sub.files["train.py"] == old + "# tail\n"


def _ws(tmp_path, task):
    return copy_tree(task.repo, tmp_path / "ws")


def test_workspace_filter_rejects_links_binaries_pipes_and_huge_files(tmp_path, task, pristine):
    """Route 2 (workspace form): a symlinked editable file (to the host's hidden secrets), a symlinked
    editable folder, a binary file, a FIFO and an oversized file.
    Gains nothing: each is rejected with its reason, nothing is read through a link, the harness does
    not block on the FIFO, and the accepted patch is empty."""
    ws = _ws(tmp_path, task)
    (ws / "optim.py").unlink()
    os.symlink(str(task.grader / "secrets.yaml"), ws / "optim.py")
    os.symlink(str(task.grader), ws / "algorithm" / "linked")
    (ws / "train.py").write_bytes((task.repo / "train.py").read_bytes() + b"\x00\x01weights")
    os.mkfifo(ws / "fifo.py")
    big = ws / "big.py"
    with open(big, "wb") as f:
        f.truncate(50 * MAX_PATCH_BYTES)
    sub = from_workspace(task, pristine, ws)
    assert sub.rejected == {
        "optim.py": "symlink",
        "algorithm/linked": "symlink",
        "train.py": "binary file",
        "fifo.py": "not a regular file",
    }
    assert sub.files == {} and sub.patch == ""
    assert "secret" not in json.dumps(sub.summary()).lower()


def test_snapshot_never_follows_a_link_swapped_in_while_it_reads(tmp_path, task, pristine):
    """Route 8 (the proxy snapshots the workspace while the agent runs): an agent that flips an editable
    file and the editable folder between real entries and symlinks to host files outside its sandbox,
    hoping the harness checks the regular file and then reads the link.
    Gains nothing: across hundreds of snapshots during the flipping, no host file's text enters a
    submission. (Found open: the walk checked paths, then read them; it now checks what it opened.)"""
    ws = _ws(tmp_path, task)
    canary = tmp_path / "host_secret"
    canary.mkdir()
    (canary / "leak.py").write_text("CANARY = 1\n")
    stop = threading.Event()

    def flip():
        f, d = ws / "algorithm" / "evil.py", ws / "algorithm"
        while not stop.is_set():
            try:
                f.unlink(missing_ok=True)
                f.write_text("x = 1\n")
                tmp = ws / "algorithm" / ".l"
                tmp.unlink(missing_ok=True)
                os.symlink(canary / "leak.py", tmp)
                os.replace(tmp, f)
                shutil.move(str(d), str(ws / "algo_real"))
                os.symlink(canary, d)
                os.unlink(d)
                shutil.move(str(ws / "algo_real"), str(d))
            except OSError:
                pass

    th = threading.Thread(target=flip, daemon=True)
    th.start()
    try:
        for _ in range(300):
            sub = from_workspace(task, pristine, ws)
            assert not any(v and "CANARY" in v for v in sub.files.values()), sub.files.keys()
    finally:
        stop.set()
        th.join(5)


def test_git_config_attributes_and_hooks_never_run(tmp_path, task, pristine):
    """Route 7: a workspace whose .git/config (fsmonitor, pager, diff external), .gitattributes (filter
    driver) and hooks would run code if the harness ran git there.
    Gains nothing: building the submission runs none of them (no marker file), and nothing under .git or
    .gitattributes enters the patch."""
    ws = _ws(tmp_path, task)
    marker = tmp_path / "PWNED_by_git"
    subprocess.run(["git", "init", "-q"], cwd=ws, check=True)
    cmd = f"touch {marker}"
    (ws / ".git" / "config").write_text(
        f"[core]\n\tfsmonitor = {cmd}\n\tpager = {cmd}\n\thooksPath = .git/hooks\n[diff]\n\texternal = {cmd}\n"
        f'[filter "x"]\n\tclean = {cmd}\n\tsmudge = {cmd}\n'
    )
    (ws / ".gitattributes").write_text("* filter=x diff=x\n")
    for hook in ("pre-commit", "post-checkout", "post-index-change", "fsmonitor-watchman"):
        h = ws / ".git" / "hooks" / hook
        h.parent.mkdir(parents=True, exist_ok=True)
        h.write_text(f"#!/bin/sh\n{cmd}\n")
        h.chmod(0o755)
    (ws / "optim.py").write_text((task.repo / "optim.py").read_text().replace("3e-3", "2e-3"))
    sub = from_workspace(task, pristine, ws)
    assert list(sub.files) == ["optim.py"]
    assert sub.rejected == {".gitattributes": "outside the editable paths"}
    assert ".git" not in sub.patch and not marker.exists()


@pytest.mark.parametrize(
    "name",
    [
        "new\nline.py",
        "esc\x1b[2Jclear.py",
        "-rf.py",
        "a" * 250 + ".py",
        "bad\udcff.py",
        "quote'\".py",
        "semi;rm -rf.py",
    ],
)
def test_crafted_file_names_cannot_break_paths_or_logs(tmp_path, task, pristine, capsys, name):
    """Route 7: file names crafted to break paths, logs or the terminal (newline, escape sequences,
    a leading dash, 250 characters, undecodable bytes, quotes, shell metacharacters).
    Gains nothing: the file is rejected (never applied), the records stay valid JSON, and printing the
    rejection neither crashes the harness nor passes a control character to the terminal.
    (Found open: an undecodable name crashed `say`; it now escapes what it cannot print.)"""
    ws = _ws(tmp_path, task)
    try:
        (ws / "algorithm" / name).write_text("X = 1\n")
    except OSError as e:  # a name the filesystem refuses is not a route
        pytest.skip(f"filesystem refuses the name: {e}")
    sub = from_workspace(task, pristine, ws)
    if sub.files:  # a plain name that only looks hostile is an ordinary editable file
        assert list(sub.files) == [f"algorithm/{name}"] and name.isprintable() and "/" not in name
    else:
        assert len(sub.rejected) == 1, sub.rejected
    json.dumps(sub.summary())
    say("submission: " + "; ".join([*sub.files, *(f"{p} ({r})" for p, r in sub.rejected.items())]))
    printed = capsys.readouterr().out
    assert "\x1b" not in printed and printed.count("\n") == 1
