"""The data flow of one run: config -> workspace -> agent -> submission -> grade -> score -> record.

`run(cfg)`, `grade(cfg)` and `calibrate(cfg)` are pure functions of a composed config; the
Hydra entry points below are thin wrappers around them.
"""
from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, replace
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from . import CONF_DIR, SCHEMA
from . import agents as agent_kinds
from . import anchors as anchor_store
from . import record
from .agents.base import COST_KEYS
from .console import say
from .proxy import ProxyServer, choose_submission, client_bin, trajectory_summary, write_submission_record
from .grade import Scored, budget, grade_seeds, run_nonce, score_seeds, setup_for, write_json
from .instructions import render
from .provenance import benchmark_version, default_device, device_class, task_version, torch_minor, versions
from .sandbox import agent_sandbox, resolve_backend
from .submission import Submission, from_patch, from_workspace
from .task import Task, TaskError, load_task, parse_task
from .workspace import agent_workspace, pristine_copy


# agent.network: none; api_only (no network, only the egress proxy to agent.api_hosts, which the
# coding-agent CLIs set up in agents/cli.py); open (the host network)
NETWORK_MODES = ("none", "api_only", "open")


class UsageError(SystemExit):
    """A bad request from the user: printed as one clear line, exit status 2."""

    def __init__(self, msg: str):
        print(f"ai4ai: {msg}")
        super().__init__(2)


@dataclass(frozen=True)
class Context:
    task: Task
    task_overridden: bool
    scale: str
    device: str
    threads: int
    backend: str
    version: str
    key: anchor_store.Key
    run_dir: Path


def task_from_cfg(cfg: DictConfig) -> tuple[Task, bool]:
    try:
        composed = parse_task(OmegaConf.to_container(cfg.task, resolve=True), f"task={cfg.task.name}")
        on_disk = load_task(cfg.task.name)
    except TaskError as e:
        raise UsageError(str(e))
    return composed, composed != on_disk


def resolve_scale(name: str, device: str, paid: bool) -> str:
    if name != "auto":
        return name
    if device.startswith("cuda"):
        if paid:
            raise UsageError("scale=auto on a GPU with a paid agent: ask for scale=full (or smoke) by name")
        return "full"
    return "smoke"


def context(cfg: DictConfig, run_dir: Path, paid: bool = False) -> Context:
    task, overridden = task_from_cfg(cfg)
    device = default_device() if cfg.device == "auto" else str(cfg.device)
    if device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise UsageError("device=cuda but torch sees no CUDA device; use device=cpu or device=auto")
    scale = resolve_scale(cfg.scale.name, device, paid)
    try:
        threads = task.scale(scale).threads
    except TaskError as e:
        raise UsageError(str(e))
    if device == "cpu":
        threads = min(threads, os.cpu_count() or threads)
    try:
        backend = resolve_backend(cfg.sandbox.backend)
    except Exception as e:
        raise UsageError(str(e))
    version = benchmark_version()
    key = anchor_store.Key(task=task.name, scale=scale, task_version=task_version(task),
                           device_class=device_class(device, threads), torch=torch_minor())
    return Context(task, overridden, scale, device, threads, backend, version, key, run_dir)


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig
    return Path(HydraConfig.get().runtime.output_dir)


# --------------------------------------------------------------------------- anchors

def estimate_calibration_s(ctx: Context) -> tuple[float, bool]:
    """Rough time of a calibration: from any earlier record of this task and scale, else the cap."""
    b = ctx.task.scale(ctx.scale)
    walls = anchor_store.train_walls(ctx.task.grader, ctx.task.name, ctx.scale)
    per_seed = (max(walls) if walls else b.default_cap_s) + 15
    return per_seed * len(b.calibration_seeds), bool(walls)


def _estimate_text(ctx: Context) -> str:
    s, measured = estimate_calibration_s(ctx)
    return f"about {s / 60:.0f} min" if measured else f"at most {s / 60:.0f} min (no earlier calibration to go by)"


