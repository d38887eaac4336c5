"""Anchors: calibrate them when missing, and derive a run's caps from them.

    python -m ai4ai.calibrate task=optimizer scale=smoke      (the command; this is its library)

The records themselves (where they are stored, finding one for a run's key, keeping the store
current) are `ai4ai.grading.records`. DESIGN.md keys anchors by the global benchmark version; the
task version (provenance.task_version) is that hash restricted to what this task depends on, so
adding an eleventh task does not void the anchors of the other ten.

Calibration: the 0 anchor is the hidden grader's no-information model through the hidden
evaluation; the 0.1 anchor the shipped algorithm trained on the calibration seeds (disjoint from
the grader seeds), selected and evaluated exactly as a submission is; the 1.0 anchor the grader's
best attainable value on the same test split. It also records the shipped algorithm's training
wall and CPU time, from which the caps derive.
"""

from __future__ import annotations

import socket
import statistics
import textwrap
import time
from dataclasses import dataclass, replace
from pathlib import Path

from ai4ai.core import hostspeed
from ai4ai.core.console import say
from ai4ai.core.hostspeed import Speed
from ai4ai.core.layout import RunDir
from ai4ai.core.provenance import base_version, model_sha256, versions
from ai4ai.core.scoring import phi, phi_mean_raw
from ai4ai.core.task import Task
from ai4ai.grading.context import RunContext
from ai4ai.grading.evaluation import EvalSpec, run_worker
from ai4ai.grading.plan import calibration_cut, calibration_estimate_s
from ai4ai.grading.records import (
    METERED_SCALES,
    Record,
    find,
    store,
    train_walls,
)
from ai4ai.grading.seeds import grade_seeds
from ai4ai.repo.submission import Submission

# --------------------------------------------------------------------------- caps

# At the metered scales the wall clock is only a liveness net this many times wider than the cap
# it replaced (cap_factor x the shipped wall time): seen here, a 2-core host loaded by two other
# gradings ran the shipped optimizer at a third of its idle speed.
LIVENESS_FACTOR = 4.0


@dataclass(frozen=True)
class Budget:
    wall_s: float  # --budget-s and the harness's wall-clock cut
    cpu_s: float | None  # the training tree's CPU cap; None where the wall clock binds
    source: str  # how the caps were derived, for the record


def budget(task: Task, scale: str, record: Record | None, threads: int, speed: Speed | None = None) -> Budget:
    """The caps of one training run.

    full: the wall clock binds, cap_factor x the shipped algorithm's wall time on this device
    class. ci and smoke: compute is capped in CPU time, cap_factor x the shipped algorithm's
    CPU time, which load does not change; the wall clock becomes a liveness net. `speed` (this
    host against the record's, by the hostspeed probe) scales the CPU cap, and widens the net
    on a slower host (never narrows it)."""
    b = task.scale(scale)
    if record is None:
        return Budget(b.default_cap_s, None, "uncalibrated: default wall cap")
    wall_cap = max(b.cap_min_s, b.cap_factor * record.train_wall_s)
    if scale not in METERED_SCALES:
        return Budget(wall_cap, None, f"wall: {b.cap_factor} x shipped {record.train_wall_s:.1f} s")
    if record.train_cpu_s is not None:
        cpu, how = b.cap_factor * record.train_cpu_s, f"{b.cap_factor} x shipped {record.train_cpu_s:.1f} CPU-s"
    else:  # a record from before CPU accounting: its wall time x threads bounds the CPU it used
        cpu = b.cap_factor * record.train_wall_s * threads
        how = f"{b.cap_factor} x shipped wall {record.train_wall_s:.1f} s x {threads} threads (record has no CPU time)"
    if cpu < b.cpu_min_s:  # the floor, in the record host's CPU-s like the factor's product
        cpu, how = b.cpu_min_s, f"the floor cpu_min_s {b.cpu_min_s:g} CPU-s (above {how})"
    net = LIVENESS_FACTOR * wall_cap
    if speed is not None:
        cpu, net = cpu * speed.factor, net * max(1.0, speed.factor)
        how += (
            f" x host speed {speed.factor:.2f} (probe {speed.here_cpu_s:.2f} CPU-s here, "
            f"{speed.there_cpu_s:.2f} in the record{'; clamped' if speed.clamped else ''})"
        )
    return Budget(
        net,
        round(cpu, 1),
        f"cpu: {how}; wall liveness net {LIVENESS_FACTOR} x {wall_cap:.0f} s"
        + (f" x {speed.factor:.2f}" if speed is not None and speed.factor > 1 else ""),
    )


