"""Re-grade a stored submission from scratch and say whether its number still holds.

The library of `python -m ai4ai.audit` (audit.py):
    python -m ai4ai.audit run=RUN_DIR [seeds=[0,1]] [regrade=true] [anchors=recorded]
    python -m ai4ai.audit results=DB [sample=N]

A run directory carries all an audit needs: result.json (task, scale, seeds, anchors, cap,
provenance) and submission.patch. The patch is applied to a fresh pristine copy of the
frozen repo and graded again, seed by seed, into a new folder (RUN_DIR/audits/<time>/ unless
out= says otherwise), so a run directory copied to another machine audits there.

Agreement: the new score is computed with the anchors the run recorded (anchors=current
uses this checkout's record, calibrating first if there is none), so that it measures
whether training and evaluation reproduce. It agrees when
    |new - recorded| <= 3 * noise * sqrt(2 / n_seeds)
where noise is one seed's std of sigma, derived from the anchors' phi_std (the seed std of
phi measured at calibration) on the branch of the scale the recorded score sits on, as
ai4ai.check_task does; both numbers are means over n seeds, hence sqrt(2 / n).

Drift: what the number depends on, recorded vs now: the submission's own hash, the frozen
repo, the hidden grader, the benchmark version, the anchors' record, library versions and
the hardware class. Drift is reported, not judged: a re-grade that agrees despite drift
says the change did not matter for this run.

A run on your own model (task.model_path, ai4ai.repo.models) is re-graded on that same model: the
folder result.json records (or model_path=FOLDER, a copy of it elsewhere), checked by its content
hash before anything starts. A folder that is gone or whose content changed is one `ai4ai:` line
(exit 2) saying what to do; in a database audit it is that run's row (agrees NO).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import time
from dataclasses import replace
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf

from ai4ai import PROJECT_ROOT
from ai4ai.analysis.runs import load_runs
from ai4ai.core import hostspeed
from ai4ai.core.console import say
from ai4ai.core.layout import RunDir, write_json
from ai4ai.core.provenance import UNVERSIONED, benchmark_version, model_sha256, tree_sha256, versions
from ai4ai.core.scoring import Anchors, score_seeds, seed_noise_sigma
from ai4ai.grading import anchors as anchor_store
from ai4ai.grading import records
from ai4ai.grading.context import UsageError, context
from ai4ai.grading.seeds import grade_seeds
from ai4ai.repo.patches import PatchFormatError
from ai4ai.repo.submission import from_patch
from ai4ai.repo.workspace import pristine_copy

AGREE_SIGMAS = 3.0
LIBRARIES = ("ai4ai_version", "python", "torch", "transformers", "numpy", "safetensors")


def task_config(name: str) -> dict:
    """The task's config as this checkout has it (conf/task/<name>.yaml)."""
    path = PROJECT_ROOT / "conf" / "task" / f"{name}.yaml"
    if not path.is_file():
        raise UsageError(f"task {name!r} of the recorded run is not in this checkout ({path} missing)")
    return yaml.safe_load(path.read_text())


def recorded_model(result: dict) -> dict | None:
    """What result.json says of the model a run trained (task.model_path); None: the repo's own."""
    return (result.get("provenance") or {}).get("model") or None


def model_problem(result: dict, model_path: str | Path | None = None) -> str | None:
    """Why the model a run trained cannot be re-graded on from here (None: it can, or the run
    trained the repo's own model): its folder (`model_path`, else the recorded path) is gone or
    its content hash is not the recorded one."""
    rec = recorded_model(result)
    if rec is None:
        return (
            None
            if model_path is None
            else (
                f"model_path={model_path}: the audited run trained the repo's own model, not one brought with "
                f"task.model_path; audit it without model_path="
            )
        )
    where = Path(str(model_path or rec["path"])).expanduser()
    what = (
        f"the audited run trained your own model (task.model_path={rec['path']}, content sha256 "
        f"{str(rec.get('sha256'))[:16]}) and an audit re-grades on that same model"
    )
    todo = (
        "put that model back there, or pass model_path=FOLDER (python -m ai4ai.audit run=... model_path=FOLDER) "
        "with an identical copy of it"
    )
    if not where.is_dir():
        return f"{what}; {where} is gone (no such folder): {todo}"
    now = model_sha256(where)
    if now != rec.get("sha256"):
        return (
            f"{what}; the content of {where} has changed since (sha256 {now[:16]} now): it is no longer that "
            f"model; {todo}"
        )
    return None


