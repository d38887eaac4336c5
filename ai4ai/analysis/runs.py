"""The runs of a results database, and the tables a report is made of.

`load_runs` reads result.json rows (the latest of each run directory and of each rerun cell);
`build_sections` groups them into one `Section` a (scale, device class, benchmark version), each
with its leaderboard, per-task breakdown, submission classes and proxy trajectories, and the
statistics behind them (a hierarchical bootstrap over tasks and seeds). `ai4ai.analysis.reporting`
writes the sections as Markdown, CSV and HTML.
"""

from __future__ import annotations

import json
import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ai4ai import PROJECT_ROOT
from ai4ai.analysis.classify import LABELS, Classification, classify_patch
from ai4ai.core import trajectory
from ai4ai.core.layout import RunDir
from ai4ai.core.record import config_sha
from ai4ai.core.task import TaskError, load_task

NO_SANDBOX_MARK = "†"


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True)
class Run:
    run_dir: Path
    result: dict

    @property
    def group(self) -> tuple:
        r = self.result
        return (r["scale"], r["provenance"].get("device_class", "?"), r["benchmark_version"])

    @property
    def agent(self) -> tuple:
        """(label, kind, model, effort): what a leaderboard row stands for."""
        c = self.result.get("agent_config") or {}
        return (self.result["agent"], str(c.get("kind", "")), str(c.get("model") or ""), str(c.get("effort") or ""))

    @property
    def scored(self) -> bool:
        return self.result["status"] in ("graded", "invalid") and self.result.get("score") is not None

    @property
    def seed_scores(self) -> list[float]:
        s = self.result.get("score_per_seed") or []
        return [float(x) for x in s] if s else [float(self.result["score"])]

    @property
    def no_sandbox(self) -> bool:
        return (self.result.get("sandbox") or {}).get("backend") == "none"


def load_runs(db: Path) -> tuple[list[Run], int]:
    """The runs that count, and how many older rows they superseded."""
    if not Path(db).exists():
        raise FileNotFoundError(f"no results database at {db}")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=60)
    try:
        rows = con.execute("SELECT run_dir, result FROM results ORDER BY id").fetchall()
    finally:
        con.close()
    by_dir = {}
    for run_dir, text in rows:
        by_dir[run_dir] = Run(Path(run_dir), json.loads(text))
    by_cell = {}
    for run in by_dir.values():
        r = run.result
        cell = (
            r["task"],
            config_sha(r.get("agent_config") or {}),
            r["scale"],
            r.get("seed"),
            r["benchmark_version"],
            r["provenance"].get("device_class"),
        )
        by_cell[cell] = run
    runs = list(by_cell.values())
    return runs, len(rows) - len(runs)


def read_labels(path: Path | None) -> dict:
    """labels.yaml: patch sha256 (or a prefix of 12+ hex digits) -> label or {label, note}."""
    if path is None or not Path(path).exists():
        return {}
    raw = yaml.safe_load(Path(path).read_text()) or {}
    out = {}
    for sha, v in raw.items():
        label, note = (v.get("label"), v.get("note", "")) if isinstance(v, dict) else (v, "")
        if label not in LABELS:
            raise ValueError(f"{path}: label {label!r} for {sha} is not one of {', '.join(LABELS)}")
        out[str(sha)] = (label, note or "")
    return out


def _override(labels: dict, sha: str | None):
    if not sha:
        return None
    for k, v in labels.items():
        if len(k) >= 12 and sha.startswith(k):
            return v
    return None


def classify_run(run: Run, labels: dict) -> tuple[Classification, str]:
    """A run's class and where it came from (auto | override)."""
    sub = run.result.get("submission") or {}
    hit = _override(labels, sub.get("sha256"))
    if hit:
        return Classification(hit[0], f"human label: {hit[1]}" if hit[1] else "human label"), "override"
    if not sub.get("files"):
        return Classification("none", "empty patch"), "auto"
    rd = RunDir(run.run_dir)
    patch = run.run_dir / (sub.get("patch") or rd.submission_patch.name)
    text = patch.read_text() if patch.is_file() else None
    base = next((p for p in (rd.pristine, rd.grade / ".pristine") if p.is_dir()), None)
    if base is None:
        try:
            base = load_task(run.result["task"]).repo
        except TaskError:
            base = PROJECT_ROOT / "repos_frozen" / run.result["task"]
    return classify_patch(text, base, task=run.result.get("task")), "auto"