def ensure_anchors(ctx: Context, cfg: DictConfig) -> anchor_store.Record:
    rec = anchor_store.find(ctx.task.grader, ctx.key)
    if rec is not None:
        return rec
    say(f"no anchors for {ctx.key.task}/{ctx.key.scale} on {ctx.key.device_class} (task version {ctx.key.task_version}); "
        f"calibrating first, {_estimate_text(ctx)}")
    from .calibrate import calibrate_ctx
    calibrate_ctx(ctx, ctx.run_dir / "calibration", seeds=None, progress=bool(cfg.progress))
    rec = anchor_store.find(ctx.task.grader, ctx.key)
    if rec is None:
        raise RuntimeError("calibration finished but no matching anchor record was stored")
    return rec


def describe_plan(ctx: Context, cfg: DictConfig, window_s: float | None) -> None:
    b = ctx.task.scale(ctx.scale)
    rec = anchor_store.find(ctx.task.grader, ctx.key)
    print(f"task        {ctx.task.name} ({ctx.task.family}){'  [task config overridden]' if ctx.task_overridden else ''}")
    print(f"scale       {ctx.scale}   device {ctx.key.device_class}   sandbox {ctx.backend}")
    print(f"version     benchmark {ctx.version}   task {ctx.key.task_version}   torch {ctx.key.torch}")
    if window_s is not None:
        print(f"window      {window_s:.0f} s (agent, wall clock)")
    print(f"seeds       grader {list(b.grader_seeds)}   calibration {list(b.calibration_seeds)}")
    if rec is None:
        print(f"anchors     none recorded for this key: will calibrate first, {_estimate_text(ctx)} "
              f"({len(b.calibration_seeds)} seeds)")
        print(f"train cap   {b.default_cap_s:.0f} s per seed until calibrated")
    else:
        a = rec.anchors
        print(f"anchors     no_info {a.no_info:.4g}   baseline {a.baseline:.4g}   best {a.best:.4g}   "
              f"({rec.match} match, calibrated {rec.raw['provenance']['calibrated_at']})")
        bud = budget(ctx.task, ctx.scale, rec, ctx.threads)
        if bud.cpu_s is not None:
            print(f"train cap   {bud.cpu_s:.0f} CPU-s per seed ({bud.source})")
        else:
            print(f"train cap   {bud.wall_s:.0f} s per seed "
                  f"({b.cap_factor} x shipped {rec.train_wall_s:.0f} s, at least {b.cap_min_s:.0f} s)")
    if "agent" in cfg and cfg.agent.get("max_usd") is not None:
        print(f"cost cap    {cfg.agent.max_usd} USD")


# --------------------------------------------------------------------------- grading + result

def grade_and_record(ctx: Context, cfg: DictConfig, sub: Submission, agent_name: str, agent_cfg: dict,
                     seeds: list[int], timing: dict, cost: dict | None, trajectory: dict | None,
                     started_at: str, seed: int, cell: str | None = None) -> dict:
    rec = ensure_anchors(ctx, cfg)
    setup = setup_for(ctx.task, ctx.scale, ctx.device, ctx.threads, ctx.backend, rec, ctx.run_dir,
                      progress=bool(cfg.progress), nonce=run_nonce(ctx.run_dir))
    t0 = time.monotonic()
    pristine = ctx.run_dir / ".harness" / "pristine"      # made and verified before the agent phase
    results = grade_seeds(setup, sub, seeds, ctx.run_dir / "grade", pristine if pristine.is_dir() else None)
    scored = score_seeds(ctx.task, results, rec.anchors)
    repeated = scored.status == "error" and cell is not None and \
        record.note_error(Path(cfg.results_db), cell, scored.reason) >= record.ERROR_REPEATS
    if repeated:        # the same fault again: report it as the cell's outcome instead of retrying forever
        scored = replace(scored, reason=f"{scored.reason} [repeated: this cell errored the same way "
                                        f"{record.ERROR_REPEATS} times; recorded as done, skip_done=false reruns it]")
    timing = dict(timing, grade_s=round(time.monotonic() - t0, 2),
                  train_s=round(sum(r.train_s for r in results), 2), cap_s=round(setup.cap_s, 1),
                  cpu_cap_s=setup.cpu_cap_s, train_cpu_s=round(sum(r.cpu_s or 0.0 for r in results), 2))
    result = build_result(ctx, agent_name, agent_cfg, seeds, seed, scored, results, rec, sub, timing, cost,
                          trajectory, started_at)
    record.validate(result)
    write_json(ctx.run_dir / "result.json", result)
    record.insert(Path(cfg.results_db), result, ctx.run_dir)
    if repeated:
        record.mark_cell(Path(cfg.results_db), cell, ctx.run_dir, record.ERROR_REPEATED)
    print(final_line(result, ctx.run_dir))
    return result


