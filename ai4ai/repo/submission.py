"""The submission: what the agent changed in the editable paths, as a filtered patch.

The harness diffs the workspace against its own pristine copy in Python (never by running
git where an agent could write). Each changed file passes the filter or is rejected with a
reason; rejected files are listed and never applied. What a file may carry besides code (literal
caps, the information budget, the held sources) is the leak policy of `ai4ai.repo.leaks`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from ai4ai.core.task import Task
from ai4ai.repo.leaks import check_information, check_literals
from ai4ai.repo.patches import apply_patch, read_if_file, unified_diff
from ai4ai.repo.workspace import SKIP_DIRS
from ai4ai.sandbox.walk import WalkRefused, shown, walk

MAX_PATCH_BYTES = 100_000
MAX_LISTED = 100
MAX_WALK_READ_BYTES = 64 << 20  # candidate files read in one walk of a workspace (640 patches' worth)
HARNESS_FILES = {"INSTRUCTIONS.md"}  # written into the workspace by the harness itself
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_.\-/]+$")


@dataclass(frozen=True)
class Submission:
    files: dict  # rel path -> new text, or None for a deleted file
    rejected: dict  # rel path -> reason
    patch: str  # unified diff of the accepted files only
    lines_added: int
    lines_removed: int
    sha256: str = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "sha256", hashlib.sha256(self.patch.encode()).hexdigest())

    def summary(self) -> dict:
        return {
            "patch": "submission.patch",
            "sha256": self.sha256,
            "files": sorted(self.files),
            "rejected_files": [{"path": p, "reason": r} for p, r in sorted(self.rejected.items())],
            "lines_added": self.lines_added,
            "lines_removed": self.lines_removed,
        }


# --------------------------------------------------------------------------- the filter


def check_path(task: Task, rel: str) -> str | None:
    if not rel or rel.startswith("/") or os.path.isabs(rel):
        return "absolute path"
    if ".." in rel.split("/") or rel != os.path.normpath(rel) or rel.startswith("./"):
        return "path escapes the repo (.. or not normalized)"
    if not _SAFE_PATH.match(rel):
        return "path has characters outside [A-Za-z0-9_.-/]"
    if rel in task.protected:
        return "protected file"
    if not task.is_editable(rel):
        return "outside the editable paths"
    return None


def check_content(rel: str, data: bytes) -> str | None:
    if b"\0" in data:
        return "binary file"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "binary file (not UTF-8)"
    if rel.endswith(".py"):
        return check_literals(text)
    return None


# --------------------------------------------------------------------------- building one


def _finish(task: Task, pristine: Path, changes: dict, rejected: dict, scale: str | None = None) -> Submission:
    kept = {}
    for rel in sorted(changes):
        new = changes[rel]
        reason = check_path(task, rel)
        if reason is None and new is not None:
            reason = check_content(rel, new)
        if reason:
            rejected[rel] = reason
            continue
        old_path = pristine / rel
        old = read_if_file(old_path)
        text = new.decode("utf-8") if new is not None else None
        if old != text:
            kept[rel] = (old, text)
    for rel, reason in check_information(task, pristine, kept, scale).items():
        rejected[rel] = reason
        del kept[rel]
    files = {rel: text for rel, (_, text) in kept.items()}
    patch = "".join(unified_diff(rel, old, text) for rel, (old, text) in kept.items())
    if len(patch.encode()) > MAX_PATCH_BYTES:
        for rel in files:
            rejected[rel] = f"whole patch is {len(patch.encode())} bytes (limit {MAX_PATCH_BYTES})"
        files, patch = {}, ""
    added = sum(1 for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in patch.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    if len(rejected) > MAX_LISTED:
        keep = dict(sorted(rejected.items())[:MAX_LISTED])
        keep["..."] = f"{len(rejected) - MAX_LISTED} more rejected files not listed"
        rejected = keep
    return Submission(files=files, rejected=rejected, patch=patch, lines_added=added, lines_removed=removed)


def _same_stream(fa, b: Path) -> bool:
    with open(b, "rb") as fb:
        while True:
            ca, cb = fa.read(1 << 20), fb.read(1 << 20)
            if ca != cb:
                return False
            if not ca:
                return True


def _read_regular(name: str, dir_fd: int, limit: int, pristine: Path | None) -> tuple[str | None, bytes | None, int]:
    """(problem, data, size) of one directory entry, opened without following any symlink;
    `pristine`: the pristine copy's file of the same path, where there is one.

    The agent runs while the proxy snapshots its workspace, so an entry checked as a regular
    file may be a symlink (to a path of the harness's host) a moment later: every check is
    made on the opened descriptor, never on the path.
    """
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as e:
        return ("symlink" if e.errno == errno.ELOOP else "not a regular file"), None, 0
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):  # a folder or FIFO (perhaps swapped in after the listing)
        os.close(fd)
        return "not a regular file", None, 0
    with os.fdopen(fd, "rb") as f:
        if pristine is not None and pristine.stat().st_size == st.st_size and _same_stream(f, pristine):
            return "unchanged", None, st.st_size
        f.seek(0)
        if st.st_size > limit:
            return "too large", None, st.st_size
        data = f.read(limit + 1)
    return ("too large" if len(data) > limit else None), data, len(data)


def repo_files(root: Path) -> set[str]:
    """The repo-relative paths of the regular files of a copy the harness made (caches skipped)."""
    out = set()
    for _, _, entries in walk(root, skip=SKIP_DIRS):
        out.update(e.rel for e in entries if e.kind == "file")
    return out


def from_workspace(task: Task, pristine: Path, workspace: Path, scale: str | None = None) -> Submission:
    """Diff the workspace against the pristine copy; nothing in the workspace is executed.

    The walk (`ai4ai.sandbox.walk`) is iterative, goes by directory descriptors and never follows a
    symlink, even one swapped in while it runs. Only files the submission could carry are read: the
    pristine copy's paths and new paths the filter allows; any other file is listed as rejected
    unread. Bounded: folders deeper than walk.MAX_DEPTH are rejected unwalked, and a workspace of
    more than walk.MAX_ENTRIES entries, or with more than MAX_WALK_READ_BYTES of candidate files to
    read, raises WalkRefused (the run records it as invalid). `scale` sizes the information budget
    (check_information); with none, the strictest of the task's scales applies.
    """
    changes, rejected, seen, problems = {}, {}, set(), {}
    limit, read = 4 * MAX_PATCH_BYTES, 0
    old_files = repo_files(pristine)
    for _, dir_fd, entries in walk(workspace, skip=SKIP_DIRS, problems=problems):
        for e in entries:
            rel = e.rel
            if e.kind == "dir":
                continue
            seen.add(rel)
            if e.name.endswith((".pyc", ".pyo")) or rel in HARNESS_FILES:
                continue
            known = rel in old_files
            if e.kind == "link":
                if known or task.is_editable(rel) or rel in task.protected or _to_folder(e.name, dir_fd):
                    rejected[shown(rel)] = "symlink"
                continue
            if e.kind == "other":
                rejected[shown(rel)] = "not a regular file"
                continue
            if not known and (reason := check_path(task, rel)):
                if _size_at(e.name, dir_fd) <= limit:  # a larger one is left out of the listing, as it was
                    rejected[shown(rel)] = reason  # never read: it could not be carried
                continue
            problem, data, size = _read_regular(e.name, dir_fd, limit, pristine / rel if known else None)
            if problem == "unchanged":
                continue
            if problem in ("symlink", "not a regular file"):  # swapped in after the listing
                rejected[shown(rel)] = problem
                continue
            if problem == "too large":
                rejected[shown(rel)] = f"file of {size} bytes (patch limit {MAX_PATCH_BYTES})"
                continue
            read += size
            if read > MAX_WALK_READ_BYTES:
                raise WalkRefused(
                    f"more than {MAX_WALK_READ_BYTES >> 20} MiB of changed files the patch could carry "
                    f"(the patch limit is {MAX_PATCH_BYTES:,} bytes)"
                )
            changes[rel] = data
    for rel, reason in problems.items():
        rejected[shown(rel)] = reason
    for rel in sorted(old_files - seen):
        if any(p == "." or rel.startswith(p + "/") for p in problems):
            rejected[rel] = "in a folder the harness could not walk: kept as it was"
        else:
            changes[rel] = None
    return _finish(task, pristine, changes, rejected, scale)


def _size_at(name: str, dir_fd: int) -> int:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_size
    except (OSError, ValueError):
        return 0


def _to_folder(name: str, dir_fd: int) -> bool:
    """Whether a symlink points at a folder (it is rejected wherever it is, as before)."""
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=dir_fd).st_mode)
    except (OSError, ValueError):
        return False


def from_patch(task: Task, pristine: Path, patch_text: str, scale: str | None = None) -> Submission:
    """Read a unified diff (e.g. examples/<task>/*.patch) against the pristine copy; `scale` as in
    from_workspace."""
    changes, rejected = {}, {}
    for change in apply_patch(patch_text, pristine, check=lambda rel: check_path(task, rel)):
        if change.problem:
            rejected[change.path] = change.problem
        else:
            changes[change.path] = change.new.encode() if change.new is not None else None
    if len(patch_text.encode()) > MAX_PATCH_BYTES:
        rejected.update(
            {rel: f"patch file is {len(patch_text.encode())} bytes (limit {MAX_PATCH_BYTES})" for rel in changes}
        )
        changes = {}
    return _finish(task, pristine, changes, rejected, scale)


def apply(sub: Submission, dest: Path) -> None:
    """Write the accepted files of a submission into a copy of the pristine repo."""
    for rel, text in sub.files.items():
        target = dest / rel
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
