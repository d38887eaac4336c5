"""Property-based fuzzers for the patch reader and the workspace walk (issue 39, parts 4 and 5).

Invariants:
- every byte of a patch is measured: for every file a submission accepts, its path, and every byte
  of a created file, are in the stream the information budget compresses (leaks.measured_stream), the
  stream is at least as long as the paths and added text that crossed, the caps on names hold and
  the stream compresses within the budget; the reader raises nothing but PatchFormatError;
- the walk never raises anything but a clean rejection (WalkRefused), lists no more than its bounds,
  and what it reports is printable ASCII.
Each fuzzer is held to well under 30 s (max_examples, no per-example deadline on a shared machine).
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai4ai.core.task import load_task
from ai4ai.repo.leaks import (
    MAX_NAME_BYTES,
    MAX_NEW_FILES,
    MAX_PATH_BYTES,
    compressed_size,
    information_budget,
    measure_added,
    measured_stream,
)
from ai4ai.repo.patches import PatchFormatError, parse_patch
from ai4ai.repo.submission import from_patch, from_workspace, repo_files, unified_diff
from ai4ai.repo.workspace import pristine_copy
from ai4ai.sandbox import walk as walk_mod
from ai4ai.sandbox.walk import WalkRefused, remove_tree, walk

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
MANY = settings(FUZZ, max_examples=300)  # the reader is cheap: more examples in the same few seconds

TASK = load_task("optimizer")


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    return pristine_copy(TASK, tmp_path_factory.mktemp("fuzz") / "pristine")


# --------------------------------------------------------------------------- the patch reader

name_chars = st.sampled_from(list("abcXYZ019_.-/ \t\n\\é☃\x00\x1b") + ["..", "//", "a" * 40])
names = st.lists(name_chars, min_size=1, max_size=12).map("".join)
paths = st.one_of(
    st.sampled_from(["train.py", "optim.py", "algorithm/__init__.py", "model.py", "/etc/passwd"]),
    names.map(lambda n: f"algorithm/{n}.py"),
    names,
    st.integers(1, 300).map(lambda n: "algorithm/" + "w" * n + ".py"),
)
contents = st.one_of(
    st.none(),
    st.just(""),
    st.lists(st.text(max_size=60), max_size=8).map(lambda ls: "".join(ln.replace("\x00", "") + "\n" for ln in ls)),
)


_KNOWN: dict = {}


def _old(pristine: Path, rel: str) -> str | None:
    """The pristine text of a repo file (None for any other path, however it is spelled)."""
    if pristine not in _KNOWN:
        _KNOWN[pristine] = repo_files(pristine)
    return (pristine / rel).read_text() if rel in _KNOWN[pristine] else None


@MANY
@given(files=st.dictionaries(paths, contents, min_size=1, max_size=24))
def test_every_byte_of_an_accepted_patch_is_measured(pristine, files):
    patch = "".join(unified_diff(rel, _old(pristine, rel), new) for rel, new in files.items())
    try:
        sub = from_patch(TASK, pristine, patch, scale="ci")
    except PatchFormatError:
        return
    texts = {rel: (_old(pristine, rel), new) for rel, new in sub.files.items()}
    stream = measured_stream(texts)
    crossed = 0
    for rel, (old, new) in texts.items():
        assert rel in stream
        crossed += len(rel.encode())
        if new is not None:
            added = measure_added(rel, old, new).text
            assert added in stream
            crossed += len(added.encode())
            if old is None:
                assert new in stream  # a created file crosses whole
    assert len(stream.encode()) >= crossed
    assert sum(old is None and new is not None for old, new in texts.values()) <= MAX_NEW_FILES
    assert all(len(rel.encode()) <= MAX_PATH_BYTES for rel in texts)
    chosen = [rel for rel, (old, new) in texts.items() if old is None or new is None]
    assert not chosen or sum(len(rel.encode()) for rel in texts) <= MAX_NAME_BYTES
    assert compressed_size(stream.encode()) <= information_budget(TASK, "ci")[0]
    again = from_patch(TASK, pristine, sub.patch, scale="ci")  # the written patch is what is applied
    assert again.files == sub.files


header_lines = st.sampled_from(
    [
        "--- a/train.py\n",
        "+++ b/train.py\n",
        "--- /dev/null\n",
        "+++ b/algorithm/x.py\n",
        "+++ /dev/null\n",
        "@@ -1,2 +1,3 @@\n",
        "@@ -0,0 +1 @@\n",
        "@@ garbage\n",
        "+x = 1\n",
        "-import torch\n",
        " \n",
        "\\ No newline at end of file\n",
        "diff --git a/x b/x\n",
        "new file mode 100644\n",
        "new file mode 120000\n",
        "old mode 100644\n",
        "rename from a\n",
        "index 000..111 100644\n",
        "GIT binary patch\n",
        "\n",
    ]
)


@MANY
@given(parts=st.lists(st.one_of(header_lines, st.text(max_size=30)), max_size=40))
def test_the_reader_raises_only_patch_format_errors(pristine, parts):
    text = "".join(parts)
    try:
        parse_patch(text)
        sub = from_patch(TASK, pristine, text, scale="ci")
    except PatchFormatError:
        return
    for rel in sub.files:
        assert rel.isascii() and rel.isprintable()


# --------------------------------------------------------------------------- the workspace walk

odd_names = st.one_of(
    st.binary(min_size=1, max_size=20).map(lambda b: b.replace(b"/", b"_").replace(b"\0", b"_")),
    st.sampled_from([b"a.py", b"x\ny.py", b"\xff\xfe.py", b"..py", b"-", b" ", b"a" * 250]),
).filter(lambda b: b not in (b".", b".."))
entry = st.tuples(
    st.integers(0, 40),  # how deep under the fuzz root
    st.sampled_from(["file", "dir", "link", "fifo", "big"]),
    odd_names,
    st.sampled_from([b"..", b"/", b"loop", b"a.py", b"../../train.py"]),
)


def _build(root: bytes, entries) -> None:
    for depth, kind, name, target in entries:
        where = root
        for _ in range(depth):
            where = os.path.join(where, b"d")
            try:
                os.mkdir(where)
            except FileExistsError:
                if not os.path.isdir(where) or os.path.islink(where):
                    return
        p = os.path.join(where, name)
        if os.path.lexists(p):
            continue
        try:
            if kind == "file":
                with open(p, "wb") as f:
                    f.write(b"x = 1\n")
            elif kind == "big":
                with open(p, "wb") as f:
                    f.truncate(1 << 33)
            elif kind == "dir":
                os.mkdir(p)
            elif kind == "link":
                os.symlink(target, p)
            else:
                os.mkfifo(p)
        except OSError:  # a name too long for the file system, say
            continue


@FUZZ
@given(
    entries=st.lists(entry, max_size=30),
    where=st.sampled_from([b"algorithm", b"scratch", b"."]),
    max_entries=st.sampled_from([120, 400, 100_000]),
    max_depth=st.sampled_from([3, 32]),
)
def test_the_walk_rejects_cleanly_within_its_bounds(pristine, entries, where, max_entries, max_depth):
    tmp = Path(tempfile.mkdtemp(prefix="ai4ai-fuzz-"))
    ws = tmp / "ws"
    shutil.copytree(pristine, ws, copy_function=os.link)  # hard links: nothing here writes a pristine file
    os.chmod(ws, 0o755)
    os.chmod(ws / "algorithm", 0o755)
    root = os.path.join(os.fsencode(ws), where)
    os.makedirs(root, exist_ok=True)
    _build(root, entries)
    old = walk_mod.MAX_ENTRIES, walk_mod.MAX_DEPTH
    walk_mod.MAX_ENTRIES, walk_mod.MAX_DEPTH = max_entries, max_depth
    try:
        listed, problems = 0, {}
        try:
            for rel, _, found in walk(ws, problems=problems):
                listed += len(found)
                assert rel.count("/") + (rel != "") <= max_depth
            assert listed <= max_entries
        except WalkRefused:
            pass
        try:
            sub = from_workspace(TASK, pristine, ws, scale="ci")
        except WalkRefused as e:
            assert str(e).isascii() and str(e).isprintable()
            return
        for rel in sub.rejected:
            assert rel.isascii() and rel.isprintable()
        assert all(rel.isascii() and rel.isprintable() for rel in sub.files)
        assert not any(rel in sub.files for rel in ("model.py", "data.py"))  # protected: never through
    finally:
        walk_mod.MAX_ENTRIES, walk_mod.MAX_DEPTH = old
        remove_tree(tmp)
