"""The submission: what the agent changed in the editable paths, as a filtered patch.

The harness diffs the workspace against its own pristine copy in Python (never by running
git where an agent could write). Each changed file passes the filter or is rejected with a
reason; rejected files are listed and never applied.
"""
from __future__ import annotations

import ast
import difflib
import errno
import hashlib
import io
import keyword
import lzma
import os
import re
import stat
import tokenize
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ai4ai.repo.meter import held_files
from ai4ai.repo.patches import apply_patch, lines as _lines, unified_diff
from ai4ai.core.task import Task

MAX_PATCH_BYTES = 100_000
MAX_STRING_LITERAL = 4_096        # characters in one str/bytes literal
MAX_NUMBER_LITERAL = 40           # characters in one numeric literal
MAX_CONSTANT_DISPLAY = 256        # constant elements in one list/tuple/set/dict display
MAX_LISTED = 100

# The information budget: what the added text of a whole patch may carry, however it is spelled.
# A patch is code; a model trained beforehand is not. The budget is the compressed size of the
# added text (the pristine sources as a preset dictionary, so text copied from the repo is
# nearly free), at least INFO_FLOOR_BYTES and otherwise INFO_FRACTION of the model's fp16 size
# at the scale being graded. The floor is about 7x the largest shipped example (1.2 KB measured
# this way) so that a verbose honest patch fits; at ci and smoke it is what applies for every task
# (0.08 bits a parameter of pruning's 806k-parameter model, whose mask would need ~1 bit each).
# The fraction only matters at full scale, where MAX_PATCH_BYTES binds first for most tasks.
INFO_FLOOR_BYTES = 8_192
INFO_FRACTION = 0.005
# High-entropy content in literals and comments, summed over the patch, each with a small
# allowance: a couple of hashes or keys pass, an encoded tensor does not.
BASE64_RUN = 32                   # a run this long of [A-Za-z0-9+], with 3+ each of upper, lower, digit
BASE64_ALLOWANCE = 128            # characters of such runs per patch
HEX_RUN = 32
HEX_ALLOWANCE = 256               # four sha256 digests
DIGIT_RUN = 16
DIGIT_ALLOWANCE = 64
MAX_NUMBERS = 256                 # numeric constants added (code, comments and strings); examples: 38 at most
LONG_LITERAL = 256                # a string literal (not a docstring) this long counts as long
LONG_LITERAL_ALLOWANCE = 4_096    # characters of long literals per patch: one at MAX_STRING_LITERAL
# The meter's held sources (task config `meter.held`, e.g. agentic_rl's level generator) stay out
# of the training copy so that a run gets what they make only as served, counted; a patch that
# carries one back, verbatim or with its names changed, is rejected. Measured as the share of the
# held file's shingles (HELD_SHINGLE tokens; names, numbers and strings normalised, comments dropped) found
# in the patch's added text. Code of the same repo by the same hand shares at most 3% (env.py
# against levels.py); a renamed copy shares all of it.
HELD_SHINGLE = 16
HELD_COVER_MAX = 0.25
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


# --------------------------------------------------------------------------- information budget

# Runs are looked for in all added text, code included: a payload spelled as identifiers, or
# kept in a .py file that is read as text rather than imported, is a payload all the same.
# "/", "-" and "_" split a run: URLs and paths are made of them, and a base64 payload of either
# alphabet still leaves most of its characters in runs of 32 or more.
_RUN = re.compile(r"[A-Za-z0-9+]{%d,}=*" % BASE64_RUN)
_HEX = re.compile(r"[0-9a-fA-F]{%d,}" % HEX_RUN)
_DIGITS = re.compile(r"[0-9]{%d,}" % DIGIT_RUN)
# a number written in a comment or string: 3, -0.5, 1e-3, .25 (not the 2 of "v2" or "x2")
_NUMBER_IN_TEXT = re.compile(r"(?<![\w.])[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?(?![\w.])")


def _is_base64_run(run: str) -> bool:
    # Encoded bytes mix all three classes; identifiers, paths and words almost never do at
    # this length (checked against the sources of torch, transformers, numpy and scipy).
    return (sum(c.isupper() for c in run) >= 3 and sum(c.islower() for c in run) >= 3
            and sum(c.isdigit() for c in run) >= 3)


def _is_hex_run(run: str) -> bool:
    return any(c.isdigit() for c in run) and any(c.isalpha() for c in run)


