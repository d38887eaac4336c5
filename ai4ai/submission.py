"""The submission: what the agent changed in the editable paths, as a filtered patch.

The harness diffs the workspace against its own pristine copy in Python (never by running
git where an agent could write). Each changed file passes the filter or is rejected with a
reason; rejected files are listed and never applied.
"""
from __future__ import annotations

import ast
import errno
import hashlib
import io
import os
import re
import stat
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

from .task import Task

MAX_PATCH_BYTES = 100_000
MAX_STRING_LITERAL = 4_096        # characters in one str/bytes literal
MAX_NUMBER_LITERAL = 40           # characters in one numeric literal
MAX_CONSTANT_DISPLAY = 256        # constant elements in one list/tuple/set/dict display
MAX_LISTED = 100
SKIP_DIRS = {".git", "__pycache__", ".ipynb_checkpoints"}
HARNESS_FILES = {"INSTRUCTIONS.md"}     # written into the workspace by the harness itself
_SAFE_PATH = re.compile(r"^[A-Za-z0-9_.\-/]+$")


@dataclass(frozen=True)
class Submission:
    files: dict                    # rel path -> new text, or None for a deleted file
    rejected: dict                 # rel path -> reason
    patch: str                     # unified diff of the accepted files only
    lines_added: int
    lines_removed: int
    sha256: str = field(init=False)

    def __post_init__(self):
        object.__setattr__(self, "sha256", hashlib.sha256(self.patch.encode()).hexdigest())

    def summary(self) -> dict:
        return {"patch": "submission.patch", "sha256": self.sha256, "files": sorted(self.files),
                "rejected_files": [{"path": p, "reason": r} for p, r in sorted(self.rejected.items())],
                "lines_added": self.lines_added, "lines_removed": self.lines_removed}


class PatchFormatError(ValueError):
    """The patch text is not a unified diff this harness can read."""


# --------------------------------------------------------------------------- unified diffs

def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def unified_diff(rel: str, old: str | None, new: str | None) -> str:
    """A git-style unified diff of one file (whole-file hunk with 3 lines of context)."""
    import difflib
    a, b = _lines(old or ""), _lines(new or "")
    out = [f"--- {'a/' + rel if old is not None else '/dev/null'}\n",
           f"+++ {'b/' + rel if new is not None else '/dev/null'}\n"]
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{i1 + 1 if i2 > i1 else i1},{i2 - i1} +{j1 + 1 if j2 > j1 else j1},{j2 - j1} @@\n")
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                out += [_emit(" ", line) for line in a[x1:x2]]
                continue
            out += [_emit("-", line) for line in a[x1:x2]]
            out += [_emit("+", line) for line in b[y1:y2]]
    return "".join(out) if len(out) > 2 else ""


def _emit(prefix: str, line: str) -> str:
    if line.endswith("\n"):
        return prefix + line
    return prefix + line + "\n\\ No newline at end of file\n"


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def parse_patch(text: str) -> list[tuple[str | None, str | None, list]]:
    """[(old_path, new_path, hunks)] where a hunk is (old_start, [(op, line)]); paths without a/ b/."""
    files, lines, i = [], text.splitlines(keepends=True), 0
    while i < len(lines):
        if not lines[i].startswith("--- "):
            i += 1
            continue
        if i + 1 >= len(lines) or not lines[i + 1].startswith("+++ "):
            raise PatchFormatError(f"line {i + 1}: '---' not followed by '+++'")
        old, new = _path(lines[i][4:]), _path(lines[i + 1][4:])
        i += 2
        hunks = []
        while i < len(lines) and lines[i].startswith("@@"):
            m = _HUNK.match(lines[i])
            if not m:
                raise PatchFormatError(f"line {i + 1}: malformed hunk header {lines[i].strip()!r}")
            n_old = int(m.group(2)) if m.group(2) is not None else 1
            n_new = int(m.group(4)) if m.group(4) is not None else 1
            i += 1
            body, seen_old, seen_new = [], 0, 0
            while i < len(lines) and (seen_old < n_old or seen_new < n_new or lines[i].startswith("\\")):
                ln = lines[i]
                if ln.startswith("\\"):
                    if body:
                        op, prev = body[-1]
                        body[-1] = (op, prev[:-1] if prev.endswith("\n") else prev)
                    i += 1
                    continue
                op, content = ln[:1], ln[1:]
                if op == "\n" or ln in ("\n", "\r\n"):
                    op, content = " ", ln
                if op not in " +-":
                    raise PatchFormatError(f"line {i + 1}: unexpected {ln[:20]!r} inside a hunk")
                body.append((op, content))
                seen_old += op in " -"
                seen_new += op in " +"
                i += 1
            hunks.append((int(m.group(1)), body))
        files.append((old, new, hunks))
    return files


