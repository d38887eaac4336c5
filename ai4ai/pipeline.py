"""The data flow of one run: config -> workspace -> agent -> submission -> grade -> score -> record.

`run` reads as its seven steps; `grade` (a patch, no agent) and `resume` (an agent phase that
finished, a grading that did not) reuse the last ones. Each step is a function below, in order.
The commands (run.py, grade.py) only compose a config and call these.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from ai4ai import agents as agent_kinds
from ai4ai.agents.base import COST_KEYS, AgentContext, AgentOutcome
from ai4ai.agents.cli import AgentSetupError
from ai4ai.agents.patch import resolve as resolve_patch
from ai4ai.core import hostspeed, record
from ai4ai.core import result as results
from ai4ai.core.console import say
from ai4ai.core.layout import RunDir, read_json, write_json
from ai4ai.core.provenance import UNVERSIONED, tree_sha256, versions
from ai4ai.core.scoring import Scored, score_seeds
from ai4ai.core.task import GPU_SCALES
from ai4ai.core.trajectory import EMPTY_SUMMARY
from ai4ai.core.trajectory import summary as trajectory_summary
from ai4ai.grading import anchors, records
from ai4ai.grading.context import NETWORK_MODES, RunContext, UsageError, context
from ai4ai.grading.plan import plan_lines
from ai4ai.grading.seeds import grade_seeds
from ai4ai.grading.training import run_nonce
from ai4ai.repo.models import provenance_record
from ai4ai.repo.patches import PatchFormatError, parse_patch
from ai4ai.repo.submission import Submission, from_patch, from_workspace
from ai4ai.repo.workspace import agent_workspace, pristine_copy
from ai4ai.sandbox.box import agent_sandbox
from ai4ai.sandbox.walk import WalkRefused, shown
from ai4ai.window.instructions import render
from ai4ai.window.proxy import ProxyServer, choose_submission, client_bin, write_submission_record

SUBMISSION_POLICIES = ("final", "marked", "best_proxy")


@dataclass(frozen=True)
class Cell:
    """What a run is asked to do: the agent, and the results database row it fills."""

    agent_cfg: dict
    label: str
    seed: int
    db: Path
    key: str | None  # the cell's key in the results database (None: not recorded as a cell)


def agent_label(agent_cfg: dict) -> str:
    kind = agent_cfg.get("kind")
    if kind == "patch":
        return f"patch:{Path(str(agent_cfg.get('patch'))).stem}"
    return (
        str(kind)
        + (f":{agent_cfg['model']}" if agent_cfg.get("model") else "")
        + (f":{agent_cfg['effort']}" if agent_cfg.get("effort") else "")
    )


# --------------------------------------------------------------------------- run: the seven steps


def run(cfg: DictConfig, run_dir: Path) -> dict | None:
    ctx, cell, mod = plan(cfg, run_dir)  # 1. the request, checked before any work
    if cfg.dry_run:
        describe_plan(ctx, cfg, ctx.task.scale(ctx.scale).window_s)
        print(f"agent       {cell.label}")
        return None
    earlier = earlier_work(ctx, cfg, cell)  # 2. a finished cell, or one to resume
    if earlier is not None:
        return None if earlier == "done" else resume(ctx, cell, earlier)
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    say(f"run {ctx.task.name} with agent {cell.label} at scale {ctx.scale} -> {ctx.run_dir}")
    record_ = anchors.ensure(ctx)  # 3. anchors, before the window opens
    pristine, ws = prepare_workspace(ctx)  # 4. pristine copy and agent workspace
    try:
        outcome, server = run_agent(ctx, cell, mod, record_, pristine, ws)  # 5. the agent's window
        sub = take_submission(ctx, cfg, pristine, ws, server, outcome)  # 6. its submission
        if outcome.error:  # the agent never worked (e.g. never reached its model API): error, not graded
            say(f"agent error: {outcome.error}")
            scored = Scored("error", outcome.error, [], [], None, None, None)
            return finish(ctx, cell, record_, Graded(sub, scored, [], agent_timing(outcome), agent_cost(outcome.usage)))
        record.mark_cell(cell.db, cell.key, ctx.run_dir, "agent_done")
    except Exception as e:  # whatever the agent left, or the harness failed at: recorded, never lost
        return record_failure(ctx, cell, record_, e)
    try:
        return grade_and_record(ctx, cell, sub, record_, agent_timing(outcome), agent_cost(outcome.usage))  # 7.
    except Exception as e:  # the cell stays agent_done: a rerun resumes at grading
        return record_failure(ctx, cell, record_, e, sub=sub, mark=False)


def plan(cfg: DictConfig, run_dir: Path) -> tuple[RunContext, Cell, object]:
    """Step 1: the context, the agent kind and its settings; any bad request stops here."""
    agent_cfg = OmegaConf.to_container(cfg.agent, resolve=True)
    try:
        mod = agent_kinds.get(agent_cfg["kind"])
    except ValueError as e:
        raise UsageError(str(e))
    if agent_cfg.get("network", "none") not in NETWORK_MODES:
        raise UsageError(f"agent.network={agent_cfg['network']!r}: use none, api_only or open")
    if str(cfg.submission) not in SUBMISSION_POLICIES:
        raise UsageError(f"submission={cfg.submission}: use final, marked or best_proxy")
    ctx = context(cfg, run_dir, paid=bool(agent_cfg.get("paid")))
    if cfg.dry_run:
        return ctx, Cell(agent_cfg, agent_label(agent_cfg), int(cfg.seed), Path(cfg.results_db), None), mod
    if hasattr(mod, "preflight"):
        try:
            mod.preflight(agent_cfg)
        except AgentSetupError as e:
            raise UsageError(str(e))
    if agent_cfg["kind"] == "patch":
        read_patch(agent_cfg["patch"], "agent.patch")
    key = record.cell_key(ctx.task.name, agent_cfg, ctx.scale, int(cfg.seed), ctx.version)
    return ctx, Cell(agent_cfg, agent_label(agent_cfg), int(cfg.seed), Path(cfg.results_db), key), mod


def read_patch(name: str, option: str) -> str:
    """A patch file's text, checked to be a unified diff before any work (never mid agent phase)."""
    try:
        text = resolve_patch(name).read_text()
        parse_patch(text)
    except FileNotFoundError as e:
        raise UsageError(str(e).replace("agent.patch", option))
    except UnicodeDecodeError as e:
        raise UsageError(f"{option}={name}: not a unified diff (not UTF-8 text: {e})")
    except PatchFormatError as e:
        raise UsageError(f"{option}={name}: not a unified diff ({e})")
    return text