@dataclass
class _Added:
    """What one file's added lines carry, by kind, with the first line where each kind is seen."""
    text: str = ""
    base64: int = 0
    hex: int = 0
    digits: int = 0
    numbers: int = 0
    long_literals: int = 0
    first: dict = field(default_factory=dict)

    def note(self, kind: str, amount: int, line: int) -> None:
        if amount:
            setattr(self, kind, getattr(self, kind) + amount)
            self.first.setdefault(kind, line)


def _added_lines(old: str | None, new: str) -> list[int]:
    """1-based numbers of the lines of `new` that the diff adds."""
    out = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(None, _lines(old or ""), _lines(new),
                                                     autojunk=False).get_opcodes():
        if tag in ("replace", "insert"):
            out += range(j1 + 1, j2 + 1)
    return out


def _docstring_lines(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.add(first.lineno)
    return out


def measure_added(rel: str, old: str | None, new: str) -> _Added:
    """Measure the added lines of one file: their text and the high-entropy content in them."""
    added = _added_lines(old, new)
    lines = _lines(new)
    m = _Added(text="".join(lines[n - 1] for n in added))
    for n in added:
        line = lines[n - 1]
        for run in _RUN.findall(line):
            if _is_base64_run(run):
                m.note("base64", len(run), n)
        m.note("hex", sum(len(r) for r in _HEX.findall(line) if _is_hex_run(r)), n)
        m.note("digits", sum(len(r) for r in _DIGITS.findall(line)), n)
    tokens = None
    if rel.endswith(".py"):
        try:
            tree = ast.parse(new)
            tokens = list(tokenize.generate_tokens(io.StringIO(new).readline))
        except (tokenize.TokenError, IndentationError, SyntaxError, ValueError):
            tokens = None
    if tokens is None:
        # Not Python, or Python that does not parse (perhaps a file read as data): every
        # number in its added text counts.
        for n in added:
            m.note("numbers", len(_NUMBER_IN_TEXT.findall(lines[n - 1])), n)
        return m
    wanted, docs = set(added), _docstring_lines(tree)
    for tok in tokens:
        if not wanted.intersection(range(tok.start[0], tok.end[0] + 1)):
            continue
        if tok.type == tokenize.NUMBER:
            m.note("numbers", 1, tok.start[0])
        elif tok.type in (tokenize.STRING, tokenize.COMMENT):
            m.note("numbers", len(_NUMBER_IN_TEXT.findall(tok.string)), tok.start[0])
            if tok.type == tokenize.STRING and len(tok.string) > LONG_LITERAL and tok.start[0] not in docs:
                m.note("long_literals", len(tok.string), tok.start[0])
    return m


def information_budget(task: Task, scale: str | None = None) -> tuple[int, str]:
    """(bytes, how they were sized): the compressed added text one patch may carry at `scale`;
    with no scale, the strictest of the task's scales."""
    names = [scale] if scale else sorted(task.scales)
    best = None
    for s in names:
        n = task.scale(s).n_params
        b = max(INFO_FLOOR_BYTES, int(INFO_FRACTION * 2 * n))
        if best is None or b < best[0]:
            best = (b, f"scale {s}: the larger of {INFO_FLOOR_BYTES:,} bytes and {INFO_FRACTION:.0%} "
                       f"of the {n:,}-parameter model at 2 bytes a parameter")
    return best


def _preset(pristine: Path, task: Task) -> bytes:
    """The pristine sources as a compression dictionary (zlib uses its last 32 KiB), the
    editable files last, so that code copied or adapted from the repo costs little; the meter's
    held sources are not in it (a copy of one costs its full size, and check_held rejects it)."""
    held = set(held_files(task, pristine))
    srcs = sorted((p for p in pristine.rglob("*.py") if not any(s in p.parts for s in SKIP_DIRS) and p not in held),
                  key=lambda p: (task.is_editable(str(p.relative_to(pristine))), str(p)))
    return b"".join(p.read_bytes() for p in srcs)[-32_768:]


def compressed_size(data: bytes, preset: bytes = b"") -> int:
    """The smaller of raw deflate (with `preset` as its dictionary) and raw LZMA2: the best
    estimate at hand of the information in `data`."""
    if not data:
        return 0
    z = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, *([preset] if preset else []))
    deflated = len(z.compress(data) + z.flush())
    xz = len(lzma.compress(data, format=lzma.FORMAT_RAW,
                           # a patch is at most a few hundred KB: a 1 MiB window sees all of it, and
                           # allocating preset 9's 64 MiB for every file would cost 0.2 s each
                           filters=[{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME,
                                     "dict_size": 1 << 20}]))
    return min(deflated, xz)