def audit_cfg(
    result: dict,
    device: str = "auto",
    sandbox: str = "auto",
    progress: bool = False,
    model_path: str | Path | None = None,
) -> DictConfig:
    """The config ai4ai.pipeline.context() needs, built without Hydra from the recorded run: on the
    model the run trained (its recorded folder, or `model_path`, a copy of it), checked by content
    hash first (model_problem: a UsageError line)."""
    problem = model_problem(result, model_path)
    if problem:
        raise UsageError(problem)
    task = task_config(result["task"])
    rec = recorded_model(result)
    if rec is not None:
        task["model_path"] = str(Path(str(model_path or rec["path"])).expanduser().resolve())
    return OmegaConf.create(
        {
            "task": task,
            "device": device,
            "scale": {"name": result["scale"]},
            "sandbox": {"backend": sandbox},
            "progress": progress,
        }
    )


def seed_noise(result: dict) -> float | None:
    """One seed's std of sigma at the recorded score, from the recorded anchors' phi_std."""
    a, raw = result["anchors"], result["raw"]
    sd = (a.get("provenance") or {}).get("phi_std")
    if sd is None:
        return None
    anchors = Anchors(a["no_info"], a["baseline"], a["best"])
    return seed_noise_sigma(
        sd, anchors, raw["direction"], raw.get("transform", "identity"), upper=(result.get("score") or 0.0) > 0.1
    )


# --------------------------------------------------------------------------- drift


def _check(name: str, recorded, current, note: str = "") -> dict:
    changed = None if recorded is None else recorded != current
    return {
        "what": name,
        "recorded": recorded,
        "current": current,
        "changed": changed,
        "note": note or ("not recorded" if recorded is None else ""),
    }


def drift(result: dict, run_dir: Path, ctx) -> list[dict]:
    prov, task = result["provenance"], ctx.task
    patch = run_dir / (result["submission"].get("patch") or "submission.patch")
    patch_sha = hashlib.sha256(patch.read_bytes()).hexdigest() if patch.is_file() else None
    out = [
        _check(
            "submission",
            result["submission"].get("sha256"),
            patch_sha,
            "" if patch_sha else "submission.patch is missing",
        ),
        _check("frozen repo", prov.get("repo_sha256"), tree_sha256(task.repo)),
        _check("grader", prov.get("grader_sha256"), tree_sha256(task.grader, UNVERSIONED)),
        _check("benchmark version", result["benchmark_version"], benchmark_version()),
    ]
    rec_prov = result["anchors"].get("provenance") or {}
    now = records.find(task.grader, ctx.key)
    rec_id = {
        "calibrated_at": rec_prov.get("calibrated_at"),
        **{k: result["anchors"][k] for k in ("no_info", "baseline", "best")},
    }
    cur_id = (
        None
        if now is None
        else {
            "calibrated_at": now.raw.get("provenance", {}).get("calibrated_at"),
            "no_info": now.anchors.no_info,
            "baseline": now.anchors.baseline,
            "best": now.anchors.best,
        }
    )
    out.append(
        _check(
            "anchors",
            rec_id,
            cur_id,
            "no record for this key now: anchors=current would calibrate" if now is None else "",
        )
    )
    cur = versions()
    diff = {k: (prov.get(k), cur.get(k)) for k in LIBRARIES if k in prov and prov.get(k) != cur.get(k)}
    out.append(
        {
            "what": "libraries",
            "recorded": {k: v[0] for k, v in diff.items()},
            "current": {k: v[1] for k, v in diff.items()},
            "changed": bool(diff),
            "note": "",
        }
    )
    out.append(_check("hardware class", prov.get("device_class"), ctx.key.device_class))
    if recorded_model(result) is not None:
        rec = recorded_model(result)
        out.append(
            _check(
                "model",
                rec.get("sha256"),
                model_sha256(ctx.task.model_path),
                f"your own model, re-graded from {ctx.task.model_path}",
            )
        )
    if prov.get("task_overridden"):
        note = "the recorded run did not use the task as configured"
        if recorded_model(result) is not None:
            note = (
                "task.model_path (your own model) counts as an override; whether the run overrode anything "
                "else is not recorded"
            )
        out.append(
            {
                "what": "task config",
                "recorded": "overridden on the command line",
                "current": "as on disk",
                "changed": True,
                "note": note,
            }
        )
    return out


