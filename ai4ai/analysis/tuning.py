"""`check_task tuning=true`: is the shipped recipe tuned? Grade a sweep of its hyperparameters.

A task's config declares the sweep (`tuning:`): a list of points, each {CONSTANT: value} of the
entry script's module-level constants, or {file.py:CONSTANT: value} of another editable file; or a
joint search, {search: {CONSTANT: [values]}, points: N, seed: S}, whose grid is the product over
the knobs of their values and the shipped one, less the shipped recipe, and of which `points`
combinations drawn with `seed` are graded (`points`): knobs moved together, not one at a time.
Each point becomes a patch changing those constants and nothing else, graded like an example (the
grader seeds, the same anchors and noise floor). A joint search may also declare `patches:`, files
under tuning/<task>/ that change the recipe where no constant does (more passes over the data the
budget served, for a recipe that makes one): each is graded as one more point. A point that clears
0.1 as an example must (task_checks.rewarded: by more than EXAMPLE_MARGIN x the noise and by at least MIN_EFFECT) fails
the check: tuning alone beats the shipped recipe, so the task would measure tuning, not algorithms
(TASKS.md: honest baselines). The fix is to ship the best point as the default and recalibrate.
"""

from __future__ import annotations

import ast
import itertools
import random
import shlex
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from ai4ai import PROJECT_ROOT
from ai4ai.analysis.task_checks import EXAMPLE_MARGIN, MIN_EFFECT, Report, rewarded
from ai4ai.core.console import say
from ai4ai.core.scoring import Scored, score_seeds, seed_noise_sigma
from ai4ai.core.task import Task, TaskError, TuningSearch
from ai4ai.grading import anchors
from ai4ai.grading.context import context
from ai4ai.grading.seeds import grade_seeds
from ai4ai.repo.submission import from_patch, unified_diff

# --------------------------------------------------------------------------- building a point


def entry_script(task: Task) -> str:
    """The training script of the task's entry (`python train.py` -> train.py)."""
    script = next((a for a in shlex.split(task.entry) if a.endswith(".py")), None)
    if script is None:
        raise TaskError(f"task {task.name}: entry {task.entry!r} names no .py script to tune")
    return script


def label(point: tuple) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in point)