def _times(factors: dict) -> str:
    """`1.5 x` where the scales agree, else `1.5 x at ci and 2 x at smoke`."""
    if len(set(factors.values())) == 1:
        return f"{next(iter(factors.values())):g} x"
    return " and ".join(f"{f:g} x at `{s}`" for s, f in factors.items())


def budget_rule(task: Task) -> str:
    """The compute rule of `task`, as its README states it once (`## Compute budget`; tests check
    that the README holds exactly this text and states no factor elsewhere), from its config:
    `budget` above is what enforces it."""
    metered = [s for s in task.scales if s in METERED_SCALES]
    walled = [s for s in task.scales if s not in METERED_SCALES]
    lines = ["## Compute budget", ""]
    lines.append(
        f"The one rule for compute, from `conf/task/{task.name}.yaml` (each scale's `cap_factor` and `cap_min_s`):"
    )
    lines.append("")
    if metered:
        b = {s: task.scale(s) for s in metered}
        names = " and ".join(f"`{s}`" for s in metered)
        lines.append(
            f"- At {names}: a graded training run may use {_times({s: x.cap_factor for s, x in b.items()})} "
            "the CPU time the shipped algorithm's run used at that scale, every process and thread it "
            "starts counted (by the kernel where the run gets a cgroup of its own), scaled by the grading machine's "
            "speed against the machine that calibrated it. Past that the run is stopped and the "
            "checkpoints it saved are graded. The wall clock (`--budget-s`) is only a liveness net there: "
            f"{LIVENESS_FACTOR:g} x the larger of the same factor times the shipped run's wall time and "
            + " or ".join(f"{x.cap_min_s:.0f} s (`{s}`)" for s, x in b.items())
            + "."
        )
        floors = {s: x.cpu_min_s for s, x in b.items() if x.cpu_min_s}
        if floors:
            lines.append(
                "- The CPU cap is never below "
                + " or ".join(f"{f:g} CPU-s (`{s}`)" for s, f in floors.items())
                + ", in the calibrating machine's CPU time and scaled by speed like the rest of the cap: "
                "the shipped run costs seconds, and a method that needs more has that room."
            )
    for s in walled:
        x = task.scale(s)
        lines.append(
            f"- At `{s}`: the wall clock, {x.cap_factor:g} x the shipped run's wall time on the grading GPU "
            f"as calibration measured it, at least {x.cap_min_s:.0f} s."
        )
    lines.append("- What the meter serves has its own budget (above), whatever compute is left.")
    return (
        "\n".join(textwrap.fill(ln, 96, subsequent_indent="  " if ln.startswith("- ") else "") for ln in lines) + "\n"
    )


def host_speed(ctx: RunContext, record: Record | None) -> Speed | None:
    """This host against the one `record`'s CPU time was measured on (hostspeed), where that counts:
    a metered scale on a CPU, and a record that stored its probe figure. None otherwise (factor 1)."""
    if record is None or ctx.scale not in METERED_SCALES or ctx.device != "cpu":
        return None
    there = hostspeed.record_probe(record.raw, ctx.threads)
    if there is None:
        return None
    return hostspeed.ratio(hostspeed.measure(ctx.threads)["cpu_s"], there)


def cpu_vs_shipped(record: Record | None, cpu_s: list, speed: dict | None) -> float | None:
    """The mean CPU time of a grading's training runs (`cpu_s`, CPU-s per seed; None where unread) over
    the shipped algorithm's mean in `record`, carried to this host by `speed` (the factor the CPU cap
    was scaled by). None where either side is unknown."""
    shipped = ((record.raw.get("train_cpu_s") or {}).get("mean") if record is not None else None) or None
    used = [c for c in cpu_s if c is not None and c > 0]
    if shipped is None or not used:
        return None
    factor = (speed or {}).get("factor") or 1.0
    return round(sum(used) / len(used) / (shipped * factor), 3)


