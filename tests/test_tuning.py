"""check_task tuning=true: the sweep's patches change only the named constants, a malformed
`tuning:` block is refused with a reason, and a real sweep grades at ci."""

import ast
import copy
import dataclasses

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from ai4ai import PROJECT_ROOT
from ai4ai.analysis.task_checks import GRADED_NOISE_MAX, MIN_EFFECT, Report, graded_noise, rewarded, seeds_needed
from ai4ai.analysis.tuning import (
    _assigned_literal,
    _constants,
    declared_patches,
    noise_sigma,
    patch_source,
    point_patch,
    points,
    shipped_value,
    tuning_checks,
)
from ai4ai.core.task import TaskError, TuningSearch, list_tasks, load_task, parse_task
from ai4ai.grading import records
from ai4ai.grading.context import context
from ai4ai.repo.patches import parse_patch
from ai4ai.repo.submission import from_patch

RAW = yaml.safe_load((PROJECT_ROOT / "conf" / "task" / "sft.yaml").read_text())


def _module_nodes(source: str) -> list[str]:
    return [ast.dump(n) for n in ast.parse(source).body]


def test_patch_changes_exactly_the_named_constants_and_nothing_else():
    task = load_task("sft")
    old = (task.repo / "train.py").read_text()
    point = (("LR", 7.5e-4), ("BATCH_SIZE", 6))
    new = patch_source(old, point)
    # only the two assignment lines differ, and on them only the value: the comments stay
    changed = [(a, b) for a, b in zip(old.splitlines(), new.splitlines()) if a != b]
    assert len(old.splitlines()) == len(new.splitlines()) and len(changed) == 2
    for a, b in changed:
        name = a.split("=")[0].strip()
        assert name in ("LR", "BATCH_SIZE") and b.split("=")[0].strip() == name
        assert a.split("#", 1)[1] == b.split("#", 1)[1]
    # the module is the same statement for statement, but for those two values
    tree = ast.parse(new)
    values = {
        n.targets[0].id: ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id.isupper()
    }
    assert values["LR"] == 7.5e-4 and values["BATCH_SIZE"] == 6
    diffs = [i for i, (x, y) in enumerate(zip(_module_nodes(old), _module_nodes(new))) if x != y]
    assert len(diffs) == 2 and all(isinstance(tree.body[i], ast.Assign) for i in diffs)
    # the patch is a unified diff of train.py alone that the submission filter accepts as that text
    patch = point_patch(task, point)
    assert [(o, n) for o, n, _ in parse_patch(patch)] == [("train.py", "train.py")]
    sub = from_patch(task, task.repo, patch, scale="smoke")
    assert not sub.rejected and sub.files == {"train.py": new}
    assert (sub.lines_added, sub.lines_removed) == (2, 2)


def test_patch_keeps_other_bytes_of_odd_sources():
    src = (
        "# température, non-ASCII before the constant (AST columns are bytes)\n"
        "BETAS = (0.9,\n         0.95)   # two lines\n"
        "STEPS: int = 100\n"
        "def f():\n    STEPS = 3\n    return STEPS\n"
    )
    new = patch_source(src, (("BETAS", (0.8, 0.99)), ("STEPS", 250)))
    assert new == (
        "# température, non-ASCII before the constant (AST columns are bytes)\n"
        "BETAS = (0.8, 0.99)   # two lines\n"
        "STEPS: int = 250\n"
        "def f():\n    STEPS = 3\n    return STEPS\n"
    )


def test_a_point_may_name_a_constant_of_another_editable_file():
    task = load_task("optimizer")  # its learning rate lives in optim.py
    patch = point_patch(task, (("optim.py:LR", 1.5e-3), ("BATCH_SIZE", 48)))
    sub = from_patch(task, task.repo, patch, scale="smoke")
    assert not sub.rejected and sorted(sub.files) == ["optim.py", "train.py"]
    for rel, name, value in (("optim.py", "LR", 1.5e-3), ("train.py", "BATCH_SIZE", 48)):
        old = (task.repo / rel).read_text()
        assert sub.files[rel] == patch_source(old, ((name, value),), rel) != old
    with pytest.raises(TaskError, match="model.py is not an editable file"):
        point_patch(task, (("model.py:N_LAYER", 2),))