def _constants(tree: ast.Module) -> dict[str, list[ast.expr]]:
    """Module-level `NAME = value` (and `NAME: type = value`) assignments: name -> value nodes."""
    found: dict[str, list[ast.expr]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            found.setdefault(node.target.id, []).append(node.value)
    return found


def _same_kind(old, new) -> bool:
    """A replacement keeps the constant's type: a float takes a number, an int an int, a tuple a
    sequence of the same kinds; bool is not a number here (YAML's `1e-3` is a string, not a float)."""
    if isinstance(old, bool) or isinstance(new, bool):
        return isinstance(old, bool) and isinstance(new, bool)
    if isinstance(old, float):
        return isinstance(new, (int, float))
    if isinstance(old, (tuple, list)):
        return isinstance(new, tuple) and len(new) > 0 and all(_same_kind(old[0] if old else n, n) for n in new)
    return type(old) is type(new)


def _render(old, new) -> str:
    if isinstance(old, float) and not isinstance(new, bool):
        return repr(float(new))
    if isinstance(old, list):
        return repr([float(n) if old and isinstance(old[0], float) else n for n in new])
    if isinstance(old, tuple):
        return repr(tuple(float(n) if old and isinstance(old[0], float) else n for n in new))
    return repr(new)


def _assigned_literal(consts: dict, name: str, where: str, prefix: str) -> tuple:
    """(node, value) of `name` in `consts` (_constants of `where`): assigned once at module level, to a
    literal; else a TaskError that starts with `prefix`."""
    nodes = consts.get(name)
    if not nodes:
        known = ", ".join(n for n in consts if n.isupper()) or "none"
        raise TaskError(f"{prefix}: {where} has no module-level constant {name} (its constants: {known})")
    if len(nodes) > 1:
        raise TaskError(
            f"{prefix}: {where} assigns {name} {len(nodes)} times at module level; a tuned constant must be assigned once"
        )
    try:
        return nodes[0], ast.literal_eval(nodes[0])
    except ValueError:
        raise TaskError(
            f"{prefix}: {where}'s {name} is computed ({ast.unparse(nodes[0])}), not a literal; "
            "tune the literals it is computed from"
        )


def _editable_source(task: Task, rel: str, prefix: str) -> str:
    """The pristine text of `rel`, an editable file of the task's repo; else a TaskError."""
    if not task.is_editable(rel) or not (task.repo / rel).is_file():
        raise TaskError(f"{prefix}: {rel} is not an editable file of {task.name}'s repo")
    return (task.repo / rel).read_text()


def patch_source(source: str, point: tuple, where: str = "train.py") -> str:
    """`source` with each named constant's value replaced; every other byte (comments included) kept."""
    consts = _constants(ast.parse(source))
    edits = []
    for name, new in point:
        node, old = _assigned_literal(consts, name, where, f"tuning point {label(point)}")
        if not _same_kind(old, new):
            raise TaskError(
                f"tuning point {label(point)}: {name} is {type(old).__name__} {old!r} in {where}, "
                f"the point gives {type(new).__name__} {new!r} (in YAML write floats with a dot: "
                "1.0e-3, not 1e-3)"
            )
        if _render(old, new) == _render(old, old):
            continue  # the shipped value: its text stays as written (2e-3, not 0.002)
        edits.append((node.lineno, node.col_offset, node.end_lineno, node.end_col_offset, _render(old, new)))
    # AST columns are UTF-8 byte offsets: edit the bytes, from the end so earlier offsets hold
    lines = source.encode().splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    data = source.encode()
    for l0, c0, l1, c1, text in sorted(edits, reverse=True):
        a, b = starts[l0 - 1] + c0, starts[l1 - 1] + c1
        data = data[:a] + text.encode() + data[b:]
    return data.decode()


def point_patch(task: Task, point: tuple) -> str:
    """The unified diff (against the pristine repo) of one point; empty when it is the shipped recipe.
    A name `file.py:CONSTANT` tunes a constant of another editable file than the entry script."""
    script = entry_script(task)
    by_file: dict[str, list] = {}
    for name, value in point:
        rel, _, const = name.rpartition(":")
        by_file.setdefault(rel or script, []).append((const, value))
    diffs = []
    for rel, items in sorted(by_file.items()):
        old = _editable_source(task, rel, f"tuning point {label(point)}")
        diffs.append(unified_diff(rel, old, patch_source(old, tuple(items), rel)))
    return "".join(diffs)


def shipped_value(task: Task, name: str):
    """The shipped value of a knob (`CONSTANT` of the entry script, or `file.py:CONSTANT`): the
    literal assigned to it once at module level in the pristine repo."""
    rel, _, const = name.rpartition(":")
    rel = rel or entry_script(task)
    prefix = f"tuning knob {name}"
    return _assigned_literal(_constants(ast.parse(_editable_source(task, rel, prefix))), const, rel, prefix)[1]


def points(task: Task) -> tuple:
    """The points of the task's sweep: the list as declared, or a joint search (TuningSearch)
    expanded: every combination of the knobs' values and their shipped values but the shipped
    recipe itself, in grid order, or `points` of them drawn with `seed` (kept in grid order)."""
    t = task.tuning
    if not isinstance(t, TuningSearch):
        return t
    names = [name for name, _ in t.knobs]
    shipped = tuple(shipped_value(task, name) for name in names)
    axes = []
    for (_name, values), own in zip(t.knobs, shipped):
        axes.append((own, *(v for v in values if _render(own, v) != _render(own, own))))
    grid = [combo for combo in itertools.product(*axes) if combo != shipped]
    if t.points is not None and t.points < len(grid):
        keep = sorted(random.Random(t.seed).sample(range(len(grid)), t.points))
        grid = [grid[i] for i in keep]
    return tuple(tuple(zip(names, combo)) for combo in grid)


# --------------------------------------------------------------------------- grading the sweep


@dataclass(frozen=True)
class Row:
    point: str
    scored: Scored | None  # None: the point is the shipped recipe (not graded again)
    margin: float | None  # (sigma - 0.1) / noise
    verdict: str


def noise_sigma(task: Task, rec) -> float:
    """One seed's noise in sigma, as check_task's example check measures it: the seed std of phi, or
    the test split's standard error where larger, on the upper branch."""
    sd = max(rec.phi_std, rec.raw.get("test_excess_se") or 0.0)
    m = task.metric
    return seed_noise_sigma(sd, rec.anchors, m.direction, m.transform)


def _name(point: tuple | str) -> str:
    """A constant point's label, or a declared patch's name as declared_patches gives it."""
    return point if isinstance(point, str) else label(point)


def _row(point: tuple | str, s: Scored | None, noise: float) -> Row:
    name = _name(point)
    if s is None:
        return Row(name, None, None, "shipped")
    if s.status == "error":
        return Row(name, s, None, "ERROR")
    margin = (s.score - 0.1) / noise
    return Row(name, s, margin, "FAIL" if rewarded(s.score, noise) else "ok")


def declared_patches(task: Task) -> list[tuple[str, str]]:
    """(label, unified diff) of each patch the sweep declares (TuningSearch.patches): changes of the
    recipe no constant names, graded as points like the others."""
    t = task.tuning
    if not isinstance(t, TuningSearch):
        return []
    out = []
    for rel in t.patches:
        path = PROJECT_ROOT / rel
        if not path.is_file():
            raise TaskError(f"task {task.name}: tuning patch {rel} is not a file of the project (looked for {path})")
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise TaskError(f"task {task.name}: tuning patch {rel} cannot be read ({e})") from e
        if not text.strip():  # an empty diff would be taken for the shipped recipe and never graded
            raise TaskError(f"task {task.name}: tuning patch {rel} is empty: a declared point must change the recipe")
        out.append((f"patch {rel}", text))
    return out


def print_table(rows: list[Row], noise: float) -> None:
    w = max([len("point")] + [len(r.point) for r in rows])
    print(
        f"        tuning sweep (noise {noise:.4f} sigma per seed; a point fails above 0.1 by more than "
        f"{EXAMPLE_MARGIN:g} x noise and by at least {MIN_EFFECT:g})"
    )
    print(f"        {'point':<{w}}  {'per-seed sigma':<24}  {'mean':>6}  {'margin':>7}  verdict")
    for r in rows:
        s = r.scored
        per = ", ".join(f"{x:.3f}" for x in s.score_per_seed) if s and s.score_per_seed else "-"
        mean = f"{s.score:.3f}" if s and s.score is not None else "-"
        margin = f"{r.margin:+.1f}x" if r.margin is not None else "-"
        note = f" ({s.reason})" if s and s.reason else ""
        print(f"        {r.point:<{w}}  {per:<24}  {mean:>6}  {margin:>7}  {r.verdict}{note}", flush=True)


def tuning_checks(cfg: DictConfig, task: Task, rep: Report, run_dir: Path) -> list[Row]:
    """Grade every point of the task's sweep at cfg's scale; one check per point. Returns the rows."""
    ctx = context(cfg, run_dir)
    task = ctx.task  # the composed config: a sweep may be given on the command line
    if not rep.check(
        task.tuning is not None,
        "the task config declares a tuning sweep",
        "add a tuning: block to conf/task/<task>.yaml (points of train.py's main constants)",
    ):
        return []
    if not task.tuning:
        rep.warn("tuning sweep", "the task config declares an empty sweep (the shipped recipe has nothing to tune)")
        return []
    try:
        pts = points(task)
        patches = [point_patch(task, pt) for pt in pts]  # every point builds before any grading
        declared = declared_patches(task)
    except TaskError as e:
        rep.check(False, "tuning points build as patches of the entry script", str(e))
        return []
    if isinstance(task.tuning, TuningSearch):
        knobs = " x ".join(n for n, _ in task.tuning.knobs)
        print(
            f"        joint search: {len(pts)} point(s)"
            + (f" of {knobs}" if knobs else "")
            + (f", and {len(declared)} declared patch(es)" if declared else "")
        )
    pts = [*pts, *(name for name, _ in declared)]
    patches = [*patches, *(text for _, text in declared)]
    rec = anchors.ensure(ctx)
    noise = noise_sigma(task, rec)
    setup = anchors.with_budget(ctx, rec)
    seeds = list(task.scale(ctx.scale).grader_seeds)
    rows = []
    for i, (pt, patch) in enumerate(zip(pts, patches)):
        if not patch:
            rows.append(_row(pt, None, noise))
            continue
        sub = from_patch(task, task.repo, patch, scale=ctx.scale)
        name = _name(pt)
        if not rep.check(not sub.rejected, f"tuning point {name} passes the patch filter", f"{sub.rejected}"):
            continue
        say(f"grading tuning point {name}")
        rows.append(
            _row(
                pt,
                score_seeds(task, grade_seeds(setup, sub, seeds, run_dir / "tuning" / f"point_{i}"), rec.anchors),
                noise,
            )
        )
    print_table(rows, noise)
    for r in rows:
        if r.verdict == "shipped":
            continue
        if r.verdict == "ERROR":
            rep.check(False, f"tuning point {r.point} grades", r.scored.reason)
            continue
        rep.check(
            r.verdict == "ok",
            f"tuning point {r.point} gains nothing over 0.1 (sigma {r.scored.score:.3f}, {r.margin:+.1f} x noise; "
            f"a gain is over {EXAMPLE_MARGIN:g} x noise and at least {MIN_EFFECT:g})",
            "tuning alone beats the shipped recipe: ship the best point as train.py's default (record "
            "the sweep in its comments) and recalibrate",
        )
    return rows
