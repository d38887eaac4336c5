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
from ai4ai.repo.patches import apply_patch, unified_diff
from ai4ai.repo.workspace import SKIP_DIRS

MAX_PATCH_BYTES = 100_000
MAX_LISTED = 100
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
        old = old_path.read_text() if old_path.is_file() else None
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


def _read_regular(name: str, dir_fd: int, limit: int, pristine: Path) -> tuple[str | None, bytes | None, int]:
    """(problem, data, size) of one directory entry, opened without following any symlink.

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
        if pristine.is_file() and pristine.stat().st_size == st.st_size and _same_stream(f, pristine):
            return "unchanged", None, st.st_size
        f.seek(0)
        if st.st_size > limit:
            return "too large", None, st.st_size
        data = f.read(limit + 1)
    return ("too large" if len(data) > limit else None), data, len(data)


def from_workspace(task: Task, pristine: Path, workspace: Path, scale: str | None = None) -> Submission:
    """Diff the workspace against the pristine copy; nothing in the workspace is executed.

    The walk goes by directory descriptors (os.fwalk) and never follows a symlink, even one
    swapped in while it runs. `scale` sizes the information budget (check_information); with
    none, the strictest of the task's scales applies.
    """
    changes, rejected = {}, {}
    seen = set()
    limit = 4 * MAX_PATCH_BYTES
    for dirpath, dirnames, filenames, dir_fd in os.fwalk(workspace, follow_symlinks=False):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        for d in list(dirnames):
            try:
                is_link = stat.S_ISLNK(os.stat(d, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except OSError:
                is_link = True
            if is_link:
                rejected[os.path.relpath(os.path.join(dirpath, d), workspace)] = "symlink"
                dirnames.remove(d)
        for f in filenames:
            rel = os.path.relpath(os.path.join(dirpath, f), workspace)
            seen.add(rel)
            if f.endswith((".pyc", ".pyo")) or rel in HARNESS_FILES:
                continue
            old = pristine / rel
            relevant = task.is_editable(rel) or rel in task.protected or old.exists()
            problem, data, size = _read_regular(f, dir_fd, limit, old)
            if problem == "unchanged":
                continue
            if problem == "symlink":
                if relevant:
                    rejected[rel] = "symlink"
                continue
            if problem == "not a regular file":
                rejected[rel] = problem
                continue
            if problem == "too large":
                if task.is_editable(rel) or old.exists():
                    rejected[rel] = f"file of {size} bytes (patch limit {MAX_PATCH_BYTES})"
                continue
            changes[rel] = data
    for p in pristine.rglob("*"):
        rel = str(p.relative_to(pristine))
        if p.is_file() and rel not in seen and not any(s in p.parts for s in SKIP_DIRS):
            changes[rel] = None
    return _finish(task, pristine, changes, rejected, scale)


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
