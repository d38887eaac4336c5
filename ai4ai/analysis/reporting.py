"""Leaderboards and analyses from a results database, as Markdown, CSV and one HTML page.

    python -m ai4ai.report [results=outputs/results.sqlite] [out=outputs/report] [scale=ci] [mix=false]

One section per (scale, device class, benchmark version): rows from different ones are
never averaged together unless `mix=true`. Each section has
- the leaderboard: one row per agent configuration, mean sigma over tasks with a bootstrap
  interval that resamples tasks and, within each task, the per-seed scores of its runs;
- per-task breakdowns: raw metric, anchors, sigma, share of the way from 0.1 to 1.0;
- "changed how the model learns": each submission's class (ai4ai.analysis.classify, or a human label
  from labels.yaml: `<patch sha256>: <label>` or `{label: ..., note: ...}`), mean sigma per class;
- proxy trajectories: did runs improve over their first valid proxy, end below their best,
  and how far the hidden score landed from the final proxy.
Only the latest row of a run directory counts, and of a rerun cell (task, agent config,
scale, seed, version, device class) only the latest run; `error` rows are counted, never scored.
"""
from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from ai4ai import PROJECT_ROOT
from ai4ai.analysis.classify import LABELS, Classification, classify_patch
from ai4ai.core.layout import RunDir
from ai4ai.core.record import config_sha
from ai4ai.core.task import TaskError, load_task
from ai4ai.core import trajectory

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
        cell = (r["task"], config_sha(r.get("agent_config") or {}), r["scale"], r.get("seed"), r["benchmark_version"],
                r["provenance"].get("device_class"))
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
    group: tuple                       # (scale, device class, version), or ("mixed",) * 3
    leaderboard: list = field(default_factory=list)
    tasks: list = field(default_factory=list)
    submissions: list = field(default_factory=list)
    classes: list = field(default_factory=list)
    trajectories: list = field(default_factory=list)
    curves: dict = field(default_factory=dict)      # run label -> [(minutes, proxy)], hidden score
    # runs whose proxy calls carry no score (a task graded on a fresh instance): task -> (metric name,
    # direction, {run label: [(minutes, raw validation metric)]})
    raw_curves: dict = field(default_factory=dict)
    task_names: list = field(default_factory=list)
    errors: int = 0


def leaderboard(runs: list[Run], task_names: list[str]) -> list[dict]:
    rows = []
    for agent in sorted({r.agent for r in runs}):
        mine = [r for r in runs if r.agent == agent]
        per_task = {t: [s for r in mine if r.result["task"] == t and r.scored for s in r.seed_scores]
                    for t in task_names}
        per_task = {t: v for t, v in per_task.items() if v}
        means = {t: float(np.mean(v)) for t, v in per_task.items()}
        costs = [(r.result.get("cost") or {}).get("usd") for r in mine]
        costs = [c for c in costs if c is not None]
        lo, hi = hierarchical_interval(per_task)
        row = {"agent": agent[0] + (NO_SANDBOX_MARK if any(r.no_sandbox for r in mine) else ""),
               "kind": agent[1], "model": agent[2], "effort": agent[3],
               "sigma": _mean(means.values()), "ci_low": lo if per_task else None, "ci_high": hi if per_task else None,
               "tasks": len(per_task), "runs": sum(r.scored for r in mine),
               "errors": sum(r.result["status"] == "error" for r in mine),
               "cost_usd": float(sum(costs)) if costs else None}
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
            rows.append({"task": task, "agent": agent[0], "runs": len(mine),
                         "seeds": sum(len(r.seed_scores) for r in mine), "metric": latest["raw"]["metric"],
                         "raw_mean": _mean(raws), "raw_std": _std(raws),
                         "no_info": latest["anchors"]["no_info"], "baseline": latest["anchors"]["baseline"],
                         "best": latest["anchors"]["best"], "sigma": sig,
                         "share_0.1_to_1": (sig - 0.1) / 0.9 if sig is not None else None})
    return rows


def submission_table(runs: list[Run], labels: dict) -> list[dict]:
    rows = []
    for r in runs:
        c, source = classify_run(r, labels)
        rows.append({"run_dir": str(r.run_dir), "task": r.result["task"], "agent": r.agent[0],
                     "status": r.result["status"], "sigma": r.result.get("score"),
                     "patch_sha256": (r.result.get("submission") or {}).get("sha256"),
                     "class": c.label, "source": source, "reason": c.reason,
                     "flags": "; ".join(r.result.get("flags") or [])})    # e.g. seeds collapsed to one run
    return rows