# --------------------------------------------------------------------------- one run


def _fresh(path: Path) -> Path:
    p, i = path, 1
    while p.exists():
        p, i = path.with_name(f"{path.name}_{i}"), i + 1
    return p


def audit_run(
    run_dir: Path,
    seeds: list[int] | None = None,
    regrade: bool = True,
    anchors: str = "recorded",
    device: str = "auto",
    sandbox: str = "auto",
    out: Path | None = None,
    progress: bool = False,
    model_path: str | Path | None = None,
) -> dict:
    """Audit one run directory; returns (and writes to OUT/audit.json) what was found. A run on your
    own model is re-graded on it (`model_path`: a copy of it, when the recorded folder moved)."""
    run_dir = Path(run_dir).resolve()
    path = run_dir / "result.json"
    if not path.is_file():
        raise UsageError(f"{run_dir} has no result.json: not a run directory")
    result = json.loads(path.read_text())
    cfg = audit_cfg(result, device, sandbox, progress, model_path)
    out = _fresh(Path(out) if out else run_dir / "audits" / time.strftime("%Y%m%d-%H%M%S"))
    out.mkdir(parents=True)
    ctx = context(cfg, out)
    if ctx.scale != result["scale"]:
        raise UsageError(f"recorded scale {result['scale']!r} resolved to {ctx.scale!r}")
    report = {
        "run_dir": str(run_dir),
        "task": result["task"],
        "agent": result["agent"],
        "scale": result["scale"],
        "recorded": {
            "status": result["status"],
            "score": result.get("score"),
            "score_per_seed": result.get("score_per_seed"),
            "seeds": result.get("seeds"),
        },
        "drift": drift(result, run_dir, ctx),
        "audit_dir": str(out),
        "regrade": None,
        "agrees": None,
    }
    if regrade:
        report["regrade"] = regrade_run(result, run_dir, ctx, cfg, seeds, anchors, out)
        report["agrees"] = report["regrade"]["agrees"]
    write_json(out / "audit.json", report)
    return report


def _recorded_for(result: dict, seeds: list[int]) -> float | None:
    """The recorded mean score over `seeds` (all of them when they are the recorded seeds)."""
    per = dict(zip(result.get("seeds") or [], result.get("score_per_seed") or []))
    if list(seeds) == list(result.get("seeds") or []) or not per:
        return result.get("score")
    vals = [per[s] for s in seeds if s in per]
    return sum(vals) / len(vals) if len(vals) == len(seeds) else None


def recorded_caps(setup, timing: dict):
    """`setup` under the caps a run recorded, carried to this host: the recorded CPU cap x this host's
    probe / the probe of the host that graded it (hostspeed). A run graded before the probe existed
    is taken to have run at the speed of its anchors' host. Returns (setup, the Speed used or None)."""
    cpu = float(timing["cpu_cap_s"]) if timing.get("cpu_cap_s") else None
    wall = float(timing["cap_s"])
    speed = None
    here = (setup.host_speed or {}).get("probe_cpu_s_here")
    then = (timing.get("host_speed") or {}).get("probe_cpu_s_here") or (setup.host_speed or {}).get(
        "probe_cpu_s_record"
    )
    if cpu is not None and here and then:
        speed = hostspeed.ratio(float(here), float(then))
        cpu, wall = round(cpu * speed.factor, 1), wall * max(1.0, speed.factor)
    return replace(setup, cap_s=wall, cpu_cap_s=cpu, host_speed=speed.as_dict() if speed else None), speed


