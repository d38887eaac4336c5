"""The leak policy: what a submission may carry besides code.

A patch is code; a model trained beforehand, a dataset or a held source is not. Three checks, each
on what actually crossed (the text of the accepted files, never a name or size the agent reports):

- literal caps (`check_literals`): no string, number or constant display long enough to hold weights;
- the information budget (`check_information`): caps on the files a patch creates and on the bytes
  of its paths (`check_names`), and the compressed size of everything the patch carries (its paths,
  the positions of its edits and its added text: `measured_stream`), the pristine sources as a
  preset dictionary, with allowances for high-entropy runs, numbers and long literals summed over
  the patch;
- the held sources (`check_held`): a patch may not carry back, verbatim or renamed, a file the meter
  keeps out of the training copy.

`ai4ai.repo.submission` applies them when it builds a submission; the proxy and the tests call
them directly.
"""

from __future__ import annotations

import ast
import difflib
import io
import keyword
import lzma
import re
import tokenize
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from ai4ai.core.task import Task
from ai4ai.repo.meter import held_files
from ai4ai.repo.patches import lines as _lines
from ai4ai.repo.workspace import SKIP_DIRS

MAX_STRING_LITERAL = 4_096  # characters in one str/bytes literal
MAX_NUMBER_LITERAL = 40  # characters in one numeric literal
MAX_CONSTANT_DISPLAY = 256  # constant elements in one list/tuple/set/dict display

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
BASE64_RUN = 32  # a run this long of [A-Za-z0-9+], with 3+ each of upper, lower, digit
BASE64_ALLOWANCE = 128  # characters of such runs per patch
HEX_RUN = 32
HEX_ALLOWANCE = 256  # four sha256 digests
DIGIT_RUN = 16
DIGIT_ALLOWANCE = 64
MAX_NUMBERS = 256  # numeric constants added (code, comments and strings); examples: 38 at most
LONG_LITERAL = 256  # a string literal (not a docstring) this long counts as long
LONG_LITERAL_ALLOWANCE = 4_096  # characters of long literals per patch: one at MAX_STRING_LITERAL
# The meter's held sources (task config `meter.held`, e.g. agentic_rl's level generator) stay out
# of the training copy so that a run gets what they make only as served, counted; a patch that
# carries one back, verbatim or with its names changed, is rejected. Measured as the share of the
# held file's shingles (HELD_SHINGLE tokens; names, numbers and strings normalised, comments dropped) found
# in the patch's added text. Code of the same repo by the same hand shares at most 3% (env.py
# against levels.py); a renamed copy shares all of it.
HELD_SHINGLE = 16
HELD_COVER_MAX = 0.25
# A patch's paths are information like its text: 162 empty new files whose names spelled 30 KB of
# weights trained beforehand passed every check and scored 0.921 on agentic_rl at ci (shipped: 0.1),
# where the same bytes as comments were over the budget 3.7 times. The budget now compresses every
# path and every edit's position with the added text, and two caps bound what names can carry at all:
# the shipped examples add at most 2 files, with paths of at most 20 bytes.
MAX_NEW_FILES = 16  # files a patch may create (8x the examples: an algorithm split into modules)
MAX_PATH_BYTES = 128  # bytes of one path
MAX_NAME_BYTES = 1_024  # bytes of all the paths of a patch (new, edited and deleted files; 16 of 64)


def check_literals(source: str) -> str | None:
    """Reject weights or data smuggled into source as long literals."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.STRING and len(tok.string) > MAX_STRING_LITERAL:
                return f"string literal of {len(tok.string)} characters at line {tok.start[0]} (limit {MAX_STRING_LITERAL})"
            if tok.type == tokenize.NUMBER and len(tok.string) > MAX_NUMBER_LITERAL:
                return f"numeric literal of {len(tok.string)} characters at line {tok.start[0]}"
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return None  # unparsable code fails in training, as the submission's own fault
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        elts = (
            node.elts
            if isinstance(node, (ast.List, ast.Tuple, ast.Set))
            else node.keys + node.values
            if isinstance(node, ast.Dict)
            else None
        )
        if elts and sum(isinstance(e, ast.Constant) or isinstance(e, ast.UnaryOp) for e in elts) > MAX_CONSTANT_DISPLAY:
            return f"a literal display of {len(elts)} constants at line {node.lineno} (limit {MAX_CONSTANT_DISPLAY})"
    return None


# --------------------------------------------------------------------------- information budget

# Runs are looked for in all added text, code included: a payload spelled as identifiers, or
# kept in a .py file that is read as text rather than imported, is a payload all the same.
# "/", "-" and "_" split a run: URLs and paths are made of them, and a base64 payload of either
# alphabet still leaves most of its characters in runs of 32 or more.
_RUN = re.compile(rf"[A-Za-z0-9+]{{{BASE64_RUN},}}=*")
_HEX = re.compile(rf"[0-9a-fA-F]{{{HEX_RUN},}}")
_DIGITS = re.compile(rf"[0-9]{{{DIGIT_RUN},}}")
# a number written in a comment or string: 3, -0.5, 1e-3, .25 (not the 2 of "v2" or "x2")
_NUMBER_IN_TEXT = re.compile(r"(?<![\w.])[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?(?![\w.])")


def _is_base64_run(run: str) -> bool:
    # Encoded bytes mix all three classes; identifiers, paths and words almost never do at
    # this length (checked against the sources of torch, transformers, numpy and scipy).
    return (
        sum(c.isupper() for c in run) >= 3 and sum(c.islower() for c in run) >= 3 and sum(c.isdigit() for c in run) >= 3
    )


def _is_hex_run(run: str) -> bool:
    return any(c.isdigit() for c in run) and any(c.isalpha() for c in run)


@dataclass
class _Added:
    """What one file's added lines carry, by kind, with the first line where each kind is seen."""

    text: str = ""
    edits: str = ""  # where the diff changes the file: one "@@ -start,count +start,count" line a change
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