def test_a_point_at_the_shipped_values_is_an_empty_patch():
    task = load_task("sft")
    tree = ast.parse((task.repo / "train.py").read_text())
    shipped = {
        n.targets[0].id: ast.literal_eval(n.value)
        for n in tree.body
        if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name) and n.targets[0].id in ("LR", "BATCH_SIZE")
    }
    assert point_patch(task, tuple(shipped.items())) == ""


@pytest.mark.parametrize(
    "tuning,msg",
    [
        ({"LR": 1.0e-3}, r"unknown key\(s\) \['LR'\]; a joint search has search, points, seed and patches"),
        ("LR=1e-3", "tuning must be a list of points, each a mapping .*, or a joint search"),
        ([{}], r"tuning\[0\]: a point is a non-empty mapping"),
        (["LR=1e-3"], r"tuning\[0\]: a point is a non-empty mapping"),
        ([{"LR": 1.0e-3}, {"not a name": 3}], r"tuning\[1\]: 'not a name' is not a constant's name"),
        ([{"LR": {"x": 2}}], "a value is a number, boolean, string"),
        ([{"BETAS": []}], "a value is a number, boolean, string"),
        (
            [{"LR": 1.0e-3, "BATCH_SIZE": 8}, {"BATCH_SIZE": 8, "LR": 1.0e-3}],
            r"tuning\[1\]: the same point appears twice",
        ),
    ],
)
def test_a_malformed_tuning_block_is_refused_with_a_reason(tuning, msg):
    d = copy.deepcopy(RAW)
    d["tuning"] = tuning
    with pytest.raises(TaskError, match=msg):
        parse_task(d, "sft.yaml")


@pytest.mark.parametrize(
    "point,msg",
    [
        ((("NO_SUCH", 1),), "has no module-level constant NO_SUCH"),
        ((("LR", "1e-3"),), r"LR is float 0.002 in train.py, the point gives str '1e-3' \(in YAML write floats"),
        ((("BATCH_SIZE", 4.0),), "BATCH_SIZE is int 16"),
        ((("SCALE", 2),), r"SCALE is computed \(BASE \* 2\)"),
        ((("TWICE", 2),), "assigns TWICE 2 times"),
    ],
)
def test_a_point_that_does_not_fit_the_script_is_refused_with_a_reason(point, msg):
    src = "LR = 2e-3\nBATCH_SIZE = 16\nBASE = 3\nSCALE = BASE * 2\nTWICE = 1\nTWICE = 2\n"
    with pytest.raises(TaskError, match=msg):
        patch_source(src, point)


@pytest.mark.parametrize("name", list_tasks())
def test_every_task_declares_a_sweep_that_builds(name):
    task = load_task(name)
    assert task.tuning is not None, f"conf/task/{name}.yaml declares no tuning: block"
    pts = points(task)  # a joint search expanded
    patches = [point_patch(task, pt) for pt in pts]  # a point that does not fit raises
    assert sum(not p for p in patches) <= 1  # at most one is the shipped recipe
    for pt, patch in [*zip(pts, patches), *declared_patches(task)]:
        if patch:
            files = {n for _, n, _ in parse_patch(patch)}
            assert files and all(task.is_editable(f) for f in files), pt
            assert not from_patch(task, task.repo, patch, scale="smoke").rejected, pt


SFT_PASSES = "tuning/sft/passes_1.4.patch"