def earlier_work(ctx: RunContext, cfg: DictConfig, cell: Cell) -> str | Path | None:
    """Step 2: "done" when the results database has this cell; the run folder of an agent phase
    that finished without its grading (to resume); None to start afresh."""
    if ctx.task_overridden:
        return None
    if cfg.skip_done:
        done = record.find_done(cell.db, ctx.task.name, cell.agent_cfg, ctx.scale, cell.seed, ctx.version)
        if done and done["status"] == "error":
            say(
                f"skipping: this cell errored the same way {record.ERROR_REPEATS} times ({done.get('reason')}) in "
                f"{done['run_dir']}; skip_done=false reruns it"
            )
            return "done"
        if done:
            say(
                f"skipping: this cell is done ({done['status']}, score {done['score']}) in {done['run_dir']}; "
                "skip_done=false reruns it"
            )
            return "done"
    return record.pending_grading(cell.db, cell.key)


def prepare_workspace(ctx: RunContext) -> tuple[Path, Path]:
    """Step 4: the harness's verified pristine copy and the agent's editable workspace."""
    rd = RunDir(ctx.run_dir)
    ctx.run_dir.mkdir(parents=True, exist_ok=True)
    pristine = pristine_copy(ctx.task, rd.pristine)
    ws = agent_workspace(ctx.task, rd.workspace)
    (rd.agent_home / "tmp").mkdir(parents=True, exist_ok=True)
    return pristine, ws


