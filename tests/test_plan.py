"""The GPU tiers' declared costs (conf/task/<task>.yaml, quick and full: estimate, peak_gpu_gib) and the
dry-run lines built from them (ai4ai.grading.plan), for every task: the estimate agrees with the repo's
config.py and train.py, its README shows the same figures, and the prepare lines follow the cache's real state."""

import ast
import dataclasses
import importlib.util
import math
import re
import shutil

import pytest
import yaml

from ai4ai import PROJECT_ROOT
from ai4ai.core.task import GPU_SCALES, TaskError, list_tasks, load_task, parse_task
from ai4ai.grading.anchors import budget_rule
from ai4ai.grading.plan import (
    calibration_cut,
    calibration_estimate_s,
    cost_table,
    gpu_hours,
    plan_lines,
    prepare_lines,
)
from ai4ai.repo import preparing as prep

TASKS = list_tasks()
TIERS = [(t, s) for t in TASKS for s in GPU_SCALES]


def test_there_are_ten_tasks():
    assert len(TASKS) == 10


def _config(task):
    spec = importlib.util.spec_from_file_location(f"cfg_{task.name}", task.repo / "config.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _train_constants(task) -> dict:
    tree = ast.parse((task.repo / "train.py").read_text())
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                pass
    return out


def _shipped_run(task, scale: str = "full") -> tuple[int, int]:
    """(amount, steps) of one seed of the shipped algorithm at a GPU tier, from config.py and train.py."""
    c, k, s = _config(task), _train_constants(task), _config(task).get_scale(scale)
    t = task.name
    if t == "optimizer":
        return s.budget_sequences * c.SEQ_LEN, s.budget_sequences // k["BATCH_SIZE"]
    if t == "sft":
        return s.budget_examples * c.SEQ_LEN, s.budget_examples // k["BATCH_SIZE"]
    if t == "distillation":
        steps = k["EPOCHS"] * (s.budget_prompts // k["BATCH_SIZE"])
        return steps * k["BATCH_SIZE"] * c.N_POSITIONS, steps
    if t in ("dpo", "reward_model"):
        return s.budget_pairs * 2 * c.SEQ_LEN, s.budget_pairs // k["BATCH_SIZE"]
    if t == "unlearning":
        steps = min(k["STEPS"], s.budget_examples // k["BATCH_SIZE"])
        return steps * k["BATCH_SIZE"] * c.FACT_LEN, steps
    if t == "pruning":
        return s.calib_sequences * c.SEQ_LEN, 1
    if t == "agentic_rl":
        return s.budget_env_steps, s.budget_env_steps // (k["EPISODES"] * s.max_steps)
    if t == "diffusion_rl":
        return s.budget_samples, s.budget_samples // k["BATCH_SIZE"]
    if t == "graph_diffusion":
        return s.budget_graphs, s.budget_graphs // k["BATCH_SIZE"]
    raise AssertionError(f"no formula for {t}: add one here when adding a task")


@pytest.mark.parametrize("name,tier", TIERS)
def test_estimate_matches_the_repo_config_and_training_loop(name, tier):
    task = load_task(name)
    b = task.scale(tier)
    e = b.estimate
    assert e is not None and b.peak_gpu_gib is not None, f"{name}: {tier} declares no estimate or peak_gpu_gib"
    amount, steps = _shipped_run(task, tier)
    assert e.amount == amount, f"{name}: estimate.amount {e.amount:,} but config.py/train.py give {amount:,}"
    assert e.steps == steps, f"{name}: estimate.steps {e.steps:,} but config.py/train.py give {steps:,}"
    if e.units == "tokens":  # 2N (one forward) to 8N (forward, backward, a reference forward) per token
        k = e.flops / (b.n_params * e.amount)
        assert 1.9 <= k <= 8.5, f"{name}: {e.flops:.2e} FLOPs is {k:.1f} x params x tokens"
    assert 0 < b.peak_gpu_gib <= 139, f"{name}: peak {b.peak_gpu_gib} GiB does not fit one H200"


# minutes a seed of the shipped algorithm as each tier is designed (full: 20-90; quick: about 1-2), and
# the least cap floor where the shipped run is seconds by design and that floor is a submission's budget
SIZED = {"full": (20, 90, 1200), "quick": (0.75, 2.5, 120)}


@pytest.mark.parametrize("name,tier", TIERS)
def test_each_tier_is_sized_for_one_gpu_and_the_default_cap_follows_the_estimate(name, tier):
    b = load_task(name).scale(tier)
    e = b.estimate
    lo, hi, floor = SIZED[tier]
    assert lo <= e.minutes <= hi or (e.minutes < 1 and b.cap_min_s >= floor), f"{name} {tier}: {e.minutes} min"
    # the cap until calibrated: ~3 x the expected run (the measured step where there is one), at most the
    # window; a seed at the grading cap (1.5 x the run) must still fit in the window
    expected = min(b.window_s, max(b.cap_min_s, 3 * e.expected_minutes * 60))
    assert 0.9 * expected <= b.default_cap_s <= 1.1 * expected or b.default_cap_s == b.window_s, (
        f"{name}: default_cap_s {b.default_cap_s:.0f} s, not ~3 x the expected run ({expected:.0f} s)"
    )
    assert b.default_cap_s <= b.window_s and b.cap_factor * e.expected_minutes * 60 <= b.window_s
    h = gpu_hours(load_task(name), tier)
    assert h["calibration_h"] == pytest.approx(5 * e.expected_minutes / 60)
    assert h["cell_h"] == pytest.approx(3 * max(b.cap_min_s / 60, b.cap_factor * e.expected_minutes) / 60)


def test_a_measured_step_replaces_the_estimate_in_planning(tmp_path, monkeypatch):
    """The optimizer's full step was measured on an H200 at 3 x its estimate: the dry run and the GPU-hours
    use the measurement (and say so), the declared estimate stays as the repo's README states it; a
    measured block without its `how`, or with a step that is not positive, is refused by name."""
    from ai4ai.core import task as task_mod

    t = load_task("optimizer")
    e = t.scale("full").estimate
    assert e.measured_step_ms is not None and e.measured_step_ms > 2 * e.step_ms
    assert e.expected_minutes == pytest.approx(e.steps * e.measured_step_ms / 60_000)
    assert gpu_hours(t)["seed_min"] == pytest.approx(e.expected_minutes) and e.minutes == 35
    line = next(x for x in plan_lines(t, "full", check=False) if x.startswith("on a GPU"))
    assert f"{e.measured_step_ms:g} ms a step, measured" in line and "first estimated at 8 ms" in line
    src = (task_mod.TASK_DIR / "optimizer.yaml").read_text()
    for bad, says in (
        (src.replace("        step_ms: 24.0\n", "        step_ms: -1\n"), "step_ms must be positive"),
        (src.replace("        how: ", "        why: "), "measured"),
    ):
        (tmp_path / "optimizer.yaml").write_text(bad)
        monkeypatch.setattr(task_mod, "TASK_DIR", tmp_path)
        with pytest.raises(task_mod.TaskError, match=says):
            load_task("optimizer")


@pytest.mark.parametrize("name,tier", TIERS)
def test_readme_shows_the_declared_figures(name, tier):
    task = load_task(name)
    b, readme = task.scale(tier), (task.repo / "README.md").read_text()
    head = f"| | one seed at `{tier}` |"
    assert readme.count(head) == 1, f"{task.repo.name}/README.md has no table headed {head!r}"
    text = readme[readme.index(head) :].split("\n\n", 1)[0]  # that table only
    e = b.estimate
    for row in (
        f"| parameters | {b.n_params:,} |",
        f"| steps | {e.steps:,} |",
        f"| {e.amount:,} |",
        f"| model FLOPs | {e.flops:.1e} |",
        f"| expected minutes | {e.minutes:g} |",
        f"| expected peak GPU memory | {b.peak_gpu_gib:g} GiB |",
    ):
        assert row in text, f"{task.repo.name}/README.md's {tier} table lacks {row!r}"


# a cap stated outside the README's one Compute budget section: "1.5 x the shipped run's", "4 x that
# measured time", "capped at 2 x", "about a minute of CPU"
_RESTATED = re.compile(
    r"\d+(?:\.\d+)?\s*x\s+(?:the\s+shipped|that\s+measured)|capped\s+at\s+\d|(?:safety|liveness)\s+net|minutes?\s+of\s+CPU"
)


def _outside_rule(text: str) -> str:
    i = text.index("## Compute budget")
    j = text.find("\n## ", i + 1)
    return text[:i] + (text[j:] if j >= 0 else "")


@pytest.mark.parametrize("name", TASKS)
def test_readme_states_the_compute_rule_once_as_the_config_sets_it(name):
    """The agent reads the budget in one place: the README holds anchors.budget_rule(task) (made
    from the config's cap_factor and cap_min_s) exactly once, and states no cap anywhere else."""
    task = load_task(name)
    text = (task.repo / "README.md").read_text()
    rule = budget_rule(task)
    assert text.count("## Compute budget") == 1 and rule in text, (
        f"{task.repo.name}/README.md: its Compute budget section is not anchors.budget_rule's text:\n{rule}"
    )
    restated = [m.group(0) for m in _RESTATED.finditer(_outside_rule(text))]
    assert not restated, f"{task.repo.name}/README.md states a cap outside Compute budget: {restated}"


def test_the_compute_rule_check_can_fail():
    """A factor restated elsewhere, as unlearning's README once did (4 x beside the config's 1.5 x),
    and a section that the config no longer matches, are both caught."""
    task = load_task("unlearning")
    text = (task.repo / "README.md").read_text()
    bad = text.replace("## Files", "(4 x the shipped run's CPU time at ci/smoke)\n\n## Files", 1)
    assert bad != text and _RESTATED.search(_outside_rule(bad))
    raw = yaml.safe_load((PROJECT_ROOT / "conf" / "task" / "unlearning.yaml").read_text())
    raw["scales"]["smoke"]["cap_factor"] = 2.0
    moved = budget_rule(parse_task(raw, "unlearning.yaml"))
    assert "1.5 x at `ci` and 2 x at `smoke`" in moved and moved not in text


@pytest.mark.parametrize("name,tier", TIERS)
def test_plan_lines_show_sizes_minutes_memory_and_what_to_prepare(name, tier, tmp_path):
    task = load_task(name)
    b = task.scale(tier)
    lines = plan_lines(task, tier, cache_root=tmp_path)
    text = "\n".join(lines)
    assert f"{b.n_params:,} parameters" in lines[0] and f"{b.estimate.steps:,} steps" in lines[0]
    e = b.estimate
    if e.measured_step_ms is None:
        assert f"~{e.minutes:g} min per seed" in text and "an H200 estimate, not a measurement" in text
    else:
        assert f"{e.measured_step_ms:g} ms a step, measured: {e.measured_how}" in text
        assert f"first estimated at {e.step_ms:g} ms, {e.minutes:g} min" in text
    assert f"~{b.peak_gpu_gib:g} GiB" in text
    prep_lines = [ln for ln in lines if ln.startswith("prepare")]
    assert prep_lines
    if prep.needs_data(task, tier):
        data = next(ln for ln in prep_lines if "data:" in ln)
        assert "not prepared" in data and str(tmp_path) in data
        for f in prep.expected_files(task, tier):
            assert f in data
    if prep.needs_artifacts(task, tier):
        files = task.artifacts.files(tier)
        assert files and all(f"_{tier}." in f for f in files)  # each tier prepares models of its own
        for rel in files:
            assert any(rel in ln for ln in prep_lines)
    if prep.needs_data(task, tier) or prep.needs_artifacts(task, tier):
        assert f"python -m ai4ai.prepare task={name} scale={tier}" in text
    else:
        assert "nothing" in prep_lines[0]


def test_plan_at_the_cpu_scales_says_nothing_to_prepare(tmp_path):
    lines = plan_lines(load_task("sft"), "smoke", cache_root=tmp_path)
    assert len(lines) == 1 and "nothing" in lines[0]


def _fake_cache(task, root, files: dict) -> "prep.Path":
    """A cache folder as materialize_cached leaves it (files, SHA256SUMS, .complete)."""
    dest = prep.data_dir(task, "full", root)
    dest.mkdir(parents=True)
    for n, raw in files.items():
        (dest / n).write_bytes(raw)
    (dest / "SHA256SUMS").write_text("".join(f"{prep.sha256_file(dest / n)}  {n}\n" for n in sorted(files)))
    (dest / ".complete").write_text("ok")
    return dest


def test_prepare_lines_follow_the_cache_state(tmp_path):
    task = load_task("optimizer")
    dest = _fake_cache(task, tmp_path, {"train_full.u8": b"\x01" * 256, "val.u8": b"\x02" * 128})
    line = prepare_lines(task, "full", tmp_path)[0]
    assert "cached, 2 files verified (train_full.u8, val.u8)" in line
    (dest / "val.u8").unlink()  # data_mounts removes the validation split: still complete
    assert "cached" in prepare_lines(task, "full", tmp_path)[0]
    (dest / "train_full.u8").write_bytes(b"\x03" * 256)
    damaged = prepare_lines(task, "full", tmp_path)
    assert "damaged (train_full.u8 does not match its sha256)" in damaged[0]
    assert any("run first" in ln for ln in damaged)
    shutil.rmtree(dest)
    dest.with_name(dest.name + ".partial").mkdir()
    assert "stopped midway" in prepare_lines(task, "full", tmp_path)[0]


def test_shrunk_full_has_its_own_cache_key(monkeypatch):
    task = load_task("optimizer")
    full = prep.cache_key(task)
    monkeypatch.setenv(prep.SHRINK_ENV, "cpu")
    assert prep.cache_key(task) == f"{full}-shrunk-cpu" and prep.shrink_env() == {prep.SHRINK_ENV: "cpu"}


def test_prepared_artifacts_are_made_readable_by_the_sandbox_user(tmp_path):
    """safetensors writes 0600 files; training reads the prepared model as an unprivileged user."""
    import dataclasses
    import stat

    import torch
    from safetensors.torch import save_file

    task = load_task("sft")
    repo = tmp_path / "repo"
    (repo / "artifacts").mkdir(parents=True)
    art = repo / task.artifacts.files("full")[0]
    save_file({"w": torch.zeros(2)}, str(art))
    (art.parent / "SHA256SUMS").write_text(f"{prep.sha256_file(art)}  {art.name}\n")
    (art.parent / "SHA256SUMS").chmod(0o600)
    art.chmod(0o600)  # as safetensors 0.8 leaves it
    prep.readable(dataclasses.replace(task, repo=repo))
    for f in (art, art.parent / "SHA256SUMS"):
        assert stat.S_IMODE(f.stat().st_mode) & 0o444 == 0o444, f


def _raw(name):
    import yaml

    from ai4ai.core.task import TASK_DIR

    return yaml.safe_load((TASK_DIR / f"{name}.yaml").read_text())


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda e: e.update(minutes=e["minutes"] * 3), "disagrees with steps x step_ms"),
        (lambda e: e.update(units="parsecs"), "units must be one of"),
        (lambda e: e.update(watts=700), "unknown keys"),
        (lambda e: e.pop("basis"), "missing keys"),
        (lambda e: e.update(steps=0), "must be positive"),
    ],
)
def test_the_estimate_is_parsed_strictly(edit, message):
    raw = _raw("optimizer")
    edit(raw["scales"]["full"]["estimate"])
    with pytest.raises(TaskError, match=message):
        parse_task(raw, "optimizer.yaml")