@pytest.mark.parametrize(
    "tuning,msg",
    [
        ({"patches": SFT_PASSES}, r"tuning.patches: a list of paths of .patch files"),
        ({"patches": [SFT_PASSES, 3]}, r"tuning.patches: a list of paths"),
        ({"patches": [""]}, r"tuning.patches: a list of paths"),
        ({"patches": [str(PROJECT_ROOT / SFT_PASSES)]}, "must be a path inside the project, from its root"),
        ({"patches": ["../" + PROJECT_ROOT.name + "/" + SFT_PASSES]}, None),  # inside after all: accepted
        ({"patches": ["../../etc/passwd"]}, "must be a path inside the project"),
        ({"patches": ["tuning/sft/no_such.patch"]}, None),  # a missing file is refused where graded
        ({"patches": ["conf/task/sft.yaml"]}, "does not name a .patch file"),
        ({"patches": ["tuning/sft"]}, "does not name a .patch file"),
        ({"patches": [SFT_PASSES, SFT_PASSES]}, "a patch appears twice"),
        ({"patches": [SFT_PASSES], "points": 2}, r"tuning.search: a non-empty mapping"),
        ({"search": {"LR": [1.0e-3]}, "patches": [SFT_PASSES] * 1}, None),
        (
            {"search": {"A": list(range(8)), "B": list(range(7))}, "points": 64, "patches": [SFT_PASSES]},
            "over 64 points",
        ),
    ],
)
def test_declared_tuning_patches_are_checked_when_the_config_loads(tuning, msg):
    d = copy.deepcopy(RAW)
    d["tuning"] = tuning
    if msg is None:
        assert parse_task(d, "sft.yaml").tuning.patches
        return
    with pytest.raises(TaskError, match=msg):
        parse_task(d, "sft.yaml")


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from(["..", ".", "conf", "tuning", "sft", "passes_1.4.patch", "", "x.patch", "/", "~", "etc"]),
        min_size=1,
        max_size=7,
    )
)
def test_a_tuning_patch_path_is_refused_unless_it_is_a_patch_file_inside_the_project(parts):
    """Whatever the path's shape (dots, doubled or leading slashes, names that do not exist): parsing
    refuses it with a TaskError, or it names a .patch path inside the project, which the sweep reads
    or, missing, refuses with a TaskError before any grading."""
    rel = "/".join(parts)
    d = copy.deepcopy(RAW)
    d["tuning"] = {"patches": [rel]}
    try:
        task = parse_task(d, "sft.yaml")
    except TaskError:
        return
    path = (PROJECT_ROOT / rel).resolve()
    assert path.is_relative_to(PROJECT_ROOT.resolve()) and path.suffix == ".patch"
    try:
        declared = declared_patches(task)
    except TaskError as e:
        assert not path.is_file() and "is not a file of the project" in str(e)
        return
    assert path.is_file() and declared == [(f"patch {rel}", path.read_text())]


def test_an_empty_or_unreadable_declared_patch_is_refused_before_grading(tmp_path, monkeypatch):
    import ai4ai.analysis.tuning as tuning

    (tmp_path / "tuning").mkdir()
    (tmp_path / "tuning" / "empty.patch").write_text("\n")
    (tmp_path / "tuning" / "latin.patch").write_bytes(b"--- a/train.py\n\xff\xfe\n")
    d = copy.deepcopy(RAW)
    d["tuning"] = {"patches": [SFT_PASSES]}
    task = parse_task(d, "sft.yaml")
    monkeypatch.setattr(tuning, "PROJECT_ROOT", tmp_path)
    for name, msg in (
        ("empty", "is empty: a declared point must change the recipe"),
        ("latin", "cannot be read"),
        ("absent", "is not a file of the project"),
    ):
        bad = TuningSearch(knobs=(), patches=(f"tuning/{name}.patch",))
        with pytest.raises(TaskError, match=msg):
            declared_patches(dataclasses.replace(task, tuning=bad))


def test_a_sweep_of_patches_alone_has_no_constant_points():
    d = copy.deepcopy(RAW)
    d["tuning"] = {"patches": [SFT_PASSES]}
    task = parse_task(d, "sft.yaml")
    assert points(task) == () and [name for name, _ in declared_patches(task)] == [f"patch {SFT_PASSES}"]