def with_budget(ctx: RunContext, record: Record | None, **changes) -> RunContext:
    """`ctx` with the caps a training run gets under `record` on this host (and any other fields changed)."""
    speed = host_speed(ctx, record)
    b = budget(ctx.task, ctx.scale, record, ctx.threads, speed)
    if speed is not None and speed.factor != 1.0:
        say(
            f"  host speed: probe {speed.here_cpu_s:.2f} CPU-s here, {speed.there_cpu_s:.2f} where the anchors' CPU "
            f"time was measured: CPU cap x {speed.factor:.2f}{' (clamped)' if speed.clamped else ''}"
        )
    return replace(ctx, cap_s=b.wall_s, cpu_cap_s=b.cpu_s, host_speed=speed.as_dict() if speed else None, **changes)


# --------------------------------------------------------------------------- calibration


def empty_submission() -> Submission:
    return Submission(files={}, rejected={}, patch="", lines_added=0, lines_removed=0)


def _train_shipped(ctx: RunContext, workdir: Path, seeds: list[int], what: str) -> list:
    """The shipped algorithm graded on `seeds` under the scale's default wall cap and no CPU cap; every
    seed must grade and run to its end (a run the wall clock cut must not become the baseline or the cap)."""
    shipped = replace(ctx, run_dir=workdir, cap_s=ctx.task.scale(ctx.scale).default_cap_s, cpu_cap_s=None, nonce=None)
    results = grade_seeds(shipped, empty_submission(), seeds, workdir / "shipped")
    bad = [r for r in results if r.status != "graded"]
    if bad:
        raise RuntimeError(
            f"the shipped algorithm failed {what}: " + "; ".join(f"seed {r.seed}: {r.status} {r.reason}" for r in bad)
        )
    why = calibration_cut(results)
    if why:
        raise RuntimeError(why)
    return results


def _timing(results: list) -> dict:
    """train_wall_s and train_cpu_s of a record: per seed, mean and max."""
    out = {}
    for name, xs in (("train_wall_s", [r.train_s for r in results]), ("train_cpu_s", [r.cpu_s for r in results])):
        out[name] = {"per_seed": xs, "mean": statistics.mean(xs), "max": max(xs)}
    return out


def _provenance(ctx: RunContext, t0: float, command: str, **extra) -> dict:
    """A new record's provenance; with a brought model, its content hash and the base version by which
    the record is judged current (store)."""
    model = (
        {"base_version": base_version(ctx.task, ctx.scale), "model_sha256": model_sha256(ctx.task.model_path)}
        if ctx.task.model_path
        else {}
    )
    return {
        "calibrated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": socket.gethostname(),
        "sandbox": ctx.backend,
        "calibration_s": round(time.monotonic() - t0, 1),
        "benchmark_version_at_calibration": ctx.version,
        "command": command,
        **model,
        **extra,
        **versions(),
    }


def _probe(ctx: RunContext, how: str = "with the CPU time") -> dict:
    """The record's host_probe: this host's hostspeed figure, beside the CPU time measured here."""
    if ctx.scale not in METERED_SCALES or ctx.device != "cpu":
        return {}
    return {"host_probe": {**hostspeed.measure(ctx.threads, runs=hostspeed.CALIBRATION_RUNS), "measured": how}}