def build_result(ctx: Context, agent_name, agent_cfg, seeds, seed, scored: Scored, results, rec, sub, timing,
                 cost, trajectory, started_at) -> dict:
    network = agent_cfg.get("network") or "none"
    m = ctx.task.metric
    return {
        "schema": SCHEMA, "benchmark_version": ctx.version, "task": ctx.task.name, "family": ctx.task.family,
        "agent": agent_name, "agent_config": agent_cfg, "scale": ctx.scale, "seed": seed, "seeds": seeds,
        "status": scored.status, "reason": scored.reason, "flags": list(scored.flags),
        "raw": {"metric": m.name, "direction": m.direction, "transform": m.transform,
                "per_seed": scored.raw_per_seed, "mean": scored.raw_mean, "std": scored.raw_std},
        "anchors": {"no_info": rec.anchors.no_info, "baseline": rec.anchors.baseline, "best": rec.anchors.best,
                    "provenance": {"key": rec.key.as_dict(), "match": rec.match, "phi_std": rec.phi_std,
                                   **rec.raw.get("provenance", {})}},
        "score": scored.score, "score_per_seed": scored.score_per_seed,
        "score_interval": scored.interval(rec.anchors, ctx.task),
        "checkpoints": {"per_seed": [{"seed": r.seed, "status": r.status, "reason": r.reason,
                                      "candidates": r.candidates, "chosen": r.chosen,
                                      "selection_metric": next((c["selection_metric"] for c in r.candidates
                                                                if c.get("name") == r.chosen), None),
                                      "validation_metric": r.validation_metric, "timed_out": r.timed_out,
                                      "train_s": r.train_s, "cpu_s": r.cpu_s, "cut": r.cut, "steps": r.steps,
                                      "training_seed": r.training_seed, "host_idle_cores": r.host_idle_cores,
                                      "weights_sha256": r.weights_sha256} for r in results]},
        "submission": sub.summary(),
        "trajectory": trajectory or {"proxy_calls": 0, "first_valid_proxy": None, "best_proxy": None,
                                     "final_proxy": None, "regressed_after_best": None},
        "timing": timing,
        "cost": cost or {"usd": None, "input_tokens": None, "output_tokens": None},
        "sandbox": {"backend": ctx.backend, "network": network},
        "provenance": {**versions(), "repo_sha256": _repo_sha(ctx.task), "grader_sha256": _grader_sha(ctx.task),
                       "device_class": ctx.key.device_class,
                       "threads": ctx.threads, "started_at": started_at, "task_overridden": ctx.task_overridden},
    }


def _repo_sha(task: Task) -> str:
    from .provenance import tree_sha256
    return tree_sha256(task.repo)


def _grader_sha(task: Task) -> str:
    from .provenance import UNVERSIONED, tree_sha256
    return tree_sha256(task.grader, UNVERSIONED)


