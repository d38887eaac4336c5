"""Unified diffs: writing one for a file, reading one, and applying it to a tree's texts.

The one place the harness reads and applies patches. apply_patch reads a tree and writes
nothing (the submission filter's from_patch, the classifier); the `patch` agent, which writes
each file as it goes, applies the same FilePatch sections itself. Imports nothing from ai4ai.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

MISSING = "patch modifies a file the repo does not have"


class PatchFormatError(ValueError):
    """The patch text is not a unified diff this harness can read."""


def lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


# --------------------------------------------------------------------------- writing one


def unified_diff(rel: str, old: str | None, new: str | None) -> str:
    """A git-style unified diff of one file (whole-file hunk with 3 lines of context). A file created
    or deleted always has its two header lines, even empty: its name crosses too."""
    if old is None and new is None:
        return ""
    a, b = lines(old or ""), lines(new or "")
    out = [
        f"--- {'a/' + rel if old is not None else '/dev/null'}\n",
        f"+++ {'b/' + rel if new is not None else '/dev/null'}\n",
    ]
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(3):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(f"@@ -{i1 + 1 if i2 > i1 else i1},{i2 - i1} +{j1 + 1 if j2 > j1 else j1},{j2 - j1} @@\n")
        for tag, x1, x2, y1, y2 in group:
            if tag == "equal":
                out += [_emit(" ", line) for line in a[x1:x2]]
                continue
            out += [_emit("-", line) for line in a[x1:x2]]
            out += [_emit("+", line) for line in b[y1:y2]]
    return "".join(out) if len(out) > 2 or old is None or new is None else ""


def _emit(prefix: str, line: str) -> str:
    if line.endswith("\n"):
        return prefix + line
    return prefix + line + "\n\\ No newline at end of file\n"


# --------------------------------------------------------------------------- reading one


class FilePatch(NamedTuple):
    """One file's section of a unified diff; paths are relative, without a/ b/."""

    old: str | None  # None: the section creates the file
    new: str | None  # None: it deletes the file
    hunks: list  # [(old_start, [(op, line)])], op one of " +-"

    @property
    def path(self) -> str | None:
        """The file the section writes (its old path for a deletion); None for /dev/null on both sides."""
        return self.new if self.new is not None else self.old

    def apply(self, before: str) -> str | None:
        """The file's text after this section, from its text before; None where it deletes the file."""
        if self.new is None:
            return None
        return apply_hunks(before if self.old is not None else "", self.hunks)


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")

# What the reader does with each header line git writes outside a file section. The harness writes
# regular text files with the mode a checkout gives, so only what that can express is read; the rest
# is refused with the reason, never dropped silently (a dropped line would leave a patch that says
# more than what is applied, or an empty file the reader never sees).
MODE = "100644"  # the one file mode a patch may name (new file mode, deleted file mode, index)
_GIT_IGNORED = ("diff --git ", "index ")  # say nothing that the --- and +++ lines do not
_GIT_REFUSED = {
    "old mode ": "a mode change",
    "new mode ": "a mode change",
    "rename from ": "a rename (write it as a deletion and a new file)",
    "rename to ": "a rename (write it as a deletion and a new file)",
    "copy from ": "a copy (write the new file in full)",
    "copy to ": "a copy (write the new file in full)",
    "similarity index ": "a rename or copy",
    "dissimilarity index ": "a rename or copy",
    "GIT binary patch": "a binary patch",
    "Binary files ": "a binary file",
}


def _git_header(ln: str, at: int) -> None:
    """Refuse a git header line that says what this reader cannot apply (see _GIT_REFUSED, MODE)."""
    for start, what in _GIT_REFUSED.items():
        if ln.startswith(start):
            raise PatchFormatError(
                f"line {at}: {what} is not read: the harness applies text diffs only ({ln.strip()!r})"
            )
    if ln.startswith(("new file mode ", "deleted file mode ")):
        mode = ln.split()[-1]
        if mode != MODE:
            raise PatchFormatError(
                f"line {at}: file mode {mode} is not read (symlinks, executables and submodules are refused; "
                f"the harness writes regular files, mode {MODE})"
            )
    if ln.startswith("index ") and len(ln.split()) > 2 and ln.split()[2] != MODE:
        raise PatchFormatError(f"line {at}: file mode {ln.split()[2]} is not read (the harness writes mode {MODE})")


