"""Copies of a frozen repo: the agent's workspace, the harness's pristine copy, the training copy."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from ai4ai.core.provenance import tree_sha256
from ai4ai.core.task import Task
from ai4ai.sandbox.walk import UNBOUNDED, walk

SKIP_DIRS = {".git", "__pycache__", ".ipynb_checkpoints"}  # what a walk over a repo copy skips
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")


def copy_repo(task: Task, dest: Path) -> Path:
    if dest.exists():
        raise FileExistsError(f"{dest} already exists")
    shutil.copytree(task.repo, dest, ignore=_IGNORE, symlinks=False)
    make_readable(dest)
    return dest


_READ = stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH
_WRITE = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
_LIST = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH


def _chmod_tree(root: Path, files_add: int = 0, dirs_add: int = 0, remove: int = 0) -> None:
    """Add and remove mode bits on every folder (root included) and file under root; links are left
    alone (a copy holds none: copytree resolves them). Iterative (walk.walk), so any depth is fine."""
    os.chmod(root, (os.stat(root).st_mode | dirs_add) & ~remove)
    for _, fd, entries in walk(root, max_depth=UNBOUNDED, max_entries=UNBOUNDED):
        for e in entries:
            if e.kind in ("dir", "file"):
                mode = os.stat(e.name, dir_fd=fd, follow_symlinks=False).st_mode
                os.chmod(e.name, (mode | (dirs_add if e.kind == "dir" else files_add)) & ~remove, dir_fd=fd)


def make_readable(root: Path) -> None:
    """Every file readable and every folder listable by all: the sandbox's unprivileged user trains
    from the copy. git keeps no read bits, so a clone reads fine; a file that a maintainer's rerun of
    a repo's prepare step wrote 0600 (safetensors' save_file does) would otherwise fail every
    training with a PermissionError."""
    _chmod_tree(root, files_add=_READ, dirs_add=_READ | _LIST)


def pristine_copy(task: Task, dest: Path) -> Path:
    """A copy the harness alone reads from; its hash must equal the frozen repo's."""
    copy_repo(task, dest)
    if tree_sha256(dest) != tree_sha256(task.repo):
        raise RuntimeError(f"pristine copy {dest} differs from {task.repo}")
    make_read_only(dest)
    return dest


def make_read_only(root: Path) -> None:
    _chmod_tree(root, remove=_WRITE)


def make_writable(root: Path) -> None:
    _chmod_tree(root, files_add=stat.S_IWUSR, dirs_add=stat.S_IWUSR)


def agent_workspace(task: Task, dest: Path) -> Path:
    """The agent's copy, with a git repo of its own for its convenience.

    git runs here once, before any agent exists, in a folder the harness just made, with
    system and global configuration ignored; never again after the agent starts.
    """
    copy_repo(task, dest)
    with tempfile.TemporaryDirectory() as home:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "ai4ai",
            "GIT_AUTHOR_EMAIL": "ai4ai@localhost",
            "GIT_COMMITTER_NAME": "ai4ai",
            "GIT_COMMITTER_EMAIL": "ai4ai@localhost",
        }
        try:
            for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "pristine frozen repo"]):
                subprocess.run(
                    ["git", "-c", "core.hooksPath=/dev/null", *args],
                    cwd=dest,
                    env=env,
                    check=True,
                    capture_output=True,
                    timeout=60,
                )
        except (OSError, subprocess.SubprocessError):
            shutil.rmtree(dest / ".git", ignore_errors=True)  # the agent loses a convenience, nothing else
    return dest