def final_line(result: dict, run_dir: Path) -> str:
    raw = result["raw"]
    if result["status"] == "error":
        return f"{result['task']} | {result['agent']} | ERROR: {result['reason']} | {run_dir}"
    rawtxt = f"{raw['metric']} {raw['mean']:.4f} ± {raw['std']:.4f}" if raw["mean"] is not None else f"{raw['metric']} n/a"
    lo, hi = result["score_interval"] or (math.nan, math.nan)
    note = f" [{result['status']}: {result['reason']}]" if result["reason"] else ""
    cuts = [f"seed {c['seed']} cut by its CPU cap ({c['cpu_s']:.0f} CPU-s) at step {c['steps']}"
            for c in result["checkpoints"]["per_seed"] if c.get("cut") == "cpu"]
    note += f" [{'; '.join(cuts)}]" if cuts else ""
    note += "".join(f" [flag: {f}]" for f in result.get("flags") or [])
    sb = " [sandbox: none]" if result["sandbox"]["backend"] == "none" else ""
    return (f"{result['task']} | {result['agent']} | {rawtxt} | score {result['score']:.3f} "
            f"[{lo:.3f}, {hi:.3f}] on 0/0.1/1{note}{sb} | {run_dir}")


# --------------------------------------------------------------------------- run

def agent_label(agent_cfg: dict) -> str:
    kind = agent_cfg.get("kind")
    if kind == "patch":
        return f"patch:{Path(str(agent_cfg.get('patch'))).stem}"
    return str(kind) + (f":{agent_cfg['model']}" if agent_cfg.get("model") else "") + \
        (f":{agent_cfg['effort']}" if agent_cfg.get("effort") else "")