@pytest.mark.parametrize(
    "tuning,msg",
    [
        ({"search": {}}, r"tuning.search: a non-empty mapping"),
        ({"search": {"LR": 1.0e-3}}, r"tuning.search.LR: a non-empty list of values"),
        ({"search": {"LR": []}}, r"tuning.search.LR: a non-empty list of values"),
        ({"search": {"LR": [1.0e-3, 1.0e-3]}}, "a value appears twice"),
        ({"search": {"not a name": [1]}}, "is not a constant's name"),
        ({"search": {"LR": [{"x": 1}]}}, "a value is a number, boolean, string"),
        ({"search": {"LR": [1.0e-3]}, "points": 0}, r"tuning.points: a whole number of points to grade, 1 to 64"),
        ({"search": {"LR": [1.0e-3]}, "points": True}, r"tuning.points: a whole number"),
        ({"search": {"LR": [1.0e-3]}, "points": 2.5}, r"tuning.points: a whole number"),
        ({"search": {"LR": [1.0e-3]}, "seed": "a"}, r"tuning.seed: a whole number"),
        ({"search": {"LR": [1.0e-3]}, "grid": 3}, r"unknown key\(s\) \['grid'\]"),
        ({"search": {k: list(range(9)) for k in ("A", "B", "C", "D")}}, "up to 10,000 combinations, over 4,096"),
        ({"search": {"A": list(range(9)), "B": list(range(9))}}, "up to 99 points to grade: say points: N"),
    ],
)
def test_a_malformed_joint_search_is_refused_with_a_reason(tuning, msg):
    d = copy.deepcopy(RAW)
    d["tuning"] = tuning
    with pytest.raises(TaskError, match=msg):
        parse_task(d, "sft.yaml")


def _with_search(name: str, search: dict, **extra):
    """The task `name` with the joint search `search` as its tuning block (through the config parser)."""
    d = yaml.safe_load((PROJECT_ROOT / "conf" / "task" / f"{name}.yaml").read_text())
    d["tuning"] = {"search": search, **extra}
    return parse_task(d, f"{name}.yaml")


def test_a_joint_search_moves_the_knobs_together():
    """optimizer: batch size and the learning rate of optim.py, each with its shipped value, every
    combination but the shipped recipe; a listed shipped value is not graded twice."""
    task = _with_search("optimizer", {"BATCH_SIZE": [16, 64, 32], "optim.py:LR": [1.5e-3, 6.0e-3]})
    b0, lr0 = shipped_value(task, "BATCH_SIZE"), shipped_value(task, "optim.py:LR")
    assert (b0, lr0) == (32, 3e-3)
    pts = points(task)
    assert len(pts) == 3 * 3 - 1
    combos = {tuple(v for _, v in pt) for pt in pts}
    assert (b0, lr0) not in combos and (16, 1.5e-3) in combos and (64, 6e-3) in combos  # both moved
    assert (16, lr0) in combos and (b0, 6e-3) in combos  # one at a time is part of the grid
    # each point is a patch of exactly the constants it moves
    sub = from_patch(task, task.repo, point_patch(task, (("BATCH_SIZE", 16), ("optim.py:LR", 1.5e-3))), scale="smoke")
    assert not sub.rejected and sorted(sub.files) == ["optim.py", "train.py"]
    sub = from_patch(task, task.repo, point_patch(task, (("BATCH_SIZE", 16), ("optim.py:LR", lr0))), scale="smoke")
    assert sorted(sub.files) == ["train.py"]


def test_a_knob_the_source_does_not_hold_is_refused_with_a_reason():
    with pytest.raises(TaskError, match="tuning knob NO_SUCH: train.py has no module-level constant NO_SUCH"):
        points(_with_search("optimizer", {"NO_SUCH": [1]}))
    with pytest.raises(TaskError, match="model.py is not an editable file"):
        points(_with_search("optimizer", {"model.py:N_LAYER": [2]}))