def run_agent(
    ctx: RunContext, cell: Cell, mod, record_: records.Record, pristine: Path, ws: Path
) -> tuple[AgentOutcome, ProxyServer]:
    """Step 5: the agent's window, in its sandbox, with the proxy channel open."""
    rd = RunDir(ctx.run_dir)
    window_s = ctx.task.scale(ctx.scale).window_s
    started_at = record.now()
    proxy_ctx = anchors.with_budget(ctx, record_, progress=False, nonce=run_nonce(ctx.run_dir))
    t_start = time.time()
    server = ProxyServer(
        ctx=proxy_ctx,
        pristine=pristine,
        workspace=ws,
        run_dir=ctx.run_dir,
        validation=record_.validation,
        deadline=t_start + window_s,
    )
    sock_dir = server.start()
    sb = agent_sandbox(
        ctx.backend,
        ws,
        rd.agent_home,
        client_bin(ctx.run_dir),
        sock_dir,
        network=cell.agent_cfg.get("network") == "open",
        threads=ctx.threads,
        scale=ctx.scale,
        window_s=window_s,
        deadline=t_start + window_s,
    )
    sb.extend_s = lambda: server.credit_s  # the proxy's waits for the device go back to the window
    instructions = render(ctx.task, ctx.scale, window_s, t_start)
    rd.instructions.write_text(instructions)
    say(f"agent phase: window {window_s:.0f} s, sandbox {ctx.backend}")
    actx = AgentContext(
        workspace=ws,
        instructions=instructions,
        window_s=window_s,
        sandbox=sb,
        log_path=rd.agent_log,
        config=cell.agent_cfg,
        pristine=pristine,
    )
    try:
        outcome = mod.run(actx)
    finally:
        server.stop()
    say(
        f"agent finished: exit {outcome.exit_code}, {'timed out, ' if outcome.timed_out else ''}{outcome.wall_s:.1f} s, "
        f"{server.calls} proxy call(s)"
    )
    write_json(
        rd.agent_outcome,
        {
            "exit_code": outcome.exit_code,
            "timed_out": outcome.timed_out,
            "wall_s": outcome.wall_s,
            "usage": outcome.usage,
            "error": outcome.error,
            "transcript": list(outcome.transcript),
            "started_at": started_at,
        },
    )
    return outcome, server


def take_submission(
    ctx: RunContext, cfg: DictConfig, pristine: Path, ws: Path, server: ProxyServer, outcome: AgentOutcome
) -> Submission:
    """Step 6: the editable files as the window left them (or the marked or best proxied ones)."""
    try:
        final = from_workspace(ctx.task, pristine, ws, scale=ctx.scale)
    except WalkRefused:
        # the workspace as the window left it is refused; a submission marked (or proxied) while it
        # could still be read stands where the policy takes it, else the run is recorded invalid
        sub, source = choose_submission(str(cfg.submission), None, server)
        if sub is None:
            raise
    else:
        sub, source = choose_submission(str(cfg.submission), final, server)
    write_submission_record(ctx.run_dir, sub, source)
    if not outcome.error:
        say(
            f"submission ({source}): {len(sub.files)} file(s), +{sub.lines_added}/-{sub.lines_removed} lines"
            + (
                f", {len(sub.rejected)} rejected: " + "; ".join(f"{p} ({r})" for p, r in list(sub.rejected.items())[:5])
                if sub.rejected
                else ""
            )
        )
    return sub


