"""Route 11 (losing the run): a workspace the harness cannot walk after the window.

As filed (issue 39, part 5): a folder tree 5,000 levels deep in the workspace made the walk after the
window (from_workspace's os.fwalk, which recurses) raise RecursionError. Measured before the fix with
the deep tree below: from_workspace raised RecursionError in 0.06 s, and pipeline.run with an agent
that made that tree raised it out of the run: no result.json, no database row, no cell mark, so
the cell silently ran again from scratch.

Now the walk (ai4ai.sandbox.walk) keeps its own stack and its bounds: a folder deeper than MAX_DEPTH
is rejected unwalked, more than MAX_ENTRIES entries refuse the workspace (WalkRefused), files that a
submission could not carry are never read, and any failure after the agent phase is recorded against
the cell (pipeline.record_failure).
"""

import json
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ai4ai import pipeline
from ai4ai.grading.training import out_guard
from ai4ai.repo.submission import from_workspace
from ai4ai.sandbox import walk as walk_mod
from ai4ai.sandbox.walk import WalkRefused, remove_tree

from .conftest import CI, copy_tree

DEEP = 5_000


def make_deep(parent: Path, depth: int = DEEP, name: str = "d") -> None:
    """A chain of `depth` folders under parent/deep (by descriptors: the path is longer than PATH_MAX)."""
    (parent / "deep").mkdir()
    fd = os.open(parent / "deep", os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("weights.py", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("W = 1\n")
    finally:
        os.close(fd)


@pytest.fixture
def ws(tmp_path, task):
    w = copy_tree(task.repo, tmp_path / "ws")
    yield w
    remove_tree(w)  # shutil.rmtree (pytest's cleanup) recurses too


def test_a_deep_tree_is_rejected_not_a_crash(ws, task, pristine):
    """5,000 levels: rejected as one entry, the rest of the submission as usual."""
    make_deep(ws)
    (ws / "optim.py").write_text((ws / "optim.py").read_text() + "\n# tuned\n")
    sub = from_workspace(task, pristine, ws, scale="ci")
    assert list(sub.files) == ["optim.py"]
    deep = [r for p, r in sub.rejected.items() if p.startswith("deep/")]
    assert deep == [f"folder more than {walk_mod.MAX_DEPTH} levels deep: not walked"], sub.rejected


def test_too_many_entries_refuse_the_workspace(ws, task, pristine, monkeypatch):
    """Wide: more entries than the walk lists is a clean WalkRefused (the real bound, 100,000, is
    driven through pipeline.run below; here it is lowered to keep this fast)."""
    monkeypatch.setattr(walk_mod, "MAX_ENTRIES", 2_000)
    (ws / "scratch").mkdir()
    for i in range(2_500):
        (ws / "scratch" / f"f{i}").write_bytes(b"")
    with pytest.raises(WalkRefused, match="more than 2,000 entries"):
        from_workspace(task, pristine, ws, scale="ci")


def test_huge_sparse_files_are_never_read(ws, task, pristine):
    """1 TB (sparse) in an editable file and in a scratch file: rejected on their size, not read."""
    for rel in ("algorithm/huge.py", "scratch/huge.bin"):
        (ws / rel).parent.mkdir(exist_ok=True)
        with open(ws / rel, "wb") as f:
            f.truncate(1 << 40)
    sub = from_workspace(task, pristine, ws, scale="ci")
    assert "file of 1099511627776 bytes" in sub.rejected["algorithm/huge.py"] and not sub.files
    assert "scratch/huge.bin" not in sub.rejected  # never carried, never read, never listed (as before)


def test_symlink_loops_and_links_out_are_rejected(ws, task, pristine):
    os.symlink("loop", ws / "algorithm" / "loop")
    os.symlink("..", ws / "algorithm" / "up")
    os.symlink("/", ws / "root")
    os.symlink("b.py", ws / "algorithm" / "a.py")
    os.symlink("a.py", ws / "algorithm" / "b.py")
    sub = from_workspace(task, pristine, ws, scale="ci")
    assert not sub.files
    for rel in ("algorithm/up", "root", "algorithm/a.py", "algorithm/b.py"):
        assert sub.rejected[rel] == "symlink", (rel, sub.rejected)
    assert "algorithm/loop" not in sub.rejected  # a link that could never be carried: not listed, as before


# root reads a folder whatever its mode: as root, the walk runs in a child without the two capabilities
# that let it (setpriv drops them from the bounding set, so the kernel checks the mode as for anyone)
_WALK_AS_ANYONE = """
import json, sys
from pathlib import Path
from ai4ai.core.task import load_task
from ai4ai.repo.submission import from_workspace
sub = from_workspace(load_task("optimizer"), Path(sys.argv[1]), Path(sys.argv[2]), scale="ci")
print(json.dumps({"files": sorted(sub.files), "rejected": sub.rejected}))
"""


def test_an_unreadable_folder_keeps_the_pristine_files_under_it(ws, task, pristine):
    """algorithm/ made unreadable: its pristine files are not taken as deleted (they are kept, with a
    reason), and nothing raises."""
    os.chmod(ws / "algorithm", 0)
    try:
        if os.geteuid() == 0:
            out = subprocess.run(
                ["setpriv", "--bounding-set", "-dac_override,-dac_read_search", sys.executable, "-c", _WALK_AS_ANYONE]
                + [str(pristine), str(ws)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert out.returncode == 0, out.stderr
            sub = json.loads(out.stdout.splitlines()[-1])
            files, rejected = sub["files"], sub["rejected"]
        else:
            sub = from_workspace(task, pristine, ws, scale="ci")
            files, rejected = sub.files, sub.rejected
    finally:
        os.chmod(ws / "algorithm", stat.S_IRWXU)
    assert not files
    assert "could not be read" in rejected["algorithm"]
    assert "kept as it was" in rejected["algorithm/__init__.py"]


def test_odd_names_are_shown_escaped(ws, task, pristine):
    """Names with newlines, control characters and bytes that are not UTF-8: rejected, listed escaped,
    and the submission's record is printable ASCII JSON."""
    odd = [b"algorithm/a\nb.py", b"algorithm/\xff\xfe.py", b"scratch\x1b[2J.txt", b"algorithm/tab\there.py"]
    for raw in odd:
        with open(os.path.join(os.fsencode(ws), raw), "wb") as f:
            f.write(b"x = 1\n")
    sub = from_workspace(task, pristine, ws, scale="ci")
    assert not sub.files and len(sub.rejected) == len(odd)
    text = json.dumps(sub.summary())
    assert text.isascii() and all(k.isprintable() for k in sub.rejected), sub.rejected
    assert all("characters outside" in r for r in sub.rejected.values())


def test_a_fifo_and_a_socket_do_not_block(ws, task, pristine):
    import socket

    os.mkfifo(ws / "algorithm" / "pipe.py")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(ws / "algorithm" / "sock.py"))
    try:
        sub = from_workspace(task, pristine, ws, scale="ci")
    finally:
        s.close()
    assert sub.rejected["algorithm/pipe.py"] == sub.rejected["algorithm/sock.py"] == "not a regular file"


def test_a_deep_output_folder_is_a_limit_not_a_crash(tmp_path):
    """The training run's own output folder, walked by the sandbox's watch: 5,000 levels (the old
    os.walk raised RecursionError, out of the grading) is now a limit that ends the phase."""
    out = tmp_path / "out"
    out.mkdir()
    make_deep(out, depth=DEEP)
    try:
        why = out_guard(out, max_bytes=1 << 30)()
        assert why and "levels deep" in why
    finally:
        remove_tree(out)


# --------------------------------------------------------------------------- through the run

TREE = (
    "import os\n"
    "os.mkdir('deep'); fd = os.open('deep', os.O_RDONLY)\n"
    "for _ in range(5000):\n"
    "    os.mkdir('d', dir_fd=fd); n = os.open('d', os.O_RDONLY, dir_fd=fd); os.close(fd); fd = n\n"
    "os.mkdir('wide')\n"
    "for i in range(100_001): os.close(os.open('wide/' + str(i), os.O_CREAT | os.O_WRONLY, 0o644))\n"
)


def _rows(db: Path):
    with sqlite3.connect(db) as con:
        results = con.execute("SELECT status, json_extract(result, '$.reason') FROM results").fetchall()
        cells = con.execute("SELECT phase FROM cells").fetchall()
    return results, [c[0] for c in cells]


def test_a_refused_workspace_is_recorded_against_the_cell(compose_cfg, tmp_path):
    """The agent leaves a tree 5,000 levels deep and 100,001 files wide. Before: RecursionError out of
    pipeline.run, nothing recorded. Now: result.json `invalid` with the reason, the database row, the
    cell marked done (a rerun skips it)."""
    cfg = compose_cfg("config", CI + ["agent=command", "agent.command=true"])
    cfg.agent.command = f"python3 - <<'EOF'\n{TREE}EOF\n"  # no braces in TREE: the command is a template
    run_dir = tmp_path / "run"
    try:
        pipeline.run(cfg, run_dir)
        res = json.loads((run_dir / "result.json").read_text())
        assert res["status"] == "invalid", res["reason"]
        assert "workspace was refused" in res["reason"] and "100,000 entries" in res["reason"]
        results, phases = _rows(Path(cfg.results_db))
        assert results == [("invalid", res["reason"])] and phases == ["graded"]
        assert pipeline.run(cfg, tmp_path / "again") is None and not (tmp_path / "again").exists()
    finally:
        if (run_dir / "workspace").exists():
            remove_tree(run_dir / "workspace")


def test_a_harness_fault_after_the_window_is_recorded(compose_cfg, tmp_path, monkeypatch):
    """Any other exception once the agent phase started (here the submission step itself failing) is
    `error` with its reason and traceback, a database row, and the cell marked error: never lost."""

    def broken(*a, **k):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(pipeline, "take_submission", broken)
    cfg = compose_cfg("config", CI + ["agent=command", "agent.command=true"])
    run_dir = tmp_path / "run"
    pipeline.run(cfg, run_dir)
    res = json.loads((run_dir / "result.json").read_text())
    assert res["status"] == "error" and "RecursionError" in res["reason"]
    assert "Traceback" in (run_dir / ".harness" / "faults.log").read_text()
    results, phases = _rows(Path(cfg.results_db))
    assert [s for s, _ in results] == ["error"] and phases == ["error"]


def test_a_submission_marked_before_the_tree_grew_still_stands(tmp_path, ws, task, pristine, monkeypatch):
    """The agent marked a submission (ai4ai-proxy --submit), then left a tree over the bounds: under the
    `marked` policy the marked submission is taken; under `final` the refusal stands."""
    from types import SimpleNamespace

    monkeypatch.setattr(walk_mod, "MAX_ENTRIES", 500)
    (ws / "optim.py").write_text((ws / "optim.py").read_text() + "\n# marked\n")
    marked = from_workspace(task, pristine, ws, scale="ci")
    (ws / "wide").mkdir()
    for i in range(600):
        (ws / "wide" / f"f{i}").write_bytes(b"")
    ctx = SimpleNamespace(task=task, scale="ci", run_dir=tmp_path / "run")
    ctx.run_dir.mkdir()
    server = SimpleNamespace(marked=marked, snapshots=[])
    outcome = SimpleNamespace(error=None)
    sub = pipeline.take_submission(ctx, SimpleNamespace(submission="marked"), pristine, ws, server, outcome)
    assert sub is marked and list(sub.files) == ["optim.py"]
    assert json.loads((ctx.run_dir / "submission.json").read_text())["source"] == "marked"
    with pytest.raises(WalkRefused):
        pipeline.take_submission(ctx, SimpleNamespace(submission="final"), pristine, ws, server, outcome)
