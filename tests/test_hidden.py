"""The hidden graders' loading (ai4ai.core.hidden): every grader a package `ai4ai_hidden.<task>`, which
imports the graders' shared library grader_hidden/common/ as its sibling wherever the grader's folder
lies; the library is no task; `uses_common` (what the task version reads) finds the imports that reach
the library and nothing else; `write_splits` is the one writer of split files."""

import hashlib
import io
import shutil
import sys

import numpy as np
import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.core import hidden
from ai4ai.core.task import list_tasks, load_task


@pytest.fixture
def fresh_modules():
    """Remove the grader modules a test loads under names of its own, so no other test sees them."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith((f"{hidden.PACKAGE}.copy_", f"{hidden.PACKAGE}.bare_")):
            del sys.modules[name]


def test_a_grader_copied_elsewhere_imports_the_shared_library_of_the_project(tmp_path, fresh_modules):
    """Tests point tasks at copies of their grader folder (tests/conftest.graded_context): such a copy has
    no grader_hidden/common beside it, and still imports the library, and splits exactly as the original."""
    copy = tmp_path / "elsewhere" / "grader"
    shutil.copytree(PROJECT_ROOT / "grader_hidden" / "pruning", copy, ignore=shutil.ignore_patterns("__pycache__"))
    g = hidden.load_grader("copy_pruning", copy)
    assert g.__name__ == f"{hidden.PACKAGE}.copy_pruning"
    G = sys.modules[f"{g.__name__}.grader"]
    assert G.hmm.__file__ == str(PROJECT_ROOT / "grader_hidden" / "common" / "hmm.py")
    assert G.hmm.__name__ == f"{hidden.PACKAGE}.common.hmm"
    original = hidden.load_grader("pruning", PROJECT_ROOT / "grader_hidden" / "pruning")
    assert np.array_equal(g.split("validation"), original.split("validation"))
    assert g.split("validation").shape == (original.SPLITS["validation"], 64)
    assert hidden.load_grader("copy_pruning", tmp_path / "anywhere") is g  # loaded once per process


def test_load_grader_keeps_its_errors_and_refuses_the_library(tmp_path, fresh_modules):
    with pytest.raises(FileNotFoundError, match="a hidden grader is a package"):
        hidden.load_grader("bare_missing", tmp_path / "nothing")
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "__init__.py").write_text("SPLITS = {}\n")
    with pytest.raises(AttributeError, match=r"lacks \['split', 'evaluate', 'uninformative'\]"):
        hidden.load_grader("bare_grader", bare)
    with pytest.raises(ValueError, match="shared library, not a task"):
        hidden.load_grader("common", PROJECT_ROOT / "grader_hidden" / "common")


def test_the_library_is_no_task():
    """list_tasks reads conf/task/; every other folder of grader_hidden/ is a task's grader."""
    tasks = list_tasks()
    assert hidden.COMMON not in tasks
    folders = sorted(
        p.name for p in (PROJECT_ROOT / "grader_hidden").iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
    )
    assert folders == sorted([*tasks, hidden.COMMON])
    assert all(load_task(n).grader.name != hidden.COMMON for n in tasks)


@pytest.mark.parametrize(
    "source, uses",
    [
        ("from ..common import hmm\n", True),
        ("from ..common.lm import nll\n", True),
        ("from .. import common\n", True),
        ("import ai4ai_hidden.common.hmm\n", True),
        ("from grader_hidden.common import hmm\n", True),
        ("def f():\n    from ..common import lm\n    return lm\n", True),  # wherever the import is
        ("from . import common\n", False),  # a module of its own
        ("from .common import x\n", False),
        ("from ai4ai.core.hidden import write_splits\n", False),
        ("# what the family has in common\nX = 'from ..common import hmm'\n", False),  # words, not imports
        ("from ...common import hmm\n", False),  # beyond the hidden package
    ],
)
def test_uses_common_reads_the_imports_that_reach_the_library(tmp_path, source, uses):
    g = tmp_path / "g"
    g.mkdir()
    (g / "__init__.py").write_text("from .grader import *  # noqa: F403\n")
    (g / "grader.py").write_text(source)
    assert hidden.uses_common(g) is uses


def test_uses_common_resolves_a_subpackage_import(tmp_path):
    """A module one folder down reaches the library with one more dot."""
    sub = tmp_path / "g" / "sub"
    sub.mkdir(parents=True)
    (sub / "m.py").write_text("from ..common import hmm\n")  # the grader's own sub-folder common
    assert hidden.uses_common(tmp_path / "g") is False
    (sub / "m.py").write_text("from ...common import hmm\n")
    assert hidden.uses_common(tmp_path / "g") is True


def test_write_splits_writes_raw_bytes_and_npy_files(tmp_path):
    """Raw uint8 bytes for a split file, np.save's bytes (dtype and shape kept) for a .npy name; the sums
    returned are the sha256 of the bytes on disk."""
    u8 = np.arange(12, dtype=np.uint8).reshape(3, 4)[:, ::2]  # not contiguous
    u16 = np.arange(6, dtype=np.uint16).reshape(2, 3) * 1000
    sums = hidden.write_splits(tmp_path / "d", {"a.u8": u8, "b.npy": u16})
    assert (tmp_path / "d" / "a.u8").read_bytes() == bytes([0, 2, 4, 6, 8, 10])
    buf = io.BytesIO()
    np.save(buf, u16, allow_pickle=False)
    assert (tmp_path / "d" / "b.npy").read_bytes() == buf.getvalue()
    assert np.array_equal(np.load(tmp_path / "d" / "b.npy"), u16)
    assert sums == {n: hashlib.sha256((tmp_path / "d" / n).read_bytes()).hexdigest() for n in ("a.u8", "b.npy")}


def test_shrunk_reads_the_environment(monkeypatch):
    monkeypatch.delenv(hidden.SHRINK_ENV, raising=False)
    assert hidden.shrunk() is False
    monkeypatch.setenv(hidden.SHRINK_ENV, "")
    assert hidden.shrunk() is False
    monkeypatch.setenv(hidden.SHRINK_ENV, "cpu")
    assert hidden.shrunk() is True
