"""Measure a task's anchors on this device class and store them with their provenance.

    python -m ai4ai.calibrate task=optimizer scale=smoke

0 anchor: the hidden grader's no-information model through the hidden evaluation.
0.1 anchor: the shipped algorithm trained on the calibration seeds (disjoint from the
grader seeds), selected and evaluated exactly as a submission is.
1.0 anchor: the grader's best attainable value on the same test split.
It also records the shipped algorithm's training wall time, from which the cap derives.
"""
from __future__ import annotations

import socket
import statistics
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig

from . import CONF_DIR
from . import anchors as anchor_store
from .console import say
from .evaluation import EvalSpec, run_worker
from .grade import GradeSetup, _phi_mean_raw, grade_seeds, write_json
from .pipeline import context, hydra_run_dir
from .provenance import versions
from .scoring import phi
from .submission import Submission


def empty_submission() -> Submission:
    return Submission(files={}, rejected={}, patch="", lines_added=0, lines_removed=0)


def calibrate_ctx(ctx, workdir: Path, seeds: list[int] | None = None, progress: bool = True) -> dict:
    task, b = ctx.task, ctx.task.scale(ctx.scale)
    seeds = seeds or list(b.calibration_seeds)
    if len(seeds) < 5:
        raise SystemExit(f"calibration needs at least 5 seeds, got {seeds}")
    workdir.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    say(f"calibrating {task.name} at {ctx.scale} on {ctx.key.device_class}: seeds {seeds}")
    setup = GradeSetup(task=task, scale=ctx.scale, device=ctx.device, threads=ctx.threads, backend=ctx.backend,
                       cap_s=b.default_cap_s, run_dir=workdir, progress=progress)
    results = grade_seeds(setup, empty_submission(), seeds, workdir / "shipped")
    bad = [r for r in results if r.status != "graded"]
    if bad:
        raise RuntimeError("the shipped algorithm failed during calibration: "
                           + "; ".join(f"seed {r.seed}: {r.status} {r.reason}" for r in bad))
    spec = EvalSpec(task=task.name, repo=str(workdir / "shipped" / ".pristine"), grader=str(task.grader),
                    model=task.model, scale=ctx.scale, candidates=[], direction=task.metric.direction,
                    transform=task.metric.transform, metadata_keys=[], device=ctx.device, threads=ctx.threads,
                    mode="anchors")
    ref = run_worker(spec, workdir / "anchors_eval")
    best = float(task.metric.best) if not isinstance(task.metric.best, str) else ref["best"]
    if best is None:
        raise RuntimeError(f"metric.best is {task.metric.best!r} but the grader has no best_attainable()")
    raws = [r.raw for r in results]
    phis = [phi(x, task.metric.direction, task.metric.transform) for x in raws]
    walls = [r.train_s for r in results]
    cpus = [r.cpu_s for r in results]
    baseline = _phi_mean_raw(task, raws)
    vals = [r.validation_metric for r in results if r.validation_metric is not None]
    se = [r.test_excess_se for r in results if r.test_excess_se is not None]
    record = {
        "key": ctx.key.as_dict(),
        "anchors": {"no_info": ref["no_info"], "baseline": baseline, "best": best},
        "validation": ({"no_info": ref["validation_no_info"], "baseline": _phi_mean_raw(task, vals),
                        "best": best if not isinstance(task.metric.best, str) else ref["validation_best"]}
                       if vals and ref.get("validation_no_info") is not None else None),
        "seeds": seeds, "baseline_per_seed": raws,
        "phi_std": statistics.stdev(phis),
        "test_excess_se": max(se) if se else None,
        "train_wall_s": {"per_seed": walls, "mean": statistics.mean(walls), "max": max(walls)},
        "train_cpu_s": {"per_seed": cpus, "mean": statistics.mean(cpus), "max": max(cpus)},
        "provenance": {"calibrated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": socket.gethostname(),
                       "sandbox": ctx.backend, "calibration_s": round(time.monotonic() - t0, 1),
                       "benchmark_version_at_calibration": ctx.version,
                       "command": f"python -m ai4ai.calibrate task={task.name} scale={ctx.scale}",
                       **versions()},
    }
    path = anchor_store.store(task.grader, record)
    slug = ctx.key.device_class.replace(":", "_").replace(" ", "_").replace("/", "_")
    detail = task.grader / "calibration" / f"{ctx.scale}__{slug}__{ctx.key.task_version}.json"
    detail.parent.mkdir(exist_ok=True)
    write_json(detail, {**record, "per_seed": [r.as_dict() for r in results]})
    a = record["anchors"]
    say(f"anchors stored in {path}: no_info {a['no_info']:.4f}, baseline {a['baseline']:.4f} "
        f"(phi std {record['phi_std']:.4f} over {len(seeds)} seeds), best {a['best']:.4f}; "
        f"shipped training {record['train_wall_s']['mean']:.1f} s, {record['train_cpu_s']['mean']:.1f} CPU-s per seed")
    return record


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="calibrate")
def main(cfg: DictConfig) -> None:
    ctx = context(cfg, hydra_run_dir())
    seeds = [int(s) for s in cfg.seeds] if cfg.seeds else None
    calibrate_ctx(ctx, ctx.run_dir, seeds, bool(cfg.progress))


if __name__ == "__main__":
    main()