def test_peak_memory_is_optional_and_numeric():
    raw = _raw("optimizer")
    del raw["scales"]["full"]["peak_gpu_gib"], raw["scales"]["full"]["estimate"]
    b = parse_task(raw, "x").scale("full")
    assert b.peak_gpu_gib is None and b.estimate is None
    raw["scales"]["full"]["peak_gpu_gib"] = "lots"
    with pytest.raises(ValueError):
        parse_task(raw, "x")
    assert math.isfinite(load_task("optimizer").scale("full").peak_gpu_gib)


def test_calibration_estimate_and_the_cut_check():
    from ai4ai.grading.seeds import SeedResult

    task = load_task("sft")
    m = task.scale("full").estimate.expected_minutes  # sft: its step measured on an H200
    assert m > 90 and calibration_estimate_s(task, "full") == pytest.approx(5 * (m * 60 + 15))
    assert calibration_estimate_s(task, "smoke") is None
    done = SeedResult(seed=1000, status="graded", reason=None, raw=0.4, train_s=2200.0, timed_out=False)
    cut = SeedResult(seed=1001, status="graded", reason=None, raw=0.3, train_s=6700.0, timed_out=True, cut="wall")
    assert calibration_cut([done, done]) is None
    why = calibration_cut([done, cut])
    assert "seeds 1001" in why and "6700 s" in why and "default_cap_s" in why