def class_table(subs: list[dict]) -> list[dict]:
    rows = []
    for label in LABELS:
        mine = [s for s in subs if s["class"] == label and s["status"] != "error"]     # errors are not scored
        if mine:
            rows.append({"class": label, "runs": len(mine), "mean_sigma": _mean(s["sigma"] for s in mine),
                         "overridden": sum(s["source"] == "override" for s in mine),
                         "agents": ", ".join(sorted({s["agent"] for s in mine}))})
    return rows


def trajectory_table(runs: list[Run]) -> list[dict]:
    rows = []
    for agent in sorted({r.agent for r in runs}):
        mine = [r for r in runs if r.agent == agent]
        with_proxy = []
        for r in mine:
            t = r.result.get("trajectory") or {}
            first, best, final = (trajectory.proxy_score(t.get(k) or {}) for k in ("first_valid_proxy", "best_proxy", "final_proxy"))
            if (t.get("proxy_calls") or 0) > 0 and first is not None:
                with_proxy.append((r, first, best, final, t.get("regressed_after_best")))
        improved = [b is not None and b > f for _, f, b, _, _ in with_proxy]
        below = [(fi < b) if (fi is not None and b is not None) else bool(reg) for _, _, b, fi, reg in with_proxy]
        gaps = [r.result["score"] - fi for r, _, _, fi, _ in with_proxy if fi is not None and r.scored]
        rows.append({"agent": agent[0], "runs": len(mine), "runs_with_proxy": len(with_proxy),
                     "proxy_calls": sum((r.result.get("trajectory") or {}).get("proxy_calls") or 0 for r in mine),
                     "improved_over_first": _mean([float(x) for x in improved]),
                     "ended_below_best": _mean([float(x) for x in below]),
                     "mean_best_proxy": _mean([b for _, _, b, _, _ in with_proxy]),
                     "mean_final_proxy": _mean([fi for _, _, _, fi, _ in with_proxy]),
                     "best_minus_final": _mean([b - fi for _, _, b, fi, _ in with_proxy if b is not None and fi is not None]),
                     "hidden_minus_final_proxy": _mean(gaps)})
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


# --------------------------------------------------------------------------- formats

def _fmt(v, digits: int = 3) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if math.isnan(v):
            return "–"
        return f"{v:.{digits}f}" if abs(v) < 1e4 else f"{v:.4g}"
    return str(v)


def _raw(v) -> str:
    return "–" if v is None else f"{v:.4g}"


LEADER_COLS = [("agent", "agent"), ("kind", "kind"), ("model", "model"), ("effort", "effort"), ("sigma", "mean σ"),
               ("ci", "95% interval"), ("tasks", "tasks"), ("runs", "runs"), ("errors", "errors"), ("cost_usd", "cost (USD)")]


def leaderboard_cells(row: dict, task_names: list[str]) -> list[str]:
    ci = "–" if row["ci_low"] is None else f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    cells = [row["agent"], row["kind"], row["model"] or "–", row["effort"] or "–", _fmt(row["sigma"]), ci,
             str(row["tasks"]), str(row["runs"]), str(row["errors"]), _fmt(row["cost_usd"], 2)]
    return cells + [_fmt(row[f"task:{t}"]) for t in task_names]


def task_cells(row: dict) -> list[str]:
    raw = "–" if row["raw_mean"] is None else f"{row['raw_mean']:.4g} ± {row['raw_std']:.2g}"
    return [row["task"], row["agent"], str(row["runs"]), str(row["seeds"]), row["metric"], raw, _raw(row["no_info"]),
            _raw(row["baseline"]), _raw(row["best"]), _fmt(row["sigma"]), _fmt(row["share_0.1_to_1"])]


TASK_HEAD = ["task", "agent", "runs", "seeds", "metric", "raw mean ± std", "0 anchor", "0.1 anchor", "1.0 anchor",
             "σ", "share of 0.1→1.0"]
CLASS_HEAD = ["class", "runs", "mean σ", "human labels", "agents"]
SUB_HEAD = ["run", "task", "agent", "σ", "class", "source", "reason", "flags"]
TRAJ_HEAD = ["agent", "runs", "with proxy", "proxy calls", "improved over first", "ended below best",
             "mean best proxy", "mean final proxy", "best − final", "hidden σ − final proxy"]


def class_cells(row):
    return [row["class"], str(row["runs"]), _fmt(row["mean_sigma"]), str(row["overridden"]), row["agents"]]


