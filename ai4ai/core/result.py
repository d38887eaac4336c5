"""result.json: one frozen type, built in one place, validated on the way out and on the way in.

`Result` has exactly the fields DESIGN.md's result.json has; `build` makes it from what a run
measured, `as_dict` is what is written, and `validate` checks any dict read back (a stored run,
an audit's input) against the same fields.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ai4ai import SCHEMA
from ai4ai.core.scoring import Scored

# A result whose training runs used at least this many times the shipped run's CPU time
# (timing.cpu_vs_shipped) says so in its final line: the CPU cap's headroom (cap_factor, 1.5 at ci and
# smoke) can be spent on plain steps, and on optimizer, sft and graph_diffusion 1.4 passes of the
# shipped recipe pay (docs/tasks.md, "Compute headroom buys steps").
CPU_NOTE_AT = 1.1

STATUSES = ("graded", "invalid", "error")
RAW_KEYS = ("metric", "direction", "per_seed", "mean", "std")
EMPTY_COST = {"usd": None, "input_tokens": None, "output_tokens": None}


@dataclass(frozen=True)
class Result:
    schema: str
    benchmark_version: str
    task: str
    family: str
    agent: str
    agent_config: dict
    scale: str
    seed: int
    seeds: list
    status: str  # graded | invalid | error
    reason: str | None
    flags: list  # scored, but a reader must know (scoring.replicate_flags)
    raw: dict
    anchors: dict
    score: float | None
    score_per_seed: list
    score_interval: list | None
    checkpoints: dict
    submission: dict
    trajectory: dict
    timing: dict
    cost: dict
    sandbox: dict
    provenance: dict

    def as_dict(self) -> dict:
        return asdict(self)


FIELDS = tuple(f.name for f in fields(Result))


def validate(result: dict) -> None:
    """Raise ValueError if a result lacks a field of result.json or holds a bad value."""
    missing = [k for k in FIELDS if k not in result]
    if missing:
        raise ValueError(f"result.json lacks {missing}")
    if result["schema"] != SCHEMA:
        raise ValueError(f"unknown schema {result['schema']!r}")
    if result["status"] not in STATUSES:
        raise ValueError(f"bad status {result['status']!r}")
    for k in RAW_KEYS:
        if k not in result["raw"]:
            raise ValueError(f"raw lacks {k}")
    if not isinstance(result["flags"], list) or not all(isinstance(f, str) for f in result["flags"]):
        raise ValueError(f"flags must be a list of strings, got {result['flags']!r}")


def _seed_entry(r) -> dict:
    return {
        "seed": r.seed,
        "status": r.status,
        "reason": r.reason,
        "candidates": r.candidates,
        "chosen": r.chosen,
        "selection_metric": next((c["selection_metric"] for c in r.candidates if c.get("name") == r.chosen), None),
        "validation_metric": r.validation_metric,
        "timed_out": r.timed_out,
        "train_s": r.train_s,
        "cpu_s": r.cpu_s,
        "cut": r.cut,
        "steps": r.steps,
        "training_seed": r.training_seed,
        "host_idle_cores": r.host_idle_cores,
        "cpu_accounting": getattr(r, "cpu_accounting", None),
        "weights_sha256": r.weights_sha256,
        "served": r.served,
    }


@dataclass(frozen=True)
class Measured:
    """What one run measured, as the pipeline hands it to `build`: built once, read once."""

    agent: str  # the cell's label (e.g. claude:sonnet, patch:muon)
    agent_config: dict
    seed: int  # the cell's seed (the agent's)
    seeds: list  # the grader seeds
    scored: Scored
    seed_results: list  # grading.seeds.SeedResult, one per grader seed
    submission: dict  # Submission.summary()
    timing: dict
    cost: dict | None  # from the API gateway; None: no agent API was used
    trajectory: dict
    provenance: dict


def build(ctx, record, m: Measured) -> Result:
    """The result of a run from its context (grading.context.RunContext), its anchor record
    (grading.records.Record, or None when the run errored before anchors existed) and what it measured."""
    metric, scored = ctx.task.metric, m.scored
    anchors = (
        {
            "no_info": record.anchors.no_info,
            "baseline": record.anchors.baseline,
            "best": record.anchors.best,
            "provenance": {
                "key": record.key.as_dict(),
                "match": record.match,
                "phi_std": record.phi_std,
                **record.raw.get("provenance", {}),
            },
        }
        if record is not None
        else {}
    )
    return Result(
        schema=SCHEMA,
        benchmark_version=ctx.version,
        task=ctx.task.name,
        family=ctx.task.family,
        agent=m.agent,
        agent_config=m.agent_config,
        scale=ctx.scale,
        seed=m.seed,
        seeds=list(m.seeds),
        status=scored.status,
        reason=scored.reason,
        flags=list(scored.flags),
        raw={
            "metric": metric.name,
            "direction": metric.direction,
            "transform": metric.transform,
            "per_seed": scored.raw_per_seed,
            "mean": scored.raw_mean,
            "std": scored.raw_std,
        },
        anchors=anchors,
        score=scored.score,
        score_per_seed=scored.score_per_seed,
        score_interval=scored.interval(record.anchors, ctx.task) if record is not None else None,
        checkpoints={"per_seed": [_seed_entry(r) for r in m.seed_results]},
        submission=m.submission,
        trajectory=m.trajectory,
        timing=m.timing,
        cost=m.cost or dict(EMPTY_COST),
        sandbox={
            "backend": ctx.backend,
            "network": m.agent_config.get("network") or "none",
            # where the training runs' CPU time was read (cgroup-v2 | cgroup-v1 | process-tree)
            "cpu_accounting": ",".join(sorted({a for r in m.seed_results if (a := getattr(r, "cpu_accounting", None))}))
            or None,
        },
        provenance=m.provenance,
    )


def final_line(result: dict, run_dir: Path) -> str:
    """The one line a run prints last: task, agent, raw metric, score and interval, and every caveat."""
    raw = result["raw"]
    if result["status"] == "error":
        return f"{result['task']} | {result['agent']} | ERROR: {result['reason']} | {run_dir}"
    rawtxt = (
        f"{raw['metric']} {raw['mean']:.4f} ± {raw['std']:.4f}" if raw["mean"] is not None else f"{raw['metric']} n/a"
    )
    lo, hi = result["score_interval"] or (math.nan, math.nan)
    note = f" [{result['status']}: {result['reason']}]" if result["reason"] else ""
    cuts = [
        f"seed {c['seed']} cut by its CPU cap ({c['cpu_s']:.0f} CPU-s) at step {c['steps']}"
        for c in result["checkpoints"]["per_seed"]
        if c.get("cut") == "cpu"
    ]
    note += f" [{'; '.join(cuts)}]" if cuts else ""
    ratio = (result.get("timing") or {}).get("cpu_vs_shipped")
    if ratio is not None and ratio >= CPU_NOTE_AT:
        note += f" [compute: {ratio:.2f} x the shipped run's CPU time a seed]"
    note += "".join(f" [flag: {f}]" for f in result.get("flags") or [])
    sb = " [sandbox: none]" if result["sandbox"]["backend"] == "none" else ""
    return (
        f"{result['task']} | {result['agent']} | {rawtxt} | score {result['score']:.3f} "
        f"[{lo:.3f}, {hi:.3f}] on 0/0.1/1{note}{sb} | {run_dir}"
    )