def regrade_run(result: dict, run_dir: Path, ctx, cfg, seeds, anchors: str, out: Path) -> dict:
    task = ctx.task
    seeds = [int(s) for s in seeds] if seeds else [int(s) for s in result["seeds"]]
    patch = run_dir / (result["submission"].get("patch") or "submission.patch")
    text = patch.read_text() if patch.is_file() else ""
    if not patch.is_file() and result["submission"].get("files"):
        return {"agrees": False, "reason": "submission.patch is missing; nothing to re-grade"}
    pristine = pristine_copy(task, RunDir(out).pristine)
    try:
        sub = from_patch(task, pristine, text, scale=ctx.scale)
    except PatchFormatError as e:
        return {"agrees": False, "reason": f"submission.patch is not a unified diff: {e}"}
    current = records.find(task.grader, ctx.key)
    if anchors == "current":
        current = anchor_store.ensure(ctx)
        use = current.anchors
    elif anchors == "recorded":
        a = result["anchors"]
        use = Anchors(a["no_info"], a["baseline"], a["best"])
    else:
        raise UsageError(f"anchors={anchors!r}: use recorded or current")
    # the caps the run was graded under, where it recorded them; else those of the current anchors
    timing = result.get("timing") or {}
    setup = anchor_store.with_budget(ctx, current)
    carried = None
    if timing.get("cap_s"):
        setup, carried = recorded_caps(setup, timing)
    say(
        f"audit: re-grading {run_dir.name} ({task.name} at {ctx.scale}, seeds {seeds}, cap {setup.cap_s:.0f} s"
        + (f", {setup.cpu_cap_s:.0f} CPU-s" if setup.cpu_cap_s else "")
        + (f": the recorded {timing['cpu_cap_s']:.0f} CPU-s x host speed {carried.factor:.2f}" if carried else "")
        + f") -> {out}"
    )
    # the very --seed each training process got in the run (derived from the run's secret nonce)
    replay = {
        c["seed"]: c["training_seed"]
        for c in (result.get("checkpoints") or {}).get("per_seed", [])
        if c.get("training_seed") is not None
    }
    results = grade_seeds(setup, sub, seeds, out / "grade", training_seeds=replay)
    scored = score_seeds(task, results, use)
    on_current = (
        score_seeds(task, results, current.anchors).score if current is not None and anchors != "current" else None
    )
    recorded = _recorded_for(result, seeds)
    noise = seed_noise(result)
    tol = AGREE_SIGMAS * noise * math.sqrt(2 / len(seeds)) if noise is not None else None
    rep = {
        "seeds": seeds,
        "anchors": anchors,
        "status": scored.status,
        "reason": scored.reason,
        "score": scored.score,
        "score_per_seed": scored.score_per_seed,
        "raw_per_seed": scored.raw_per_seed,
        "score_on_current_anchors": on_current,
        "recorded_score": recorded,
        "noise_per_seed": noise,
        "tolerance": tol,
        "rejected_files": sorted(sub.rejected),
        "difference": None,
        "caps": {"cap_s": setup.cap_s, "cpu_cap_s": setup.cpu_cap_s, "host_speed": setup.host_speed},
    }
    if scored.status == "error" or result["status"] == "error":
        rep.update(
            agrees=None,
            reason=f"not comparable: recorded {result['status']}, re-grade {scored.status}"
            + (f" ({scored.reason})" if scored.reason else ""),
        )
    elif scored.status != result["status"]:
        rep.update(agrees=False, reason=f"status {result['status']} then, {scored.status} now: {scored.reason}")
    elif recorded is None or scored.score is None:
        rep.update(agrees=None, reason="no recorded score for these seeds")
    else:
        rep["difference"] = scored.score - recorded
        rep["agrees"] = None if tol is None else abs(rep["difference"]) <= tol
    return rep


