"""A walk over a tree that an agent or a submission wrote: iterative, bounded, never following a link.

os.walk, os.fwalk, Path.rglob and shutil.rmtree recurse (Python 3.11): a workspace folder 5,000
levels deep made the harness's walk after the window raise RecursionError, and the run was lost.
`walk` keeps its own stack of open folder descriptors instead, opens each folder with O_NOFOLLOW
relative to its parent (a folder swapped for a symlink mid-walk is not entered), and holds itself
to bounds: folders deeper than `max_depth` are not entered (`problems` says so), and more than
`max_entries` entries in all stop it with `WalkRefused`, a clean rejection the caller records.
Imports nothing from ai4ai.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

MAX_DEPTH = 32  # folder levels below the root a walk enters (a repo copy has at most 4)
MAX_ENTRIES = 100_000  # entries a walk lists, all folders together (a repo copy has a few hundred)
UNBOUNDED = 1 << 62  # for a walk of the harness's own copies, where only the recursion was the problem
MAX_SHOWN = 200  # characters of a path a message shows


class WalkRefused(Exception):
    """The tree is over the walk's bounds: refused as a whole, with the reason."""


@dataclass(frozen=True)
class Entry:
    name: str
    rel: str  # the path from the walk's root, "/"-separated
    kind: str  # "dir" | "file" | "link" | "other"


def shown(rel: str) -> str:
    """A path as a message or record may show it: printable ASCII (odd bytes and newlines escaped),
    at most MAX_SHOWN characters."""
    text = rel if rel.isascii() and rel.isprintable() else ascii(rel)[1:-1]
    if len(text) <= MAX_SHOWN:
        return text
    more = f"...({len(text)} chars)"
    return text[: MAX_SHOWN - len(more)] + more


def _kind(e: os.DirEntry) -> str:
    try:
        if e.is_symlink():
            return "link"
        if e.is_dir(follow_symlinks=False):
            return "dir"
        if e.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"


def walk(
    root,
    skip: frozenset | set = frozenset(),
    max_depth: int | None = None,
    max_entries: int | None = None,
    problems: dict | None = None,
) -> Iterator[tuple[str, int, list[Entry]]]:
    """(folder's rel path ("" for the root), its open descriptor, its entries) for every folder under
    `root`, parents before children; the descriptor is valid until the next step.

    Folders named in `skip` are listed as entries but not entered. A folder that cannot be opened or
    listed (unreadable, swapped for a link) and one deeper than `max_depth` are not entered, with a
    reason in `problems` ({rel: reason}). More than `max_entries` entries raise WalkRefused. The bounds
    default to MAX_DEPTH and MAX_ENTRIES. A caller
    may remove entries of kind "dir" from the list it is given to keep the walk out of them.
    """
    problems = {} if problems is None else problems
    max_depth = MAX_DEPTH if max_depth is None else max_depth  # read at call time: tests lower them
    max_entries = MAX_ENTRIES if max_entries is None else max_entries
    count = 0

    def listing(fd: int, rel: str) -> list[Entry] | None:
        nonlocal count
        out = []
        try:
            with os.scandir(fd) as it:
                for e in it:
                    count += 1
                    if count > max_entries:
                        raise WalkRefused(
                            f"more than {max_entries:,} entries (files and folders) under the walked folder; "
                            f"the last listed in {shown(rel) or '.'}"
                        )
                    out.append(Entry(e.name, f"{rel}/{e.name}" if rel else e.name, _kind(e)))
        except OSError as e:
            problems[rel or "."] = f"folder could not be read ({os.strerror(e.errno or errno.EIO)})"
            return None
        return out

    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    stack: list[tuple[int, str, int, list[Entry]]] = []
    try:
        entries = listing(top, "")
        if entries is None:
            os.close(top)
            return
        yield "", top, entries
        stack.append((top, "", 0, [e for e in reversed(entries) if e.kind == "dir" and e.name not in skip]))
        while stack:
            fd, rel, depth, pending = stack[-1]
            if not pending:
                os.close(fd)
                stack.pop()
                continue
            sub = pending.pop()
            if depth + 1 > max_depth:
                problems[sub.rel] = f"folder more than {max_depth} levels deep: not walked"
                continue
            try:
                child = os.open(sub.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:
                problems[sub.rel] = (
                    "symlink"
                    if e.errno in (errno.ELOOP, errno.ENOTDIR)
                    else f"folder could not be read ({os.strerror(e.errno or errno.EIO)})"
                )
                continue
            entries = listing(child, sub.rel)
            if entries is None:
                os.close(child)
                continue
            stack.append((child, sub.rel, depth + 1, []))
            yield sub.rel, child, entries
            stack[-1] = (
                child,
                sub.rel,
                depth + 1,
                [e for e in reversed(entries) if e.kind == "dir" and e.name not in skip],
            )
    finally:
        for fd, *_ in stack:
            try:
                os.close(fd)
            except OSError:
                pass


def is_link_at(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return True


def remove_tree(root) -> None:
    """Remove a tree of any depth without recursion (shutil.rmtree recurses in Python 3.11), never
    following a link; what cannot be removed stays. For the harness's own scratch and for tests."""
    root = os.fspath(root)
    if not os.path.lexists(root):
        return
    if os.path.islink(root) or not os.path.isdir(root):
        os.unlink(root)
        return
    stack = [(os.open(root, os.O_RDONLY | os.O_DIRECTORY), None, None)]  # (fd, parent fd, name in parent)
    try:
        while stack:
            fd, parent, name = stack[-1]
            sub = None
            try:
                os.chmod(fd, 0o700)
            except OSError:
                pass
            with os.scandir(fd) as it:
                for e in it:
                    if e.is_dir(follow_symlinks=False):
                        sub = e.name
                        break
                    try:
                        os.unlink(e.name, dir_fd=fd)
                    except OSError:
                        pass
            if sub is not None:
                try:
                    child = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    try:
                        os.chmod(sub, 0o700, dir_fd=fd)
                        child = os.open(sub, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                    except OSError:
                        os.rmdir(sub, dir_fd=fd)  # raises: nothing more can be done here
                        continue
                stack.append((child, fd, sub))
                continue
            stack.pop()
            if parent is not None:
                os.rmdir(name, dir_fd=parent)
            os.close(fd)
    finally:
        for fd, *_ in stack:
            try:
                os.close(fd)
            except OSError:
                pass
    os.rmdir(root)
