"""What a dry run says about the cost of a scale: sizes, expected GPU minutes, memory, what to prepare.

    from ai4ai.grading.plan import plan_lines
    for line in plan_lines(task, "full"): print(line)
    python -m ai4ai.grading.plan [quick|full]     # the cost table docs/gpu.md shows

The figures come from the task config's `estimate` and `peak_gpu_gib` (conf/task/<task>.yaml, full),
what will be prepared from `data.prepare`/`data.writes`/`data.artifacts`, and the cache's state
from ai4ai.prepare (each cached file is checked against its sha256 unless check=False).
"""

from __future__ import annotations

import sys
from pathlib import Path

from ai4ai import PROJECT_ROOT
from ai4ai.core.task import Task, list_tasks, load_task
from ai4ai.repo import preparing as prep

UNIT_NAMES = {
    "tokens": "tokens",
    "samples": "sampled trajectories",
    "env_steps": "environment steps",
    "graphs": "graphs",
    "examples": "examples",
}


def _rel(p: Path) -> str:
    try:
        return str(Path(p).relative_to(PROJECT_ROOT))
    except ValueError:
        return str(p)


def _hours(minutes: float) -> str:
    return f"{minutes / 60:.1f} h" if minutes >= 90 else f"{minutes:.0f} min"


def gpu_hours(task: Task, scale: str = "full") -> dict | None:
    """Expected GPU time of a calibration (its seeds) and of grading one cell (the grader seeds), in
    hours, from the estimate (its measured step where there is one): shipped runs take that, a
    submission may use the whole cap."""
    b = task.scale(scale)
    if b.estimate is None:
        return None
    seed_min = b.estimate.expected_minutes
    cap_min = max(b.cap_min_s / 60, b.cap_factor * seed_min)
    return {
        "seed_min": seed_min,
        "cap_min": cap_min,
        "calibration_h": len(b.calibration_seeds) * seed_min / 60,
        "cell_h": len(b.grader_seeds) * cap_min / 60,
    }


def plan_lines(
    task: Task, scale: str, cache_root: Path = prep.CACHE_ROOT, device: str = "cuda", check: bool = True
) -> list[str]:
    """The lines a dry run prints about `scale`'s sizes, expected minutes, peak memory and preparation.

    At ci and smoke (no estimate, nothing to prepare) this is one line saying so."""
    b = task.scale(scale)
    lines = []
    e = b.estimate
    if e is not None:
        lines.append(
            f"sizes       {b.n_params:,} parameters   {e.amount:,} {UNIT_NAMES[e.units]}   "
            f"{e.steps:,} steps   {e.flops:.1e} model FLOPs"
        )
        h = gpu_hours(task, scale)
        if e.measured_step_ms is None:
            per_seed = f"~{e.minutes:g} min per seed of the shipped algorithm ({e.step_ms:g} ms a step; an H200 estimate, not a measurement)"
        else:
            m = e.expected_minutes
            per_seed = (
                (f"~{m:.0f}" if m >= 10 else f"~{m:.2g}") + " min per seed of the shipped algorithm "
                f"({e.measured_step_ms:g} ms a step, measured: {e.measured_how}; "
                f"first estimated at {e.step_ms:g} ms, {e.minutes:g} min)"
            )
        lines.append(
            f"on a GPU    {per_seed}: calibration ~{_hours(h['calibration_h'] * 60)} "
            f"({len(b.calibration_seeds)} seeds), a graded cell up to ~{_hours(h['cell_h'] * 60)} "
            f"({len(b.grader_seeds)} seeds at the cap, {_hours(h['cap_min'])} each)"
        )
        lines.append(f"basis       {e.basis}")
    if b.peak_gpu_gib is not None:
        lines.append(f"peak memory ~{b.peak_gpu_gib:g} GiB of GPU memory per training run (shipped algorithm)")
    lines.extend(prepare_lines(task, scale, cache_root, device, check))
    return lines


SHORT_UNITS = {
    "tokens": "tokens",
    "samples": "samples",
    "env_steps": "env steps",
    "graphs": "graphs",
    "examples": "examples",
}