def grade_and_record(
    ctx: RunContext,
    cell: Cell,
    sub: Submission,
    record_: records.Record,
    timing: dict,
    cost: dict | None,
    seeds: list[int] | None = None,
) -> dict:
    """Step 7: grade the submission on the grader seeds, score it, write result.json and the database."""
    started_at = record.now()
    seeds = seeds or list(ctx.task.scale(ctx.scale).grader_seeds)
    rd = RunDir(ctx.run_dir)
    grading = anchors.with_budget(ctx, record_, nonce=run_nonce(ctx.run_dir))
    t0 = time.monotonic()
    seed_results = grade_seeds(grading, sub, seeds, rd.grade, rd.pristine if rd.pristine.is_dir() else None)
    scored = score_seeds(ctx.task, seed_results, record_.anchors)
    repeated = (
        scored.status == "error"
        and cell.key is not None
        and record.note_error(cell.db, cell.key, scored.reason) >= record.ERROR_REPEATS
    )
    if repeated:  # the same fault again: report it as the cell's outcome instead of retrying forever
        scored = replace(
            scored,
            reason=f"{scored.reason} [repeated: this cell errored the same way "
            f"{record.ERROR_REPEATS} times; recorded as done, skip_done=false reruns it]",
        )
    timing = dict(
        timing,
        grade_s=round(time.monotonic() - t0, 2),
        train_s=round(sum(r.train_s for r in seed_results), 2),
        cap_s=round(grading.cap_s, 1),
        cpu_cap_s=grading.cpu_cap_s,
        train_cpu_s=round(sum(r.cpu_s or 0.0 for r in seed_results), 2),
        host_speed=grading.host_speed,
        cpu_vs_shipped=anchors.cpu_vs_shipped(record_, [r.cpu_s for r in seed_results], grading.host_speed),
    )
    out = finish(ctx, cell, record_, Graded(sub, scored, seed_results, timing, cost, seeds, started_at))
    if cell.key is not None and (repeated or out["status"] != "error"):
        record.mark_cell(cell.db, cell.key, ctx.run_dir, record.ERROR_REPEATED if repeated else "graded")
    return out


@dataclass(frozen=True)
class Graded:
    """What step 7 (or an agent that never worked) leaves to be recorded: built once, then `finish`."""

    sub: Submission
    scored: Scored
    seed_results: list
    timing: dict
    cost: dict | None
    seeds: list | None = None  # the grader seeds; None: the scale's
    started_at: str | None = None  # this grading's start, when no agent phase started the run


def finish(ctx: RunContext, cell: Cell, record_: records.Record | None, g: Graded) -> dict:
    """result.json and the results database row, and the run's final line. The run's start is the
    agent phase's when there was one (agent_outcome.json), else this grading's."""
    rd = RunDir(ctx.run_dir)
    outcome = read_json(rd.agent_outcome, {})
    measured = results.Measured(
        agent=cell.label,
        agent_config=cell.agent_cfg,
        seed=cell.seed,
        seeds=g.seeds or list(ctx.task.scale(ctx.scale).grader_seeds),
        scored=g.scored,
        seed_results=g.seed_results,
        submission=g.sub.summary(),
        trajectory=trajectory_summary(rd.trajectory, ctx.task.metric.direction)
        if rd.trajectory.exists()
        else dict(EMPTY_SUMMARY),
        timing=g.timing,
        cost=g.cost,
        provenance={
            **versions(),
            "repo_sha256": tree_sha256(ctx.task.repo),
            "grader_sha256": tree_sha256(ctx.task.grader, UNVERSIONED),
            "device_class": ctx.key.device_class,
            "threads": ctx.threads,
            "started_at": outcome.get("started_at") or g.started_at or record.now(),
            "task_overridden": ctx.task_overridden,
            "model": provenance_record(ctx.task),
        },
    )  # task.model_path's model; None: the repo's own
    res = results.build(ctx, record_, measured).as_dict()
    results.validate(res)
    write_json(rd.result, res)
    record.insert(cell.db, res, ctx.run_dir)
    print(results.final_line(res, ctx.run_dir))
    return res