# --------------------------------------------------------------------------- statistics


def _mean(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(sum(xs) / len(xs)) if xs else None


def _std(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    if not xs:
        return None
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def task_mean(runs: list[Run]) -> float | None:
    """Mean of the per-seed scores of a task's scored runs."""
    return _mean([s for r in runs if r.scored for s in r.seed_scores])


def hierarchical_interval(per_task: dict, level: float = 0.95, n: int = 2000, seed: int = 0) -> tuple:
    """Percentile bootstrap of the mean over tasks, resampling tasks, then seeds within a task."""
    arrays = [np.asarray(v, dtype=float) for v in per_task.values() if len(v)]
    if not arrays:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    draws = np.empty(n)
    for b in range(n):
        picked = rng.integers(0, len(arrays), len(arrays))
        draws[b] = np.mean([arrays[t][rng.integers(0, len(arrays[t]), len(arrays[t]))].mean() for t in picked])
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


# --------------------------------------------------------------------------- tables


@dataclass
class Section:
    group: tuple  # (scale, device class, version), or ("mixed",) * 3
    leaderboard: list = field(default_factory=list)
    tasks: list = field(default_factory=list)
    submissions: list = field(default_factory=list)
    classes: list = field(default_factory=list)
    trajectories: list = field(default_factory=list)
    curves: dict = field(default_factory=dict)  # run label -> [(minutes, proxy)], hidden score
    # runs whose proxy calls carry no score (a task graded on a fresh instance): task -> (metric name,
    # direction, {run label: [(minutes, raw validation metric)]})
    raw_curves: dict = field(default_factory=dict)
    task_names: list = field(default_factory=list)
    errors: int = 0


def leaderboard(runs: list[Run], task_names: list[str]) -> list[dict]:
    rows = []
    for agent in sorted({r.agent for r in runs}):
        mine = [r for r in runs if r.agent == agent]
        per_task = {
            t: [s for r in mine if r.result["task"] == t and r.scored for s in r.seed_scores] for t in task_names
        }
        per_task = {t: v for t, v in per_task.items() if v}
        means = {t: float(np.mean(v)) for t, v in per_task.items()}
        costs = [(r.result.get("cost") or {}).get("usd") for r in mine]
        costs = [c for c in costs if c is not None]
        lo, hi = hierarchical_interval(per_task)
        row = {
            "agent": agent[0] + (NO_SANDBOX_MARK if any(r.no_sandbox for r in mine) else ""),
            "kind": agent[1],
            "model": agent[2],
            "effort": agent[3],
            "sigma": _mean(means.values()),
            "ci_low": lo if per_task else None,
            "ci_high": hi if per_task else None,
            "tasks": len(per_task),
            "runs": sum(r.scored for r in mine),
            "errors": sum(r.result["status"] == "error" for r in mine),
            "cost_usd": float(sum(costs)) if costs else None,
        }
        row.update({f"task:{t}": means.get(t) for t in task_names})
        rows.append(row)
    rows.sort(key=lambda r: -(r["sigma"] if r["sigma"] is not None else -1))
    return rows


def task_breakdown(runs: list[Run]) -> list[dict]:
    rows = []
    for task in sorted({r.result["task"] for r in runs}):
        for agent in sorted({r.agent for r in runs if r.result["task"] == task}):
            mine = [r for r in runs if r.result["task"] == task and r.agent == agent and r.scored]
            if not mine:
                continue
            raws = [x for r in mine for x in (r.result["raw"].get("per_seed") or []) if isinstance(x, (int, float))]
            latest = mine[-1].result
            sig = task_mean(mine)
            rows.append(
                {
                    "task": task,
                    "agent": agent[0],
                    "runs": len(mine),
                    "seeds": sum(len(r.seed_scores) for r in mine),
                    "metric": latest["raw"]["metric"],
                    "raw_mean": _mean(raws),
                    "raw_std": _std(raws),
                    "no_info": latest["anchors"]["no_info"],
                    "baseline": latest["anchors"]["baseline"],
                    "best": latest["anchors"]["best"],
                    "sigma": sig,
                    "share_0.1_to_1": (sig - 0.1) / 0.9 if sig is not None else None,
                }
            )
    return rows


def submission_table(runs: list[Run], labels: dict) -> list[dict]:
    rows = []
    for r in runs:
        c, source = classify_run(r, labels)
        rows.append(
            {
                "run_dir": str(r.run_dir),
                "task": r.result["task"],
                "agent": r.agent[0],
                "status": r.result["status"],
                "sigma": r.result.get("score"),
                # the training runs' CPU time over the shipped run's (docs/tasks.md: the cap's headroom buys steps)
                "cpu_vs_shipped": (r.result.get("timing") or {}).get("cpu_vs_shipped"),
                "patch_sha256": (r.result.get("submission") or {}).get("sha256"),
                "class": c.label,
                "source": source,
                "reason": c.reason,
                "flags": "; ".join(r.result.get("flags") or []),
            }
        )  # e.g. seeds collapsed to one run
    return rows


def class_table(subs: list[dict]) -> list[dict]:
    rows = []
    for label in LABELS:
        mine = [s for s in subs if s["class"] == label and s["status"] != "error"]  # errors are not scored
        if mine:
            rows.append(
                {
                    "class": label,
                    "runs": len(mine),
                    "mean_sigma": _mean(s["sigma"] for s in mine),
                    "overridden": sum(s["source"] == "override" for s in mine),
                    "agents": ", ".join(sorted({s["agent"] for s in mine})),
                }
            )
    return rows


def trajectory_table(runs: list[Run]) -> list[dict]:
    rows = []
    for agent in sorted({r.agent for r in runs}):
        mine = [r for r in runs if r.agent == agent]
        with_proxy = []
        for r in mine:
            t = r.result.get("trajectory") or {}
            first, best, final = (
                trajectory.proxy_score(t.get(k) or {}) for k in ("first_valid_proxy", "best_proxy", "final_proxy")
            )
            if (t.get("proxy_calls") or 0) > 0 and first is not None:
                with_proxy.append((r, first, best, final, t.get("regressed_after_best")))
        improved = [b is not None and b > f for _, f, b, _, _ in with_proxy]
        below = [(fi < b) if (fi is not None and b is not None) else bool(reg) for _, _, b, fi, reg in with_proxy]
        gaps = [r.result["score"] - fi for r, _, _, fi, _ in with_proxy if fi is not None and r.scored]
        rows.append(
            {
                "agent": agent[0],
                "runs": len(mine),
                "runs_with_proxy": len(with_proxy),
                "proxy_calls": sum((r.result.get("trajectory") or {}).get("proxy_calls") or 0 for r in mine),
                "improved_over_first": _mean([float(x) for x in improved]),
                "ended_below_best": _mean([float(x) for x in below]),
                "mean_best_proxy": _mean([b for _, _, b, _, _ in with_proxy]),
                "mean_final_proxy": _mean([fi for _, _, _, fi, _ in with_proxy]),
                "best_minus_final": _mean(
                    [b - fi for _, _, b, fi, _ in with_proxy if b is not None and fi is not None]
                ),
                "hidden_minus_final_proxy": _mean(gaps),
            }
        )
    return rows


def read_curve(run_dir: Path, raw: bool = False) -> list[tuple[float, float]]:
    """(minutes into the agent window, proxy score) of a run's scored proxy calls; [] without any.
    `raw`: the raw validation metric of each call instead."""
    return trajectory.curve(RunDir(Path(run_dir)).trajectory, raw)


def build_sections(runs: list[Run], labels: dict, mix: bool = False) -> list[Section]:
    groups = {}
    for r in runs:
        groups.setdefault(("mixed", "mixed", "mixed") if mix else r.group, []).append(r)
    sections = []
    for g in sorted(groups):
        rs = groups[g]
        names = sorted({r.result["task"] for r in rs})
        sec = Section(group=g, task_names=names, errors=sum(r.result["status"] == "error" for r in rs))
        sec.leaderboard = leaderboard(rs, names)
        sec.tasks = task_breakdown(rs)
        sec.submissions = submission_table(rs, labels)
        sec.classes = class_table(sec.submissions)
        sec.trajectories = trajectory_table(rs)
        for r in rs:
            label = f"{r.agent[0]} {r.result['task']} s{r.result.get('seed')}"
            curve = read_curve(r.run_dir)
            if curve:
                sec.curves[label] = (curve, r.result.get("score"))
            elif raw := read_curve(r.run_dir, raw=True):
                m = r.result.get("raw") or {}
                sec.raw_curves.setdefault(r.result["task"], (m.get("metric"), m.get("direction"), {}))[2][label] = raw
        sections.append(sec)
    return sections