_KINDS = (  # kind, allowance over the whole patch, what the reason calls it
    ("base64", BASE64_ALLOWANCE, f"characters of base64-like runs ({BASE64_RUN}+ characters)"),
    ("hex", HEX_ALLOWANCE, f"characters of hex runs ({HEX_RUN}+ digits)"),
    ("digits", DIGIT_ALLOWANCE, f"characters of digit runs ({DIGIT_RUN}+ digits)"),
    ("numbers", MAX_NUMBERS, "numeric constants"),
    ("long_literals", LONG_LITERAL_ALLOWANCE, f"characters of string literals over {LONG_LITERAL} characters"),
)


def check_information(task: Task, pristine: Path, texts: dict, scale: str | None = None) -> dict:
    """{rel: reason} for the files of a patch that carry more than code, or a held source back
    (check_held): texts is {rel: (old, new)}.

    Each kind of high-entropy content is summed over the patch (spreading it over files gains
    nothing) and every file that holds some of a kind over its allowance is rejected. The
    compressed size is a property of the whole patch, so over it every file is rejected.
    """
    measured = {rel: measure_added(rel, old, new) for rel, (old, new) in sorted(texts.items()) if new is not None}
    reasons: dict[str, list[str]] = {}
    for kind, allowance, what in _KINDS:
        total = sum(getattr(m, kind) for m in measured.values())
        if total <= allowance:
            continue
        for rel, m in measured.items():
            if getattr(m, kind):
                reasons.setdefault(rel, []).append(
                    f"{getattr(m, kind):,} {what} from line {m.first[kind]} ({total:,} in the patch, "
                    f"allowance {allowance:,})")
    preset = _preset(pristine, task)
    total = compressed_size("".join(m.text for m in measured.values()).encode(), preset)
    limit, how = information_budget(task, scale)
    if total > limit:
        for rel, m in measured.items():
            reasons.setdefault(rel, []).append(
                f"the patch's added text compresses to {total:,} bytes, over the information budget of "
                f"{limit:,} ({how}); this file's added text alone: {compressed_size(m.text.encode(), preset):,}")
    for rel, reason in check_held(task, pristine, {rel: m.text for rel, m in measured.items()}).items():
        reasons.setdefault(rel, []).append(reason)
    return {rel: "; ".join(r) for rel, r in reasons.items()}


_STRINGS = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'')


def _shingles(source: str) -> set:
    """Runs of HELD_SHINGLE tokens of `source`, comments dropped, every string literal read as S,
    every name (keywords aside) as N and every number as 0: what a copy keeps however it renames
    and re-documents."""
    toks = []
    for t in re.findall(r"[A-Za-z_]\w*|\d[\w.]*|\S", re.sub(r"#[^\n]*", "", _STRINGS.sub(" S ", source))):
        if t[0].isalpha() or t[0] == "_":
            t = t if keyword.iskeyword(t) else "N"
        elif t[0].isdigit():
            t = "0"
        toks.append(t)
    return {tuple(toks[i:i + HELD_SHINGLE]) for i in range(len(toks) - HELD_SHINGLE + 1)}


def check_held(task: Task, pristine: Path, added: dict) -> dict:
    """{rel: reason} for the files of a patch that carry one of the meter's held sources back;
    `added` is {rel: added text}. The share is of the whole patch's added text (spreading a copy
    over files gains nothing); every file that holds part of the copy is named."""
    reasons: dict[str, list[str]] = {}
    for src in held_files(task, pristine):
        if src.suffix != ".py":
            continue                      # data: the information budget bounds it
        held = _shingles(src.read_text(errors="replace"))
        if not held:
            continue
        per_file = {rel: held & _shingles(text) for rel, text in added.items()}
        found = set().union(*per_file.values()) if per_file else set()
        cover = len(found) / len(held)
        if cover <= HELD_COVER_MAX:
            continue
        name = src.relative_to(pristine).as_posix()
        for rel, hit in per_file.items():
            if hit:
                reasons.setdefault(rel, []).append(
                    f"carries {cover:.0%} of {name} (names aside; at most {HELD_COVER_MAX:.0%}), a source the "
                    f"meter holds back from training: a run gets what it makes only as the meter serves it")
    return {rel: "; ".join(r) for rel, r in reasons.items()}


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
        rejected.update({rel: f"patch file is {len(patch_text.encode())} bytes (limit {MAX_PATCH_BYTES})" for rel in changes})
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