def cost_table(tasks: list[Task], scale: str) -> str:
    """The cost of a GPU tier, one row per task and a line of totals, from each task's declared
    estimate and measured step (gpu_hours): the table docs/gpu.md shows (tests check it is this
    text, so the published costs move with the configs). Minutes at `quick`, hours at `full`."""
    in_h = scale == "full"
    unit, per = ("GPU-h", 1.0) if in_h else ("GPU-min", 60.0)
    rows = [
        f"| task | parameters | consumed per seed | steps | model FLOPs | min per seed | peak GiB | calibration {unit} | graded cell {unit} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cal = cell = 0.0
    for t in tasks:
        b = t.scale(scale)
        e, h = b.estimate, gpu_hours(t, scale)
        cal, cell = cal + h["calibration_h"], cell + h["cell_h"]
        m = e.expected_minutes
        minutes = f"{m:.0f}" if m >= 10 else f"{m:.2g}"
        if e.measured_step_ms is not None:
            minutes += f" ({e.measured_step_ms:g} ms a step, measured)"
        rows.append(
            f"| `{t.name}` | {b.n_params:,} | {e.amount:,} {SHORT_UNITS[e.units]} | {e.steps:,} | {e.flops:.1e} | "
            f"{minutes} | {b.peak_gpu_gib:g} | {h['calibration_h'] * per:.1f} | {h['cell_h'] * per:.1f} |"
        )
    rows.append("")
    rows.append(
        f"All {len(tasks)} tasks: about {cal * per:.0f} {unit} to calibrate (5 shipped seeds a task) and "
        f"{cell * per:.0f} {unit} to grade one cell of each (3 seeds at the cap), training only."
    )
    return "\n".join(rows) + "\n"


def prepare_lines(
    task: Task, scale: str, cache_root: Path = prep.CACHE_ROOT, device: str = "cuda", check: bool = True
) -> list[str]:
    need_data, need_art = prep.needs_data(task, scale), prep.needs_artifacts(task, scale)
    if not (need_data or need_art):
        return [f"prepare     nothing: {task.name}'s {scale} data and prepared models are committed"]
    lines = []
    todo = False
    if need_data:
        st = prep.cache_state(task, scale, cache_root, check=check)
        where = f"grader {task.prepare}('{scale}') -> {_rel(st.path)}"
        if st.state == "complete":
            lines.append(
                f"prepare     data: {where}: cached, {len(st.files)} files "
                f"{'verified' if check else 'listed'} ({', '.join(st.files)})"
            )
        else:
            todo = True
            how = {
                "absent": "not prepared",
                "partial": "a prepare stopped midway (it will be regenerated)",
                "damaged": f"damaged ({'; '.join(st.problems[:2])}): will be rebuilt",
            }[st.state]
            lines.append(f"prepare     data: {where}: {how}; writes {', '.join(st.files) or 'its splits'}")
    if need_art:
        state = prep.artifact_state(task, scale)
        cmd = task.artifacts.command.format(scale=scale, device=device, data="<data>")
        for rel, s in state.items():
            if s == "ok":
                lines.append(f"prepare     artifact {rel}: present, checksum matches")
            else:
                todo = True
                lines.append(f"prepare     artifact {rel}: {s}; made by `{cmd}` in {_rel(task.repo)}")
    if todo:
        lines.append(
            f"            run first: python -m ai4ai.prepare task={task.name} scale={scale}"
            f"{'' if device == 'auto' else f' device={device}'}"
        )
    return lines


def calibration_estimate_s(task: Task, scale: str) -> float | None:
    """Expected seconds of a calibration before any has run (its seeds x the estimate), or None
    where the scale declares no estimate; anchors.estimate_calibration_s falls back to the cap."""
    b = task.scale(scale)
    return None if b.estimate is None else len(b.calibration_seeds) * (b.estimate.expected_minutes * 60 + 15)


def calibration_cut(results: list) -> str | None:
    """Why a calibration must not be stored: a shipped seed the wall clock ended (its fixed number of
    steps unfinished, which happens when default_cap_s is below its real time on this GPU) would make
    a cut run the baseline and its wall time the cap. None when every seed ran to its end."""
    cut = [r for r in results if getattr(r, "timed_out", False)]
    if not cut:
        return None
    return (
        "the shipped algorithm was cut by the wall clock on seeds "
        + ", ".join(str(r.seed) for r in cut)
        + f" after {max(r.train_s for r in cut):.0f} s: raise the task's default_cap_s for this scale and calibrate again"
    )


if __name__ == "__main__":
    print(cost_table([load_task(n) for n in list_tasks()], sys.argv[1] if len(sys.argv) > 1 else "full"), end="")