def calibrate(
    ctx: RunContext, workdir: Path, seeds: list[int] | None = None, trained: tuple = (), commit: bool = False
) -> dict:
    """Measure the anchors of ctx's task on this device class and store them; returns the record.

    `trained`: seeds of `seeds` that _train_shipped already ran under this same ctx (measure_cpu's
    one seed, whose metric did not reproduce another class's record); they are not trained again."""
    task, b = ctx.task, ctx.task.scale(ctx.scale)
    seeds = seeds or list(b.calibration_seeds)
    if len(seeds) < 5:
        raise SystemExit(f"calibration needs at least 5 seeds, got {seeds}")
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    done = {r.seed: r for r in trained if r.seed in seeds}
    say(
        f"calibrating {task.name} at {ctx.scale} on {ctx.key.device_class}: seeds {seeds}"
        + (f" (seed {', '.join(map(str, done))} already trained)" if done else "")
    )
    probe = _probe(ctx)
    fresh = {r.seed: r for r in _train_shipped(ctx, workdir, [s for s in seeds if s not in done], "during calibration")}
    results = [done.get(s) or fresh[s] for s in seeds]
    spec = EvalSpec(
        task=task.name,
        repo=str(workdir / "shipped" / ".pristine"),
        grader=str(task.grader),
        model=task.model,
        scale=ctx.scale,
        candidates=[],
        direction=task.metric.direction,
        transform=task.metric.transform,
        metadata_keys=[],
        device=ctx.device,
        threads=ctx.threads,
        mode="anchors",
    )
    ref = run_worker(spec, workdir / "anchors_eval")
    best = float(task.metric.best) if not isinstance(task.metric.best, str) else ref["best"]
    if best is None:
        raise RuntimeError(f"metric.best is {task.metric.best!r} but the grader has no best_attainable()")
    raws = [r.raw for r in results]
    phis = [phi(x, task.metric.direction, task.metric.transform) for x in raws]
    baseline = phi_mean_raw(task, raws)
    vals = [r.validation_metric for r in results if r.validation_metric is not None]
    se = [r.test_excess_se for r in results if r.test_excess_se is not None]
    p0, pb, p1 = (phi(x, task.metric.direction, task.metric.transform) for x in (ref["no_info"], baseline, best))
    if not p0 < pb < p1:  # sigma is undefined then, and every grading against the record would fail
        raise RuntimeError(
            f"calibration of {task.name} at {ctx.scale} gives anchors out of order (no_info "
            f"{ref['no_info']:.4g}, shipped {baseline:.4g}, best {best:.4g}): the shipped algorithm "
            "must beat the no-information model and stay below the best; nothing stored"
        )
    record = {
        "key": ctx.key.as_dict(),
        "anchors": {"no_info": ref["no_info"], "baseline": baseline, "best": best},
        "validation": (
            {
                "no_info": ref["validation_no_info"],
                "baseline": phi_mean_raw(task, vals),
                "best": best if not isinstance(task.metric.best, str) else ref["validation_best"],
            }
            # a task graded on a fresh instance trained these runs on that instance, so their
            # score on the visible validation split anchors nothing (its proxy shows raw values)
            if vals and ref.get("validation_no_info") is not None and not task.grading_data
            else None
        ),
        "seeds": seeds,
        "baseline_per_seed": raws,
        "phi_std": statistics.stdev(phis),
        "test_excess_se": max(se) if se else None,
        **_timing(results),
        **probe,
        "provenance": _provenance(ctx, t0, f"python -m ai4ai.calibrate task={task.name} scale={ctx.scale}"),
    }
    path = store(task.grader, record, detail={"per_seed": [r.as_dict() for r in results]}, commit=commit)
    a = record["anchors"]
    say(
        f"anchors stored in {path}: no_info {a['no_info']:.4f}, baseline {a['baseline']:.4f} "
        f"(phi std {record['phi_std']:.4f} over {len(seeds)} seeds), best {a['best']:.4f}; "
        f"shipped training {record['train_wall_s']['mean']:.1f} s, {record['train_cpu_s']['mean']:.1f} CPU-s per seed"
    )
    return record


def estimate_calibration_s(ctx: RunContext) -> tuple[float, bool]:
    """Rough time of a calibration: from any earlier record of this task and scale, else the cap."""
    b = ctx.task.scale(ctx.scale)
    walls = train_walls(ctx.task.grader, ctx.task.name, ctx.scale)
    if not walls and (est := calibration_estimate_s(ctx.task, ctx.scale)) is not None:
        return est, False
    per_seed = (max(walls) if walls else b.default_cap_s) + 15
    return per_seed * len(b.calibration_seeds), bool(walls)


def estimate_text(ctx: RunContext) -> str:
    s, measured = estimate_calibration_s(ctx)
    if measured:
        return f"about {s / 60:.0f} min"
    e = ctx.task.scale(ctx.scale).estimate
    if e is not None:
        how = "its measured step, no calibration yet" if e.measured_step_ms is not None else "nothing measured yet"
        return f"about {s / 60:.0f} min (the task's estimate; {how})"
    return f"at most {s / 60:.0f} min (no earlier calibration to go by)"