def run(cfg: DictConfig, run_dir: Path) -> dict | None:
    agent_cfg = OmegaConf.to_container(cfg.agent, resolve=True)
    try:
        mod = agent_kinds.get(agent_cfg["kind"])
    except ValueError as e:
        raise UsageError(str(e))
    if agent_cfg.get("network", "none") not in NETWORK_MODES:
        raise UsageError(f"agent.network={agent_cfg['network']!r}: use none, api_only or open")
    ctx = context(cfg, run_dir, paid=bool(agent_cfg.get("paid")))
    window_s = ctx.task.scale(ctx.scale).window_s
    if cfg.dry_run:
        describe_plan(ctx, cfg, window_s)
        print(f"agent       {agent_label(agent_cfg)}")
        return None
    if cfg.skip_done and not ctx.task_overridden:
        done = record.find_done(Path(cfg.results_db), ctx.task.name, agent_cfg, ctx.scale, int(cfg.seed), ctx.version)
        if done and done["status"] == "error":
            say(f"skipping: this cell errored the same way {record.ERROR_REPEATS} times ({done.get('reason')}) in "
                f"{done['run_dir']}; skip_done=false reruns it")
            return None
        if done:
            say(f"skipping: this cell is done ({done['status']}, score {done['score']}) in {done['run_dir']}; "
                "skip_done=false reruns it")
            return None
    if str(cfg.submission) not in ("final", "marked", "best_proxy"):
        raise UsageError(f"submission={cfg.submission}: use final, marked or best_proxy")
    db = Path(cfg.results_db)
    cell = record.cell_key(ctx.task.name, agent_cfg, ctx.scale, int(cfg.seed), ctx.version)
    pending = record.pending_grading(db, cell) if not ctx.task_overridden else None
    if pending is not None:
        return resume_grading(ctx, cfg, pending, agent_cfg, cell)
    if hasattr(mod, "preflight"):
        from .agents.cli import AgentSetupError
        try:
            mod.preflight(agent_cfg)
        except AgentSetupError as e:
            raise UsageError(str(e))
    if agent_cfg["kind"] == "patch":
        from .agents.patch import resolve
        from .submission import PatchFormatError, parse_patch
        try:
            parse_patch(resolve(agent_cfg["patch"]).read_text())
        except FileNotFoundError as e:
            raise UsageError(str(e))
        except (PatchFormatError, UnicodeDecodeError) as e:   # before any work, not mid agent phase
            raise UsageError(f"agent.patch={agent_cfg['patch']}: not a unified diff ({e})")
    started_at = record.now()
    run_dir.mkdir(parents=True, exist_ok=True)
    say(f"run {ctx.task.name} with agent {agent_label(agent_cfg)} at scale {ctx.scale} -> {run_dir}")
    rec = ensure_anchors(ctx, cfg)     # calibrate before the agent spends its window
    harness = run_dir / ".harness"
    pristine = pristine_copy(ctx.task, harness / "pristine")
    ws = agent_workspace(ctx.task, run_dir / "workspace")
    home = run_dir / "agent_home"
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    proxy_setup = setup_for(ctx.task, ctx.scale, ctx.device, ctx.threads, ctx.backend, rec, run_dir, progress=False,
                            nonce=run_nonce(run_dir))
    t_start = time.time()
    server = ProxyServer(setup=proxy_setup, pristine=pristine, workspace=ws, run_dir=run_dir,
                         validation=rec.validation, deadline=t_start + window_s)
    sock_dir = server.start()
    sb = agent_sandbox(ctx.backend, ws, home, client_bin(run_dir), sock_dir, network=agent_cfg.get("network") == "open",
                       threads=ctx.threads, scale=ctx.scale, window_s=window_s, deadline=t_start + window_s)
    sb.extend_s = lambda: server.credit_s      # the proxy's waits for the device go back to the window
    instructions = render(ctx.task, ctx.scale, window_s, t_start)
    (run_dir / "instructions.md").write_text(instructions)
    say(f"agent phase: window {window_s:.0f} s, sandbox {ctx.backend}")
    from .agents.base import AgentContext
    actx = AgentContext(workspace=ws, instructions=instructions, window_s=window_s,
                        sandbox=sb, log_path=run_dir / "agent.log", config=agent_cfg, pristine=pristine)
    try:
        outcome = mod.run(actx)
    finally:
        server.stop()
    say(f"agent finished: exit {outcome.exit_code}, {'timed out, ' if outcome.timed_out else ''}{outcome.wall_s:.1f} s, "
        f"{server.calls} proxy call(s)")
    final = from_workspace(ctx.task, pristine, ws, scale=ctx.scale)
    sub, source = choose_submission(str(cfg.submission), final, server)
    write_submission_record(run_dir, sub, source)
    write_json(run_dir / "agent_outcome.json", {"exit_code": outcome.exit_code, "timed_out": outcome.timed_out,
                                                "wall_s": outcome.wall_s, "usage": outcome.usage, "error": outcome.error,
                                                "started_at": started_at})
    if outcome.error:      # the agent never worked (e.g. never reached its model API): error, not graded
        return record_agent_error(ctx, cfg, sub, agent_cfg, outcome, trajectory_summary(run_dir / "trajectory.jsonl"),
                                  started_at)
    record.mark_cell(db, cell, run_dir, "agent_done")
    say(f"submission ({source}): {len(sub.files)} file(s), +{sub.lines_added}/-{sub.lines_removed} lines"
        + (f", {len(sub.rejected)} rejected: " + "; ".join(f"{p} ({r})" for p, r in list(sub.rejected.items())[:5])
           if sub.rejected else ""))
    seeds = list(ctx.task.scale(ctx.scale).grader_seeds)
    cost = {k: outcome.usage.get(k) for k in COST_KEYS} if outcome.usage else None
    result = grade_and_record(ctx, cfg, sub, agent_label(agent_cfg), agent_cfg, seeds,
                              {"agent_s": round(outcome.wall_s, 2)}, cost,
                              trajectory_summary(run_dir / "trajectory.jsonl"), started_at, int(cfg.seed), cell)
    if result["status"] != "error":
        record.mark_cell(db, cell, run_dir, "graded")
    return result