def sub_cells(row):
    return [Path(row["run_dir"]).name, row["task"], row["agent"], _fmt(row["sigma"]), row["class"], row["source"],
            row["reason"], row["flags"]]


def traj_cells(row):
    return [row["agent"], str(row["runs"]), str(row["runs_with_proxy"]), str(row["proxy_calls"]),
            _fmt(row["improved_over_first"], 2), _fmt(row["ended_below_best"], 2), _fmt(row["mean_best_proxy"]),
            _fmt(row["mean_final_proxy"]), _fmt(row["best_minus_final"]), _fmt(row["hidden_minus_final_proxy"])]


def _group_title(g: tuple) -> str:
    if g[0] == "mixed":
        return "all scales, device classes and versions (mix=true)"
    return f"scale {g[0]} · {g[1]} · version {g[2]}"


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
                     + ["| " + " | ".join(r) + " |" for r in esc])


def to_markdown(sections: list[Section], meta: dict) -> str:
    out = ["# ai4ai report", "", f"results: `{meta['results']}` · {meta['runs']} runs counted, "
           f"{meta['superseded']} older rows superseded · generated {meta['generated']}", ""]
    for s in sections:
        out += [f"## {_group_title(s.group)}", "", "### Leaderboard", "",
                _md_table([h for _, h in LEADER_COLS] + s.task_names, [leaderboard_cells(r, s.task_names) for r in s.leaderboard])]
        if any(NO_SANDBOX_MARK in r["agent"] for r in s.leaderboard):
            out += ["", f"{NO_SANDBOX_MARK} at least one run of this agent ran without a sandbox (backend `none`)."]
        out += ["", "### Per task", "", _md_table(TASK_HEAD, [task_cells(r) for r in s.tasks]),
                "", "### Changed how the model learns", "", _md_table(CLASS_HEAD, [class_cells(r) for r in s.classes]),
                "", _md_table(SUB_HEAD, [sub_cells(r) for r in s.submissions]),
                "", "### Proxy trajectories", "", _md_table(TRAJ_HEAD, [traj_cells(r) for r in s.trajectories]), ""]
    return "\n".join(out)


def write_csvs(sections: list[Section], out: Path) -> list[Path]:
    tables = {"leaderboard": "leaderboard", "tasks": "tasks", "submissions": "submissions", "classes": "classes",
              "trajectories": "trajectories"}
    paths = []
    for name, attr in tables.items():
        rows = [{"scale": s.group[0], "device_class": s.group[1], "benchmark_version": s.group[2], **row}
                for s in sections for row in getattr(s, attr)]
        keys = list(dict.fromkeys(k for row in rows for k in row))
        path = out / f"{name}.csv"
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=keys or ["scale"])
            w.writeheader()
            w.writerows(rows)
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- plots and HTML