def parse_patch(text: str) -> list[FilePatch]:
    """The file sections of a unified diff, in order. Text outside them (a message, git's `diff --git`
    and `index` lines) is ignored; a git header for what this reader cannot apply (a rename, a copy,
    a binary, a mode other than 100644, a symlink) raises PatchFormatError, and so does a `diff --git`
    block without its --- and +++ lines (git writes an empty new file that way: write it with them)."""
    files, src, i = [], lines(text), 0
    git_block = None  # the line of a `diff --git` whose --- and +++ lines have not come yet
    while i < len(src):
        if not src[i].startswith("--- "):
            if src[i].startswith("diff --git "):
                if git_block is not None:
                    raise PatchFormatError(f"line {git_block}: a `diff --git` block without --- and +++ lines")
                git_block = i + 1
            else:
                _git_header(src[i], i + 1)
            i += 1
            continue
        git_block = None
        if i + 1 >= len(src) or not src[i + 1].startswith("+++ "):
            raise PatchFormatError(f"line {i + 1}: '---' not followed by '+++'")
        old, new = _path(src[i][4:]), _path(src[i + 1][4:])
        i += 2
        hunks = []
        while i < len(src) and src[i].startswith("@@"):
            m = _HUNK.match(src[i])
            if not m:
                raise PatchFormatError(f"line {i + 1}: malformed hunk header {src[i].strip()!r}")
            n_old = int(m.group(2)) if m.group(2) is not None else 1
            n_new = int(m.group(4)) if m.group(4) is not None else 1
            i += 1
            body, seen_old, seen_new = [], 0, 0
            while i < len(src) and (seen_old < n_old or seen_new < n_new or src[i].startswith("\\")):
                ln = src[i]
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
        files.append(FilePatch(old, new, hunks))
    if git_block is not None:
        raise PatchFormatError(f"line {git_block}: a `diff --git` block without --- and +++ lines")
    return files


def _path(s: str) -> str | None:
    s = s.rstrip("\n").split("\t")[0].strip()
    if s == "/dev/null":
        return None
    return s[2:] if s.startswith(("a/", "b/")) else s


# --------------------------------------------------------------------------- applying one


def apply_hunks(old: str, hunks: list) -> str:
    """Apply hunks strictly: every context and removed line must match where the header says."""
    src, out, pos = lines(old), [], 0
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


def read_if_file(p: Path) -> str | None:
    """The text of a regular file, or None: for any path a patch names, a name too long for the
    file system included (Path.is_file raises ENAMETOOLONG rather than answer False)."""
    try:
        return p.read_text() if p.is_file() else None
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class FileChange:
    """What one file section does to a tree, or why it was not applied."""

    path: str
    old: str | None  # the text before (None: the section creates the file, or was refused)
    new: str | None  # the text after (None: deleted, or not applied)
    problem: str | None = None  # why not applied: the check's reason, MISSING, or the hunk that failed


def apply_patch(text: str, root: Path, check: Callable[[str], str | None] | None = None) -> Iterator[FileChange]:
    """Apply a unified diff section by section to the files under root, writing nothing.

    A path `check` gives a reason against is not read; a section that modifies or deletes a file
    root lacks, or whose hunks do not match, comes back with its problem and the rest go on.
    Raises PatchFormatError where the text is not a unified diff.
    """
    for section in parse_patch(text):
        rel = section.path
        if rel is None:
            raise PatchFormatError("a file section with /dev/null on both sides")
        reason = check(rel) if check else None
        if reason:
            yield FileChange(rel, None, None, reason)
            continue
        base = Path(root) / rel
        old = read_if_file(base) if section.old is not None else None
        if section.old is not None and old is None:
            yield FileChange(rel, None, None, MISSING)
            continue
        try:
            new = section.apply(old or "")
        except PatchFormatError as e:
            yield FileChange(rel, old, None, str(e))
            continue
        yield FileChange(rel, old, new)