def _path(s: str) -> str | None:
    s = s.rstrip("\n").split("\t")[0].strip()
    if s == "/dev/null":
        return None
    return s[2:] if s.startswith(("a/", "b/")) else s


def apply_hunks(old: str, hunks: list) -> str:
    """Apply hunks strictly: every context and removed line must match where the header says."""
    src, out, pos = _lines(old), [], 0
    for start, body in hunks:
        at = max(start - 1, 0) if any(op in " -" for op, _ in body) else start
        if at < pos:
            raise PatchFormatError("hunks overlap or are out of order")
        out += src[pos:at]
        pos = at
        for op, line in body:
            if op in " -":
                if pos >= len(src) or src[pos] != line:
                    raise PatchFormatError(f"hunk does not apply at line {pos + 1}")
                pos += 1
            if op in " +":
                out.append(line)
    out += src[pos:]
    return "".join(out)


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


def check_literals(source: str) -> str | None:
    """Reject weights or data smuggled into source as long literals."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.STRING and len(tok.string) > MAX_STRING_LITERAL:
                return f"string literal of {len(tok.string)} characters at line {tok.start[0]} (limit {MAX_STRING_LITERAL})"
            if tok.type == tokenize.NUMBER and len(tok.string) > MAX_NUMBER_LITERAL:
                return f"numeric literal of {len(tok.string)} characters at line {tok.start[0]}"
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None   # unparsable code fails in training, as the submission's own fault
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        elts = node.elts if isinstance(node, (ast.List, ast.Tuple, ast.Set)) else \
            node.keys + node.values if isinstance(node, ast.Dict) else None
        if elts and sum(isinstance(e, ast.Constant) or isinstance(e, ast.UnaryOp) for e in elts) > MAX_CONSTANT_DISPLAY:
            return f"a literal display of {len(elts)} constants at line {node.lineno} (limit {MAX_CONSTANT_DISPLAY})"
    return None


# --------------------------------------------------------------------------- building one

def _finish(task: Task, pristine: Path, changes: dict, rejected: dict) -> Submission:
    files, diffs = {}, []
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
        if old == text:
            continue
        files[rel] = text
        diffs.append(unified_diff(rel, old, text))
    patch = "".join(diffs)
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
    if not stat.S_ISREG(st.st_mode):      # a folder or FIFO (perhaps swapped in after the listing)
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


def from_workspace(task: Task, pristine: Path, workspace: Path) -> Submission:
    """Diff the workspace against the pristine copy; nothing in the workspace is executed.

    The walk goes by directory descriptors (os.fwalk) and never follows a symlink, even one
    swapped in while it runs.
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
    return _finish(task, pristine, changes, rejected)


def from_patch(task: Task, pristine: Path, patch_text: str) -> Submission:
    """Read a unified diff (e.g. examples/<task>/*.patch) against the pristine copy."""
    changes, rejected = {}, {}
    for old, new, hunks in parse_patch(patch_text):
        rel = new if new is not None else old
        if rel is None:
            raise PatchFormatError("a file section with /dev/null on both sides")
        reason = check_path(task, rel)
        if reason:
            rejected[rel] = reason
            continue
        base = pristine / rel
        if old is not None and not base.is_file():
            rejected[rel] = "patch modifies a file the repo does not have"
            continue
        try:
            if new is None:
                changes[rel] = None
            else:
                changes[rel] = apply_hunks(base.read_text() if old is not None else "", hunks).encode()
        except PatchFormatError as e:
            rejected[rel] = str(e)
    if len(patch_text.encode()) > MAX_PATCH_BYTES:
        rejected.update({rel: f"patch file is {len(patch_text.encode())} bytes (limit {MAX_PATCH_BYTES})" for rel in changes})
        changes = {}
    return _finish(task, pristine, changes, rejected)


def apply(sub: Submission, dest: Path) -> None:
    """Write the accepted files of a submission into a copy of the pristine repo."""
    for rel, text in sub.files.items():
        target = dest / rel
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