def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    import matplotlib.pyplot as plt
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def plots(sec: Section) -> list[tuple[str, str]]:
    """(caption, base64 PNG) for one section."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out = []
    rows, tasks = sec.leaderboard, sec.task_names
    if rows and tasks:
        fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(tasks) + 2), 3.4))
        width = 0.8 / len(rows)
        for i, r in enumerate(rows):
            ys = [r[f"task:{t}"] if r[f"task:{t}"] is not None else 0.0 for t in tasks]
            ax.bar(np.arange(len(tasks)) + i * width - 0.4 + width / 2, ys, width, label=r["agent"])
        ax.axhline(0.1, color="k", ls="--", lw=0.8, label="shipped (0.1)")
        ax.set_xticks(np.arange(len(tasks)), tasks)
        ax.set_ylim(0, 1)
        ax.set_ylabel("σ")
        ax.set_title("σ per task and agent")
        ax.legend(fontsize=7, loc="upper right")
        out.append(("σ per task and agent (dashed: the shipped algorithm)", _png(fig)))
        fig, ax = plt.subplots(figsize=(6, 0.45 * len(rows) + 1.2))
        names = [r["agent"] for r in rows]
        sig = [r["sigma"] or 0.0 for r in rows]
        ax.barh(names, sig, color="tab:blue", label="σ reached")
        ax.barh(names, [1 - s for s in sig], left=sig, color="0.85", label="distance to 1.0")
        ax.axvline(0.1, color="k", ls="--", lw=0.8)
        ax.set_xlim(0, 1)
        ax.invert_yaxis()
        ax.set_xlabel("mean σ over tasks")
        ax.legend(fontsize=7, loc="lower right")
        out.append(("Distance to 1.0 (mean σ over tasks; grey: what remains)", _png(fig)))
    if sec.curves:
        fig, ax = plt.subplots(figsize=(6, 3.4))
        for name, (curve, hidden) in sorted(sec.curves.items()):
            xs, ys = zip(*curve)
            line, = ax.plot(xs, ys, marker=".", label=name)
            if hidden is not None:
                ax.plot([xs[-1]], [hidden], marker="*", ms=10, color=line.get_color())
        ax.axhline(0.1, color="k", ls="--", lw=0.8)
        ax.set_xlabel("minutes into the agent window")
        ax.set_ylabel("proxy σ (star: hidden σ)")
        ax.legend(fontsize=7)
        out.append(("Proxy trajectories over the agent window", _png(fig)))
    for task, (metric, direction, runs) in sorted(sec.raw_curves.items()):
        # graded on a fresh instance: the proxy validates on the visible one, so its raw metric has no
        # place on the 0 / 0.1 / 1.0 scale and the hidden score is not drawn beside it
        fig, ax = plt.subplots(figsize=(6, 3.4))
        for name, curve in sorted(runs.items()):
            xs, ys = zip(*curve)
            ax.plot(xs, ys, marker=".", label=name)
        ax.set_xlabel("minutes into the agent window")
        better = {"max": "higher", "min": "lower"}.get(direction)
        ax.set_ylabel(f"proxy validation {metric or 'metric'}" + (f" ({better} is better)" if better else ""))
        ax.legend(fontsize=7)
        out.append((f"Proxy trajectories of {task} (graded on a fresh instance: the raw validation metric "
                    "on the visible instance, no σ)", _png(fig)))
    return out


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


CSS = """body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}figure{margin:1em 0}figcaption{font-size:0.85em;color:#555}
h2{border-bottom:2px solid #ddd;padding-bottom:4px}"""


def to_html(sections: list[Section], meta: dict) -> str:
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>ai4ai report</title><style>{CSS}</style>"
             "</head><body><h1>ai4ai report</h1>",
             f"<p>results: <code>{html.escape(meta['results'])}</code> · {meta['runs']} runs counted, "
             f"{meta['superseded']} older rows superseded · generated {html.escape(meta['generated'])}</p>"]
    for s in sections:
        parts.append(f"<h2>{html.escape(_group_title(s.group))}</h2><h3>Leaderboard</h3>")
        parts.append(_html_table([h for _, h in LEADER_COLS] + s.task_names,
                                 [leaderboard_cells(r, s.task_names) for r in s.leaderboard]))
        if any(NO_SANDBOX_MARK in r["agent"] for r in s.leaderboard):
            parts.append(f"<p>{NO_SANDBOX_MARK} at least one run of this agent ran without a sandbox (backend none).</p>")
        for caption, b64 in plots(s):
            parts.append(f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{b64}'>"
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        parts += ["<h3>Per task</h3>", _html_table(TASK_HEAD, [task_cells(r) for r in s.tasks]),
                  "<h3>Changed how the model learns</h3>", _html_table(CLASS_HEAD, [class_cells(r) for r in s.classes]),
                  _html_table(SUB_HEAD, [sub_cells(r) for r in s.submissions]),
                  "<h3>Proxy trajectories</h3>", _html_table(TRAJ_HEAD, [traj_cells(r) for r in s.trajectories])]
    parts.append("</body></html>")
    return "\n".join(parts)


# --------------------------------------------------------------------------- entry

def report(results: Path, out: Path, scale: str | None = None, mix: bool = False, labels: Path | None = None,
           formats: tuple = ("md", "csv", "html")) -> dict:
    """Write the report's files into `out`; returns {"markdown": text, "files": [paths], "sections": [...]}."""
    runs, superseded = load_runs(Path(results))
    if scale:
        runs = [r for r in runs if r.result["scale"] == scale]
    sections = build_sections(runs, read_labels(labels), mix)
    meta = {"results": str(results), "runs": len(runs), "superseded": superseded,
            "generated": time.strftime("%Y-%m-%d %H:%M:%S")}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    md = to_markdown(sections, meta)
    files = []
    if "md" in formats:
        (out / "report.md").write_text(md)
        files.append(out / "report.md")
    if "csv" in formats:
        files += write_csvs(sections, out)
    if "html" in formats:
        (out / "report.html").write_text(to_html(sections, meta))
        files.append(out / "report.html")
    return {"markdown": md, "files": files, "sections": sections}