def _edits(old: str | None, new: str) -> tuple[list[int], str]:
    """(1-based numbers of the lines of `new` that the diff adds, the positions of its changes as
    zero-context hunk headers): with the added lines, all that a diff carries beyond the old text."""
    out, where = [], []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
        None, _lines(old or ""), _lines(new), autojunk=False
    ).get_opcodes():
        if tag != "equal":
            where.append(f"@@ -{i1},{i2 - i1} +{j1},{j2 - j1}\n")
        if tag in ("replace", "insert"):
            out += range(j1 + 1, j2 + 1)
    return out, "".join(where)


def _added_lines(old: str | None, new: str) -> list[int]:
    """1-based numbers of the lines of `new` that the diff adds."""
    return _edits(old, new)[0]


def _docstring_lines(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                out.add(first.lineno)
    return out


def measure_added(rel: str, old: str | None, new: str) -> _Added:
    """Measure the added lines of one file: their text and the high-entropy content in them."""
    added, where = _edits(old, new)
    lines = _lines(new)
    m = _Added(text="".join(lines[n - 1] for n in added), edits=where)
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
            best = (
                b,
                f"scale {s}: the larger of {INFO_FLOOR_BYTES:,} bytes and {INFO_FRACTION:.0%} "
                f"of the {n:,}-parameter model at 2 bytes a parameter",
            )
    return best


def _preset(pristine: Path, task: Task) -> bytes:
    """The pristine sources as a compression dictionary (zlib uses its last 32 KiB), the
    editable files last, so that code copied or adapted from the repo costs little; the meter's
    held sources are not in it (a copy of one costs its full size, and check_held rejects it)."""
    held = set(held_files(task, pristine))
    srcs = sorted(
        (p for p in pristine.rglob("*.py") if not any(s in p.parts for s in SKIP_DIRS) and p not in held),
        key=lambda p: (task.is_editable(str(p.relative_to(pristine))), str(p)),
    )
    return b"".join(p.read_bytes() for p in srcs)[-32_768:]


def compressed_size(data: bytes, preset: bytes = b"") -> int:
    """The smaller of raw deflate (with `preset` as its dictionary) and raw LZMA2: the best
    estimate at hand of the information in `data`."""
    if not data:
        return 0
    z = zlib.compressobj(9, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY, *([preset] if preset else []))
    deflated = len(z.compress(data) + z.flush())
    xz = len(
        lzma.compress(
            data,
            format=lzma.FORMAT_RAW,
            # a patch is at most a few hundred KB: a 1 MiB window sees all of it, and
            # allocating preset 9's 64 MiB for every file would cost 0.2 s each
            filters=[{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 1 << 20}],
        )
    )
    return min(deflated, xz)


_KINDS = (  # kind, allowance over the whole patch, what the reason calls it
    ("base64", BASE64_ALLOWANCE, f"characters of base64-like runs ({BASE64_RUN}+ characters)"),
    ("hex", HEX_ALLOWANCE, f"characters of hex runs ({HEX_RUN}+ digits)"),
    ("digits", DIGIT_ALLOWANCE, f"characters of digit runs ({DIGIT_RUN}+ digits)"),
    ("numbers", MAX_NUMBERS, "numeric constants"),
    ("long_literals", LONG_LITERAL_ALLOWANCE, f"characters of string literals over {LONG_LITERAL} characters"),
)


def measured_stream(texts: dict, measured: dict | None = None) -> str:
    """What the information budget compresses for a patch: for every file (texts is {rel: (old, new)},
    new None for a deletion), in path order, a line with what happens to it and its path, the
    positions of its changes and its added lines. Every byte that crosses into the graded copy is
    here: names, the choice of files created and deleted, where each edit goes, what it adds."""
    measured = measured or {}
    out = []
    for rel, (old, new) in sorted(texts.items()):
        if new is None:
            out.append(f"delete {rel}\n")
            continue
        m = measured.get(rel) or measure_added(rel, old, new)
        out.append(f"{'create' if old is None else 'edit'} {rel}\n{m.edits}{m.text}")
    return "".join(out)


def check_names(texts: dict) -> dict:
    """{rel: reason} for the files of a patch over the caps on names: more than MAX_NEW_FILES new
    files (each new file is rejected), a path over MAX_PATH_BYTES, or more than MAX_NAME_BYTES of
    paths in all (each file whose name the patch chose, created or deleted, is rejected)."""
    reasons: dict[str, list[str]] = {}
    new = [rel for rel, (old, text) in texts.items() if old is None and text is not None]
    if len(new) > MAX_NEW_FILES:
        for rel in new:
            reasons.setdefault(rel, []).append(
                f"the patch creates {len(new):,} files (limit {MAX_NEW_FILES}): a file's name and its "
                "existence are information, like its text"
            )
    for rel in texts:
        if len(rel.encode()) > MAX_PATH_BYTES:
            reasons.setdefault(rel, []).append(f"path of {len(rel.encode()):,} bytes (limit {MAX_PATH_BYTES})")
    total = sum(len(rel.encode()) for rel in texts)
    if total > MAX_NAME_BYTES:
        for rel, (old, text) in texts.items():
            if old is None or text is None:
                reasons.setdefault(rel, []).append(
                    f"the patch's paths take {total:,} bytes (limit {MAX_NAME_BYTES:,}): names are "
                    "information, like text"
                )
    return {rel: "; ".join(r) for rel, r in reasons.items()}


def check_information(task: Task, pristine: Path, texts: dict, scale: str | None = None) -> dict:
    """{rel: reason} for the files of a patch that carry more than code, or a held source back
    (check_held): texts is {rel: (old, new)}, new None for a deletion.

    The names first (check_names: caps on new files and on the bytes of paths). Each kind of
    high-entropy content is summed over the patch (spreading it over files gains nothing) and every
    file that holds some of a kind over its allowance is rejected. The compressed size of the
    patch's measured stream (every path, every change's position, every added line) is a property
    of the whole patch, so over the budget every file is rejected.
    """
    measured = {rel: measure_added(rel, old, new) for rel, (old, new) in sorted(texts.items()) if new is not None}
    reasons: dict[str, list[str]] = {rel: [r] for rel, r in check_names(texts).items()}
    for kind, allowance, what in _KINDS:
        total = sum(getattr(m, kind) for m in measured.values())
        if total <= allowance:
            continue
        for rel, m in measured.items():
            if getattr(m, kind):
                reasons.setdefault(rel, []).append(
                    f"{getattr(m, kind):,} {what} from line {m.first[kind]} ({total:,} in the patch, "
                    f"allowance {allowance:,})"
                )
    preset = _preset(pristine, task)
    total = compressed_size(measured_stream(texts, measured).encode(), preset)
    limit, how = information_budget(task, scale)
    if total > limit:
        for rel in sorted(texts):
            m = measured.get(rel)
            alone = compressed_size(measured_stream({rel: texts[rel]}, measured).encode(), preset)
            reasons.setdefault(rel, []).append(
                f"the patch's added text, paths and edit positions compress to {total:,} bytes, over the "
                f"information budget of {limit:,} ({how}); this file's alone: {alone:,}"
                + ("" if m is not None else " (a deletion)")
            )
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
    return {tuple(toks[i : i + HELD_SHINGLE]) for i in range(len(toks) - HELD_SHINGLE + 1)}


def check_held(task: Task, pristine: Path, added: dict) -> dict:
    """{rel: reason} for the files of a patch that carry one of the meter's held sources back;
    `added` is {rel: added text}. The share is of the whole patch's added text (spreading a copy
    over files gains nothing); every file that holds part of the copy is named."""
    reasons: dict[str, list[str]] = {}
    for src in held_files(task, pristine):
        if src.suffix != ".py":
            continue  # data: the information budget bounds it
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
                    f"meter holds back from training: a run gets what it makes only as the meter serves it"
                )
    return {rel: "; ".join(r) for rel, r in reasons.items()}