@settings(max_examples=40, deadline=None)
@given(
    batches=st.lists(st.integers(1, 256), min_size=1, max_size=4, unique=True),
    lrs=st.lists(st.sampled_from([1e-4, 5e-4, 1e-3, 2e-3, 3e-3, 6e-3, 1e-2]), min_size=1, max_size=4, unique=True),
    n=st.one_of(st.none(), st.integers(1, 30)),
    seed=st.integers(-(2**31), 2**31),
)
def test_joint_search_points_are_a_seeded_sample_of_the_grid(batches, lrs, n, seed):
    """Whatever the values, count and seed: the points are distinct combinations of the knobs'
    values and shipped values, never the shipped recipe, as many as asked (or the whole grid), the
    same for the same seed, and each a subset of the whole grid in grid order."""
    task = _with_search("optimizer", {"BATCH_SIZE": batches, "optim.py:LR": lrs}, points=n, seed=seed)
    whole = points(_with_search("optimizer", {"BATCH_SIZE": batches, "optim.py:LR": lrs}))
    axes = [{32, *batches}, {3e-3, *lrs}]
    assert len(whole) == len(axes[0]) * len(axes[1]) - 1
    pts = points(task)
    assert pts == points(task)  # seeded
    assert len(pts) == (len(whole) if n is None else min(n, len(whole)))
    assert len(set(pts)) == len(pts) and set(pts) <= set(whole)
    assert [whole.index(p) for p in pts] == sorted(whole.index(p) for p in pts)
    for pt in pts:
        (b_name, b), (lr_name, lr) = pt
        assert (b_name, lr_name) == ("BATCH_SIZE", "optim.py:LR") and b in axes[0] and lr in axes[1]
        assert (b, lr) != (32, 3e-3)


@pytest.mark.parametrize(
    "score,noise,gain",
    [
        (0.123, 0.0005, False),  # 46 x a tiny noise, but a hundredth of the scale: not a gain
        (0.16, 0.01, True),  # 6 x noise and 0.06
        (0.16, 0.03, False),  # 0.06, but within 3 x the noise
        (0.1 + MIN_EFFECT, 0.001, True),  # at the minimum effect
        (0.149, 0.001, False),
        (0.05, 0.001, False),
    ],
)
def test_a_gain_clears_both_the_noise_and_the_minimum_effect(score, noise, gain):
    assert rewarded(score, noise) is gain


def test_an_empty_sweep_warns_and_grades_nothing(compose_cfg, tmp_path):
    cfg = compose_cfg("check_task", ["task=pruning", "scale=ci", "stats=false", "tuning=true"])
    rep = Report(lines=[])
    assert tuning_checks(cfg, load_task("pruning"), rep, tmp_path / "run") == []
    assert [line[0] for line in rep.lines] == ["PASS", "WARN"] and not (tmp_path / "run" / "tuning").exists()


def _sweep_at_ci(compose_cfg, tuning: str):
    """check_task's config for sft at ci with `tuning` (a Hydra value) in place of the declared sweep."""
    return compose_cfg(
        "check_task",
        ["task=sft", "scale=ci", "stats=false", "tuning=true", "~task.tuning", f"+task.tuning={tuning}"],
    )


@pytest.mark.slow
def test_a_two_point_sweep_grades_for_real_at_ci(compose_cfg, tmp_path, capsys):
    cfg = _sweep_at_ci(compose_cfg, "[{BATCH_SIZE:12},{LR:3.5e-3}]")
    run_dir = tmp_path / "run"
    rep = Report(lines=[])
    rows = tuning_checks(cfg, load_task("sft"), rep, run_dir)
    out = capsys.readouterr().out
    assert [r.point for r in rows] == ["BATCH_SIZE=12", "LR=0.0035"]
    task = load_task("sft")
    rec = records.find(task.grader, context(cfg, run_dir).key)
    noise = noise_sigma(task, rec)
    for r in rows:
        assert r.scored.status == "graded", r.scored.reason
        assert len(r.scored.score_per_seed) == len(task.scale("ci").grader_seeds)
        assert r.margin == pytest.approx((r.scored.score - 0.1) / noise)
        assert r.verdict == ("FAIL" if rewarded(r.scored.score, noise) else "ok")
        assert r.point in out and f"{r.scored.score:.3f}" in out
    # each point's patch reached its training run: batch 12 is what the run printed, LR 3.5e-3 what it ran
    seed = task.scale("ci").grader_seeds[0]
    assert "steps of 12 examples" in (run_dir / "tuning" / "point_0" / f"seed_{seed}" / "train.log").read_text()
    copies = [p.read_text() for p in (run_dir / ".harness" / "t").glob("*/repo/train.py")]
    assert any("\nLR = 0.0035 " in c for c in copies) and any("\nBATCH_SIZE = 12 " in c for c in copies)
    # one check per point, failing exactly where the point clears 0.1 by more than the margin
    fails = [line for line in rep.lines if line[0] == "FAIL"]
    assert len(fails) == sum(r.verdict == "FAIL" for r in rows)