def record_failure(
    ctx: RunContext,
    cell: Cell,
    record_: records.Record | None,
    error: Exception,
    sub: Submission | None = None,
    mark: bool = True,
) -> dict:
    """A failure once the agent phase has started, recorded against the cell: result.json, the
    database row and the cell's mark, with the reason, so that the cell is never silently rerun.

    A workspace over the walk's bounds (WalkRefused) is the agent's doing: `invalid`, done. Anything
    else is the harness's: `error`, with its traceback in .harness/faults.log, retried by a rerun until
    it has happened the same way record.ERROR_REPEATS times. `mark=False` leaves the cell's mark as it
    is (agent_done: a rerun resumes at grading). Should writing the result itself fail, a minimal
    result.json still says why."""
    rd = RunDir(ctx.run_dir)
    refused = isinstance(error, WalkRefused)
    status = "invalid" if refused else "error"
    reason = (
        f"the workspace was refused after the window: {error}"
        if refused
        else f"harness fault after the agent phase started: {type(error).__name__}: {shown(str(error))}"
    )
    try:
        rd.harness.mkdir(parents=True, exist_ok=True)
        with open(rd.harness / "faults.log", "a") as f:
            f.write(f"{record.now()} {reason}\n{''.join(traceback.format_exception(error))}\n")
    except OSError:
        pass
    say(("refused: " if refused else "error: ") + reason)
    repeated = False
    if not refused and cell.key is not None:
        try:
            repeated = record.note_error(cell.db, cell.key, reason) >= record.ERROR_REPEATS
        except Exception:
            repeated = False
        if repeated:
            reason += (
                f" [repeated: this cell errored the same way {record.ERROR_REPEATS} times; recorded as done, "
                "skip_done=false reruns it]"
            )
    if sub is None:
        sub = Submission(files={}, rejected={"*": reason}, patch="", lines_added=0, lines_removed=0)
        try:
            write_submission_record(ctx.run_dir, sub, "refused" if refused else "none: harness fault")
        except Exception:
            pass
    outcome = read_json(rd.agent_outcome, {})
    # invalid scores 0, as a submission whose every seed is invalid does (scoring.pooled_sigma)
    scored = Scored(status, reason, [], [], None, None, 0.0 if refused else None)
    try:
        res = finish(
            ctx, cell, record_, Graded(sub, scored, [], agent_timing(outcome), agent_cost(outcome.get("usage")))
        )
    except Exception as e:  # the last resort: the run folder still says what happened
        res = {"status": status, "reason": f"{reason}; recording it failed too: {type(e).__name__}: {e}"}
        write_json(rd.result, {"task": ctx.task.name, "agent": cell.label, "scale": ctx.scale, **res})
    if cell.key is not None and (mark or repeated):
        phase = "graded" if refused else record.ERROR_REPEATED if repeated else "error"
        record.mark_cell(cell.db, cell.key, ctx.run_dir, phase)
    return res


def agent_timing(outcome) -> dict:
    wall = outcome.get("wall_s") if isinstance(outcome, dict) else outcome.wall_s
    return {"agent_s": round(float(wall or 0.0), 2)}


def agent_cost(usage: dict | None) -> dict | None:
    return {k: usage.get(k) for k in COST_KEYS} if usage else None


# --------------------------------------------------------------------------- resume and grade


def resume(ctx: RunContext, cell: Cell, run_dir: Path) -> dict:
    """The agent phase of this cell finished in `run_dir` but its grading did not: steps 3 and 7 there."""
    say(f"resuming at grading: the agent phase of this cell finished in {run_dir}")
    ctx = replace(ctx, run_dir=run_dir)
    rd = RunDir(run_dir)
    if not rd.pristine.exists():
        pristine_copy(ctx.task, rd.pristine)
    sub = from_patch(ctx.task, rd.pristine, rd.submission_patch.read_text(), scale=ctx.scale)
    outcome = read_json(rd.agent_outcome, {})
    return grade_and_record(
        ctx, cell, sub, anchors.ensure(ctx), agent_timing(outcome), agent_cost(outcome.get("usage"))
    )