# --------------------------------------------------------------------------- a database


def changed_names(report: dict) -> list[str]:
    return [d["what"] for d in report.get("drift", []) if d["changed"]]


def _not_audited(r, why: str, **extra) -> dict:
    """The row of a run that cannot be re-graded: it does not agree, and says why."""
    return {
        "run_dir": str(r.run_dir),
        "task": r.result["task"],
        "agent": r.result["agent"],
        "recorded": r.result.get("score"),
        "new": None,
        "difference": None,
        "tolerance": None,
        "agrees": False,
        "drift": [why],
        **extra,
    }


def audit_db(db: Path, sample: int | None = None, seed: int = 0, **kw) -> list[dict]:
    runs, _ = load_runs(Path(db))
    if sample is not None and sample < len(runs):
        runs = random.Random(seed).sample(runs, sample)
    rows = []
    for r in runs:
        if not (r.run_dir / "result.json").is_file():
            rows.append(_not_audited(r, "run directory missing"))
            continue
        problem = model_problem(r.result)
        if problem:  # the model a run trained is gone or changed: that run's row, not the end of the audit
            rows.append(_not_audited(r, "model gone or changed", reason=problem))
            continue
        rep = audit_run(r.run_dir, **kw)
        g = rep["regrade"] or {}
        rows.append(
            {
                "run_dir": str(r.run_dir),
                "task": rep["task"],
                "agent": rep["agent"],
                "recorded": rep["recorded"]["score"],
                "new": g.get("score"),
                "difference": g.get("difference"),
                "tolerance": g.get("tolerance"),
                "agrees": rep["agrees"],
                "drift": changed_names(rep),
            }
        )
    return rows


def _f(v) -> str:
    return (
        "–"
        if v is None
        else f"{v:+.4f}"
        if isinstance(v, float) and v < 0
        else f"{v:.4f}"
        if isinstance(v, float)
        else str(v)
    )


def table(rows: list[dict]) -> str:
    head = ["run", "task", "agent", "recorded σ", "re-graded σ", "difference", "tolerance", "agrees", "drift"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        agrees = {True: "yes", False: "NO", None: "–"}[r["agrees"]]
        lines.append(
            "| "
            + " | ".join(
                [
                    Path(r["run_dir"]).name,
                    r["task"],
                    r["agent"],
                    _f(r["recorded"]),
                    _f(r["new"]),
                    _f(r["difference"]),
                    _f(r["tolerance"]),
                    agrees,
                    ", ".join(r["drift"]) or "none",
                ]
            )
            + " |"
        )
    return "\n".join(lines)


def summary(rep: dict) -> str:
    lines = [f"audit of {rep['run_dir']} ({rep['task']}, {rep['agent']}, scale {rep['scale']})"]
    for d in rep["drift"]:
        state = {True: "CHANGED", False: "same", None: "unknown"}[d["changed"]]
        extra = f": {d['recorded']} -> {d['current']}" if d["changed"] else ""
        lines.append(f"  {d['what']:18s} {state}{extra}{'  (' + d['note'] + ')' if d['note'] else ''}")
    g = rep["regrade"]
    if g:
        lines.append(
            f"  re-graded σ {_f(g.get('score'))} vs recorded {_f(g.get('recorded_score'))} "
            f"(tolerance {_f(g.get('tolerance'))}): "
            + {True: "AGREES", False: "DISAGREES", None: "not comparable"}[g["agrees"]]
            + (f" [{g['reason']}]" if g.get("reason") else "")
        )
    lines.append(f"  written to {rep['audit_dir']}/audit.json")
    return "\n".join(lines)