@pytest.mark.slow
def test_a_declared_patch_is_graded_as_a_point_at_ci(compose_cfg, tmp_path, capsys):
    """sft's declared patch (1.4 passes over the served examples) through the real grading at ci: its
    row carries the patch's name and the verdict of the rule every point is held to, and the training
    run made the patch's steps (1.4 x the 1,024 of one pass at ci's 4,096 examples, batches of 4)."""
    cfg = _sweep_at_ci(compose_cfg, f"{{patches:[{SFT_PASSES}]}}")
    run_dir = tmp_path / "run"
    rep = Report(lines=[])
    rows = tuning_checks(cfg, load_task("sft"), rep, run_dir)
    out = capsys.readouterr().out
    assert [r.point for r in rows] == [f"patch {SFT_PASSES}"]
    (r,) = rows
    task = load_task("sft")
    noise = noise_sigma(task, records.find(task.grader, context(cfg, run_dir).key))
    assert r.scored.status == "graded", r.scored.reason
    assert r.verdict == ("FAIL" if rewarded(r.scored.score, noise) else "ok") and r.point in out
    seed = task.scale("ci").grader_seeds[0]
    log = (run_dir / "tuning" / "point_0" / f"seed_{seed}" / "train.log").read_text()
    assert f"for {int(1.4 * 4096) // 4} steps of 4 examples" in log, log[:400]
    assert [line[0] for line in rep.lines].count("FAIL") == (r.verdict == "FAIL")


@settings(max_examples=200, deadline=None)
@given(st.floats(min_value=0.0, max_value=2.0, allow_nan=False))
def test_the_seeds_a_grading_needs_bring_its_noise_under_the_bound_and_no_fewer_do(noise):
    n = seeds_needed(noise)
    assert n >= 1 and graded_noise(noise, n) <= GRADED_NOISE_MAX
    assert n == 1 or graded_noise(noise, n - 1) > GRADED_NOISE_MAX


def test_a_grading_s_noise_falls_with_the_root_of_its_seeds():
    # diffusion_rl's seed noise on its 20-seed record (0.092): 3 grader seeds leave 0.053, 10 bring 0.029
    assert graded_noise(0.092, 3) == pytest.approx(0.0531, abs=1e-4)
    assert seeds_needed(0.092) == 10
    assert seeds_needed(0.0415) == 2 and seeds_needed(0.03) == 1 and seeds_needed(0.0) == 1
    with pytest.raises(ValueError, match="at least one seed"):
        graded_noise(0.05, 0)


def _passes(source: str) -> float:
    """PASSES of a train.py, read as the sweep reads a knob's shipped value; 1 where it has none."""
    try:
        return _assigned_literal(_constants(ast.parse(source)), "PASSES", "train.py", "")[1]
    except TaskError:
        return 1.0


@pytest.mark.parametrize("name", list_tasks())
def test_a_recipe_that_spends_the_budget_has_a_tight_cap_and_a_sweep_that_asks_for_more(name):
    """docs/budget.md, "The rule": a shipped recipe that makes more than one pass at smoke (PASSES) is
    there because more steps paid, so its smoke cap leaves it room for the host's noise only (at most
    1.15 x), and its sweep declares a patch that asks for more passes, graded as far as the cap allows.
    A recipe of one pass keeps the wider cap that leaves a method room for its overhead."""
    task = load_task(name)
    shipped = (task.repo / "train.py").read_text()
    passes = _passes(shipped)
    cap = task.scale("smoke").cap_factor
    if passes <= 1.0:
        assert cap >= 1.4, f"{name}: one pass at smoke, and a cap of {cap} x leaves a method no room"
        return
    assert cap <= 1.15, f"{name}: PASSES {passes} spends the budget, so smoke's cap must be tight, not {cap} x"
    asked = [
        _passes(section.apply(shipped))
        for _, patch in declared_patches(task)
        for section in parse_patch(patch)
        if section.path == "train.py"
    ]
    assert asked and max(asked) >= 1.4 * passes, f"{name}: the sweep declares no patch asking for more passes"