def grade(cfg: DictConfig, run_dir: Path) -> dict | None:
    """Grade a patch (or the shipped algorithm) with no agent: steps 1, 3, 4 (pristine only) and 7."""
    ctx = context(cfg, run_dir)
    if cfg.dry_run:
        describe_plan(ctx, cfg, None)
        print(f"patch       {cfg.patch or '(none: the shipped algorithm)'}")
        return None
    text = read_patch(str(cfg.patch), "patch") if cfg.patch else ""
    rd = RunDir(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    pristine = pristine_copy(ctx.task, rd.pristine)
    sub = from_patch(ctx.task, pristine, text, scale=ctx.scale)
    rd.submission_patch.write_text(sub.patch)
    if sub.rejected:
        say("rejected: " + "; ".join(f"{p} ({r})" for p, r in sub.rejected.items()))
    seeds = [int(s) for s in cfg.seeds] if cfg.seeds else list(ctx.task.scale(ctx.scale).grader_seeds)
    label = f"patch:{Path(str(cfg.patch)).stem}" if cfg.patch else "baseline"
    say(f"grade {ctx.task.name} {label} at scale {ctx.scale}, seeds {seeds} -> {run_dir}")
    cell = Cell({"kind": "grade", "patch": cfg.patch}, label, int(cfg.seed), Path(cfg.results_db), None)
    return grade_and_record(ctx, cell, sub, anchors.ensure(ctx), {"agent_s": 0.0}, None, seeds)


# --------------------------------------------------------------------------- dry run


def describe_plan(ctx: RunContext, cfg: DictConfig, window_s: float | None) -> None:
    b = ctx.task.scale(ctx.scale)
    rec = records.find(ctx.task.grader, ctx.key)
    print(
        f"task        {ctx.task.name} ({ctx.task.family}){'  [task config overridden]' if ctx.task_overridden else ''}"
    )
    print(f"scale       {ctx.scale}   device {ctx.key.device_class}   sandbox {ctx.backend}")
    print(f"version     benchmark {ctx.version}   task {ctx.key.task_version}   torch {ctx.key.torch}")
    if window_s is not None:
        print(f"window      {window_s:.0f} s (agent, wall clock)")
    print(f"seeds       grader {list(b.grader_seeds)}   calibration {list(b.calibration_seeds)}")
    if ctx.scale in GPU_SCALES:  # sizes, expected GPU minutes, peak memory, what will be prepared
        for line in plan_lines(ctx.task, ctx.scale, device=ctx.device):
            print(line)
    if rec is None:
        print(
            f"anchors     none recorded for this key: will calibrate first, {anchors.estimate_text(ctx)} "
            f"({len(b.calibration_seeds)} seeds)"
        )
        print(f"train cap   {b.default_cap_s:.0f} s per seed until calibrated")
    else:
        a = rec.anchors
        print(
            f"anchors     no_info {a.no_info:.4g}   baseline {a.baseline:.4g}   best {a.best:.4g}   "
            f"({rec.match} match, calibrated {rec.raw['provenance']['calibrated_at']})"
        )
        bud = anchors.budget(ctx.task, ctx.scale, rec, ctx.threads)
        if why := anchors.needs_cpu_here(ctx, rec):
            print(f"train cap   measured on this CPU first (one shipped seed), since {why}")
        elif bud.cpu_s is not None:
            probe = hostspeed.record_probe(rec.raw, ctx.threads) if ctx.device == "cpu" else None
            print(
                f"train cap   {bud.cpu_s:.0f} CPU-s per seed ({bud.source})"
                + (
                    f"; x this host's speed against the record's (probe {probe:.2f} CPU-s there), measured "
                    "when grading starts"
                    if probe
                    else ""
                )
            )
        else:
            print(
                f"train cap   {bud.wall_s:.0f} s per seed "
                f"({b.cap_factor} x shipped {rec.train_wall_s:.0f} s, at least {b.cap_min_s:.0f} s)"
            )
    if "agent" in cfg and cfg.agent.get("max_usd") is not None:
        print(f"cost cap    {cfg.agent.max_usd} USD")