def test_the_published_cost_tables_are_the_configs():
    """docs/gpu.md shows each GPU tier's cost table as ai4ai.grading.plan.cost_table makes it from the
    task configs (regenerate: python -m ai4ai.grading.plan quick|full), and README's totals are its."""
    tasks = [load_task(n) for n in TASKS]
    doc = (PROJECT_ROOT / "docs" / "gpu.md").read_text()
    readme = (PROJECT_ROOT / "README.md").read_text()
    for tier in GPU_SCALES:
        table = cost_table(tasks, tier)
        assert table in doc, f"docs/gpu.md's {tier} table is not the configs': python -m ai4ai.grading.plan {tier}"
        cal, cell = re.search(r"about (\d+) GPU-\w+ to calibrate .* and (\d+) GPU-\w+ to grade", table).groups()
        if tier == "full":
            assert f"about {cal} GPU-hours to calibrate all ten tasks, {cell} to grade one cell of each" in readme
        else:
            assert f"all ten tasks calibrated in about {cal} GPU-minutes" in readme
    # it moves with a config: a longer expected seed is seen in the table
    b = tasks[0].scales["quick"]
    slower = dataclasses.replace(b, estimate=dataclasses.replace(b.estimate, minutes=10 * b.estimate.minutes))
    slow = [dataclasses.replace(tasks[0], scales={**tasks[0].scales, "quick": slower}), *tasks[1:]]
    assert cost_table(slow, "quick") != cost_table(tasks, "quick") == cost_table(tasks, "quick")