def record_agent_error(ctx: Context, cfg: DictConfig, sub: Submission, agent_cfg: dict, outcome, trajectory,
                       started_at: str) -> dict:
    """Result of a run whose agent never worked: status error (not graded, retried on rerun)."""
    rec = anchor_store.find(ctx.task.grader, ctx.key)
    say(f"agent error: {outcome.error}")
    seeds = list(ctx.task.scale(ctx.scale).grader_seeds)
    cost = {k: outcome.usage.get(k) for k in COST_KEYS} if outcome.usage else None
    result = build_result(ctx, agent_label(agent_cfg), agent_cfg, seeds, int(cfg.seed),
                          Scored("error", outcome.error, [], [], None, None, None), [], rec, sub,
                          {"agent_s": round(outcome.wall_s, 2)}, cost, trajectory, started_at)
    record.validate(result)
    write_json(ctx.run_dir / "result.json", result)
    record.insert(Path(cfg.results_db), result, ctx.run_dir)
    print(final_line(result, ctx.run_dir))
    return result


def resume_grading(ctx: Context, cfg: DictConfig, run_dir: Path, agent_cfg: dict, cell: str) -> dict:
    """The agent phase of this cell finished in `run_dir` but its grading did not: grade it there."""
    say(f"resuming at grading: the agent phase of this cell finished in {run_dir}")
    ctx = replace(ctx, run_dir=run_dir)
    pristine = run_dir / ".harness" / "pristine"
    if not pristine.exists():
        pristine_copy(ctx.task, pristine)
    sub = from_patch(ctx.task, pristine, (run_dir / "submission.patch").read_text(), scale=ctx.scale)
    outcome = json.loads((run_dir / "agent_outcome.json").read_text()) if (run_dir / "agent_outcome.json").exists() else {}
    usage = outcome.get("usage") or {}
    cost = {k: usage.get(k) for k in COST_KEYS} if usage else None
    seeds = list(ctx.task.scale(ctx.scale).grader_seeds)
    result = grade_and_record(ctx, cfg, sub, agent_label(agent_cfg), agent_cfg, seeds,
                              {"agent_s": round(float(outcome.get("wall_s") or 0.0), 2)}, cost,
                              trajectory_summary(run_dir / "trajectory.jsonl"),
                              outcome.get("started_at") or record.now(), int(cfg.seed), cell)
    if result["status"] != "error":
        record.mark_cell(Path(cfg.results_db), cell, run_dir, "graded")
    return result


def grade(cfg: DictConfig, run_dir: Path) -> dict | None:
    ctx = context(cfg, run_dir)
    if cfg.dry_run:
        describe_plan(ctx, cfg, None)
        print(f"patch       {cfg.patch or '(none: the shipped algorithm)'}")
        return None
    text = ""
    if cfg.patch:
        from .agents.patch import resolve
        try:
            text = resolve(str(cfg.patch)).read_text()
        except FileNotFoundError as e:
            raise UsageError(str(e).replace("agent.patch", "patch"))
        except UnicodeDecodeError as e:
            raise UsageError(f"patch={cfg.patch}: not a unified diff (not UTF-8 text: {e})")
    run_dir.mkdir(parents=True, exist_ok=True)
    pristine = pristine_copy(ctx.task, run_dir / ".harness" / "pristine")
    from .submission import PatchFormatError
    try:
        sub = from_patch(ctx.task, pristine, text, scale=ctx.scale)
    except PatchFormatError as e:
        raise UsageError(f"patch={cfg.patch}: not a unified diff ({e})")
    (run_dir / "submission.patch").write_text(sub.patch)
    if sub.rejected:
        say("rejected: " + "; ".join(f"{p} ({r})" for p, r in sub.rejected.items()))
    seeds = [int(s) for s in cfg.seeds] if cfg.seeds else list(ctx.task.scale(ctx.scale).grader_seeds)
    label = f"patch:{Path(str(cfg.patch)).stem}" if cfg.patch else "baseline"
    say(f"grade {ctx.task.name} {label} at scale {ctx.scale}, seeds {seeds} -> {run_dir}")
    return grade_and_record(ctx, cfg, sub, label, {"kind": "grade", "patch": cfg.patch}, seeds, {"agent_s": 0.0},
                            None, None, record.now(), int(cfg.seed))


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def run_main(cfg: DictConfig) -> None:
    run(cfg, hydra_run_dir())


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="grade")
def grade_main(cfg: DictConfig) -> None:
    grade(cfg, hydra_run_dir())