def needs_cpu_here(ctx: RunContext, rec: Record | None) -> str | None:
    """Why `rec` cannot set a CPU cap on this machine at ctx's scale (None when it can).

    At smoke, where the statistics and published numbers live, the cap must be this CPU class's own:
    CPU seconds do not carry between classes (distillation: 59.9 CPU-s per seed on an AMD EPYC, 20.6
    on an Intel Xeon), and a record from before CPU accounting only bounds CPU by a stale wall time.
    At ci (plumbing) such a record is used as it is and the result says how its cap was derived."""
    if rec is None or ctx.scale != "smoke" or not ctx.key.device_class.startswith("cpu:"):
        return None
    if rec.match != "exact":
        return f"its CPU time was measured on {rec.key.device_class}, not on {ctx.key.device_class}"
    if rec.train_cpu_s is None:
        return "it has no CPU time (calibrated before CPU accounting)"
    return None


# A seed's metric reproduces another machine's when phi differs by at most half the record's seed std,
# and never less than this (a deterministic task, pruning, has a seed std of 0 and float noise of 1e-10)
REPRODUCE_FLOOR = 1e-4


def _phi_gap(task: Task, rec: Record, here: float, there: float) -> tuple[float, float]:
    """(|phi(here) - phi(there)|, the most it may be for `here` to reproduce `rec`'s `there`)."""
    m = task.metric
    return abs(phi(here, m.direction, m.transform) - phi(there, m.direction, m.transform)), max(
        0.5 * rec.phi_std, REPRODUCE_FLOOR
    )


def measure_cpu(ctx: RunContext, rec: Record, workdir: Path, why: str, commit: bool = False) -> dict:
    """The shipped algorithm's CPU time on this machine, stored as this device class's record.

    One calibration seed of the shipped algorithm is trained and graded here exactly as in a
    calibration. Its metric must reproduce `rec`'s value for the same seed (within half the
    record's seed-to-seed spread, and at least REPRODUCE_FLOOR); then `rec`'s anchors are kept and
    the CPU and wall time measured here are added, with the provenance of both. Between an AMD EPYC
    and an Intel Xeon most tasks agreed to 1e-3 or better; sft did not (exact match 0.6072 against
    0.6358 on one seed). Where the metric does not reproduce, the anchors do not transfer either and
    a full calibration runs instead."""
    task = ctx.task
    seed = int(rec.raw["seeds"][0])
    there = float(rec.raw["baseline_per_seed"][0])
    say(
        f"the {task.name}/{ctx.scale} record cannot cap CPU here: {why}; measuring the shipped algorithm's "
        f"CPU time on {ctx.key.device_class} (seed {seed}, one shipped training)"
    )
    t0 = time.monotonic()
    probe = _probe(ctx)
    results = _train_shipped(ctx, workdir, [seed], "while measuring its CPU time")
    r0 = results[0]
    here = float(r0.raw)
    d_phi, tol = _phi_gap(task, rec, here, there)
    if d_phi > tol:
        say(
            f"seed {seed} gives {here:.6g} here and {there:.6g} in the {rec.key.device_class} record (phi differs by "
            f"{d_phi:.3g}, more than {tol:.3g}: half its seed-to-seed std, at least {REPRODUCE_FLOOR:g}): the anchors "
            "do not transfer; calibrating in full"
        )
        return calibrate(ctx, workdir / "calibration", trained=results)
    kept = {
        k: v for k, v in rec.raw.items() if k not in ("key", "train_wall_s", "train_cpu_s", "host_probe", "provenance")
    }
    anchors_from = {
        "device_class": rec.key.device_class,
        "calibrated_at": rec.raw["provenance"]["calibrated_at"],
        "host": rec.raw["provenance"].get("host"),
        "check": {"seed": seed, "metric_there": there, "metric_here": here},
    }
    record = {
        "key": ctx.key.as_dict(),
        **kept,
        **_timing(results),
        **probe,
        "provenance": _provenance(
            ctx,
            t0,
            f"python -m ai4ai.calibrate task={task.name} scale={ctx.scale} cpu_only=true",
            cpu_measured_on_seeds=[seed],
            anchors_from=anchors_from,
        ),
    }
    path = store(task.grader, record, commit=commit)
    say(
        f"CPU time stored in {path}: shipped {r0.cpu_s:.1f} CPU-s ({r0.train_s:.1f} s) on seed {seed}, whose metric "
        f"{here:.6g} reproduces the {rec.key.device_class} record's {there:.6g}; its anchors are kept"
    )
    return record


def verify(ctx: RunContext, rec: Record, workdir: Path, seeds: list[int] | None = None) -> list[dict]:
    """Retrain the shipped algorithm here on the record's calibration seeds (all, or `seeds` among them)
    and compare each seed's metric with the stored one; store nothing. The check that a record still
    describes the code it is keyed to: a record carried to a new task version by
    tools/rekey_anchors.py across a change that did move training fails it. A seed agrees when phi
    differs by at most half the record's seed std (at least REPRODUCE_FLOOR), as for measure_cpu."""
    task = ctx.task
    stored = dict(zip((int(s) for s in rec.raw["seeds"]), (float(v) for v in rec.raw["baseline_per_seed"])))
    seeds = list(stored) if seeds is None else seeds
    unknown = [s for s in seeds if s not in stored]
    if unknown:
        raise SystemExit(f"ai4ai: seeds {unknown} are not calibration seeds of this record; it has {sorted(stored)}")
    say(
        f"verifying the {task.name}/{ctx.scale} record of {rec.key.device_class} (calibrated "
        f"{rec.raw['provenance']['calibrated_at']}) on {len(seeds)} seed(s) here, {ctx.key.device_class}"
    )
    results = _train_shipped(ctx, workdir, seeds, "while verifying its anchors")
    rows = []
    for r in results:
        d_phi, tol = _phi_gap(task, rec, float(r.raw), stored[r.seed])
        rows.append(
            {
                "seed": r.seed,
                "stored": stored[r.seed],
                "here": float(r.raw),
                "d_phi": d_phi,
                "tol": tol,
                "agrees": d_phi <= tol,
            }
        )
        say(
            f"  seed {r.seed}: stored {stored[r.seed]:.6g}, here {float(r.raw):.6g}, phi differs by {d_phi:.3g} "
            f"(tolerance {tol:.3g}): {'agrees' if d_phi <= tol else 'DIFFERS'}"
        )
    return rows


def add_probe(ctx: RunContext, rec: Record, commit: bool = False) -> dict:
    """Store this host's probe figure in `rec` (of this device class), which was calibrated without one.

    The figure belongs beside the CPU time it converts, measured on the same host; a record from
    before the probe existed gets it from a later host of its device class, and says so
    (host_probe.measured). Recalibrating measures both together."""
    if rec.match != "exact":
        raise SystemExit(
            f"ai4ai: the {ctx.task.name}/{ctx.scale} record was measured on {rec.key.device_class}, not "
            f"{ctx.key.device_class}: a probe here would not describe its host; use cpu_only=true"
        )
    probe = _probe(
        ctx,
        how=f"after calibration (calibrated {rec.raw['provenance']['calibrated_at']} on host "
        f"{rec.raw['provenance'].get('host')}), on a host of the same device class",
    )
    if not probe:
        raise SystemExit(
            f"ai4ai: the host-speed probe applies only to ci and smoke on a CPU (here: {ctx.scale}, {ctx.device})"
        )
    record = {**{k: v for k, v in rec.raw.items() if k != "provenance"}, **probe, "provenance": rec.raw["provenance"]}
    path = store(ctx.task.grader, record, commit=commit)
    say(
        f"host probe stored in {path}: {probe['host_probe']['cpu_s']:.2f} CPU-s (least of "
        f"{probe['host_probe']['runs']}) for {ctx.task.name}/{ctx.scale} on {ctx.key.device_class}"
    )
    return record


def ensure(ctx: RunContext) -> Record:
    """The anchors of ctx's key; calibrated first (into <run>/calibration) when none are stored, and at
    smoke the CPU cap measured here first when the record's is another machine's (needs_cpu_here)."""
    rec = find(ctx.task.grader, ctx.key)
    if rec is not None and (why := needs_cpu_here(ctx, rec)):
        measure_cpu(ctx, rec, RunDir(ctx.run_dir).calibration, why)
        rec = find(ctx.task.grader, ctx.key)
    if rec is not None:
        return rec
    say(
        f"no anchors for {ctx.key.task}/{ctx.key.scale} on {ctx.key.device_class} (task version {ctx.key.task_version}); "
        f"calibrating first, {estimate_text(ctx)}"
    )
    calibrate(ctx, RunDir(ctx.run_dir).calibration)
    rec = find(ctx.task.grader, ctx.key)
    if rec is None:
        raise RuntimeError("calibration finished but no matching anchor record was stored")
    return rec
