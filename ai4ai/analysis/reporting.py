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
The HTML page links each listed run to its own page (ai4ai.analysis.runpage), written under out/runs/.
Only the latest row of a run directory counts, and of a rerun cell (task, agent config,
scale, seed, version, device class) only the latest run; `error` rows are counted, never scored.
"""

from __future__ import annotations

import csv
import hashlib
import html
import math
import re
import time
from pathlib import Path

import numpy as np

from ai4ai.analysis.runpage import is_run_dir, png_base64, write_page
from ai4ai.analysis.runs import NO_SANDBOX_MARK, Section, build_sections, load_runs, read_labels

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


LEADER_COLS = [
    ("agent", "agent"),
    ("kind", "kind"),
    ("model", "model"),
    ("effort", "effort"),
    ("sigma", "mean σ"),
    ("ci", "95% interval"),
    ("tasks", "tasks"),
    ("runs", "runs"),
    ("errors", "errors"),
    ("cost_usd", "cost (USD)"),
]


def leaderboard_cells(row: dict, task_names: list[str]) -> list[str]:
    ci = "–" if row["ci_low"] is None else f"[{row['ci_low']:.3f}, {row['ci_high']:.3f}]"
    cells = [
        row["agent"],
        row["kind"],
        row["model"] or "–",
        row["effort"] or "–",
        _fmt(row["sigma"]),
        ci,
        str(row["tasks"]),
        str(row["runs"]),
        str(row["errors"]),
        _fmt(row["cost_usd"], 2),
    ]
    return cells + [_fmt(row[f"task:{t}"]) for t in task_names]


def task_cells(row: dict) -> list[str]:
    raw = "–" if row["raw_mean"] is None else f"{row['raw_mean']:.4g} ± {row['raw_std']:.2g}"
    return [
        row["task"],
        row["agent"],
        str(row["runs"]),
        str(row["seeds"]),
        row["metric"],
        raw,
        _raw(row["no_info"]),
        _raw(row["baseline"]),
        _raw(row["best"]),
        _fmt(row["sigma"]),
        _fmt(row["share_0.1_to_1"]),
    ]


TASK_HEAD = [
    "task",
    "agent",
    "runs",
    "seeds",
    "metric",
    "raw mean ± std",
    "0 anchor",
    "0.1 anchor",
    "1.0 anchor",
    "σ",
    "share of 0.1→1.0",
]
CLASS_HEAD = ["class", "runs", "mean σ", "human labels", "agents"]
SUB_HEAD = ["run", "task", "agent", "σ", "CPU × shipped", "class", "source", "reason", "flags"]
TRAJ_HEAD = [
    "agent",
    "runs",
    "with proxy",
    "proxy calls",
    "improved over first",
    "ended below best",
    "mean best proxy",
    "mean final proxy",
    "best − final",
    "hidden σ − final proxy",
]


def class_cells(row):
    return [row["class"], str(row["runs"]), _fmt(row["mean_sigma"]), str(row["overridden"]), row["agents"]]


def sub_cells(row):
    return [
        Path(row["run_dir"]).name,
        row["task"],
        row["agent"],
        _fmt(row["sigma"]),
        _fmt(row.get("cpu_vs_shipped"), 2),
        row["class"],
        row["source"],
        row["reason"],
        row["flags"],
    ]


def traj_cells(row):
    return [
        row["agent"],
        str(row["runs"]),
        str(row["runs_with_proxy"]),
        str(row["proxy_calls"]),
        _fmt(row["improved_over_first"], 2),
        _fmt(row["ended_below_best"], 2),
        _fmt(row["mean_best_proxy"]),
        _fmt(row["mean_final_proxy"]),
        _fmt(row["best_minus_final"]),
        _fmt(row["hidden_minus_final_proxy"]),
    ]


def _group_title(g: tuple) -> str:
    if g[0] == "mixed":
        return "all scales, device classes and versions (mix=true)"
    return f"scale {g[0]} · {g[1]} · version {g[2]}"


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(
        ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        + ["| " + " | ".join(r) + " |" for r in esc]
    )


def to_markdown(sections: list[Section], meta: dict) -> str:
    out = [
        "# ai4ai report",
        "",
        f"results: `{meta['results']}` · {meta['runs']} runs counted, "
        f"{meta['superseded']} older rows superseded · generated {meta['generated']}",
        "",
    ]
    for s in sections:
        out += [
            f"## {_group_title(s.group)}",
            "",
            "### Leaderboard",
            "",
            _md_table(
                [h for _, h in LEADER_COLS] + s.task_names, [leaderboard_cells(r, s.task_names) for r in s.leaderboard]
            ),
        ]
        if any(NO_SANDBOX_MARK in r["agent"] for r in s.leaderboard):
            out += ["", f"{NO_SANDBOX_MARK} at least one run of this agent ran without a sandbox (backend `none`)."]
        tables = [
            ("### Per task", TASK_HEAD, [task_cells(r) for r in s.tasks]),
            ("### Changed how the model learns", CLASS_HEAD, [class_cells(r) for r in s.classes]),
            (None, SUB_HEAD, [sub_cells(r) for r in s.submissions]),
            ("### Proxy trajectories", TRAJ_HEAD, [traj_cells(r) for r in s.trajectories]),
        ]
        for title, head, rows in tables:
            out += ["", *([title, ""] if title else []), _md_table(head, rows)]
        out += [""]
    return "\n".join(out)


def write_csvs(sections: list[Section], out: Path) -> list[Path]:
    tables = {
        "leaderboard": "leaderboard",
        "tasks": "tasks",
        "submissions": "submissions",
        "classes": "classes",
        "trajectories": "trajectories",
    }
    paths = []
    for name, attr in tables.items():
        rows = [
            {"scale": s.group[0], "device_class": s.group[1], "benchmark_version": s.group[2], **row}
            for s in sections
            for row in getattr(s, attr)
        ]
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
    return png_base64(fig, 100)


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
            (line,) = ax.plot(xs, ys, marker=".", label=name)
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
        out.append(
            (
                f"Proxy trajectories of {task} (graded on a fresh instance: the raw validation metric "
                "on the visible instance, no σ)",
                _png(fig),
            )
        )
    return out


def _html_table(head: list[str], rows: list[list[str]], links: list[str | None] | None = None) -> str:
    """`links`: per row, where its first cell links to (a run's page), or None."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    links = links or [None] * len(rows)

    def cell(c: str, i: int, href: str | None) -> str:
        text = html.escape(c)
        return f"<td><a href='{html.escape(href)}'>{text}</a></td>" if i == 0 and href else f"<td>{text}</td>"

    trs = "".join("<tr>" + "".join(cell(c, i, h) for i, c in enumerate(r)) + "</tr>" for r, h in zip(rows, links))
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


CSS = """body{font-family:sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0}figure{margin:1em 0}figcaption{font-size:0.85em;color:#555}
h2{border-bottom:2px solid #ddd;padding-bottom:4px}"""


def to_html(sections: list[Section], meta: dict, pages: dict | None = None) -> str:
    """`pages`: run folder -> the link to its page (write_run_pages); a run without one is not linked."""
    pages = pages or {}
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>ai4ai report</title><style>{CSS}</style>"
        "</head><body><h1>ai4ai report</h1>",
        f"<p>results: <code>{html.escape(meta['results'])}</code> · {meta['runs']} runs counted, "
        f"{meta['superseded']} older rows superseded · generated {html.escape(meta['generated'])}</p>",
    ]
    for s in sections:
        parts.append(f"<h2>{html.escape(_group_title(s.group))}</h2><h3>Leaderboard</h3>")
        parts.append(
            _html_table(
                [h for _, h in LEADER_COLS] + s.task_names, [leaderboard_cells(r, s.task_names) for r in s.leaderboard]
            )
        )
        if any(NO_SANDBOX_MARK in r["agent"] for r in s.leaderboard):
            parts.append(
                f"<p>{NO_SANDBOX_MARK} at least one run of this agent ran without a sandbox (backend none).</p>"
            )
        for caption, b64 in plots(s):
            parts.append(
                f"<figure><img alt='{html.escape(caption)}' src='data:image/png;base64,{b64}'>"
                f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            )
        parts += [
            "<h3>Per task</h3>",
            _html_table(TASK_HEAD, [task_cells(r) for r in s.tasks]),
            "<h3>Changed how the model learns</h3>",
            _html_table(CLASS_HEAD, [class_cells(r) for r in s.classes]),
            _html_table(
                SUB_HEAD, [sub_cells(r) for r in s.submissions], [pages.get(r["run_dir"]) for r in s.submissions]
            ),
            "<h3>Proxy trajectories</h3>",
            _html_table(TRAJ_HEAD, [traj_cells(r) for r in s.trajectories]),
        ]
    parts.append("</body></html>")
    return "\n".join(parts)


def write_run_pages(sections: list[Section], out: Path, labels: dict) -> dict:
    """Each listed run's page (ai4ai.analysis.runpage) under `out`/runs/, for the runs whose folder
    is on this machine: run folder -> the page's path relative to `out`."""
    pages = {}
    for s in sections:
        for row in s.submissions:
            run_dir = Path(row["run_dir"])
            if row["run_dir"] in pages or not is_run_dir(run_dir):
                continue
            tag = hashlib.sha256(row["run_dir"].encode()).hexdigest()[:8]  # folder names repeat across dates
            rel = f"runs/{re.sub(r'[^A-Za-z0-9_.-]', '_', run_dir.name)}-{tag}.html"
            write_page(run_dir, out / rel, labels)
            pages[row["run_dir"]] = rel
    return pages


# --------------------------------------------------------------------------- entry


def report(
    results: Path,
    out: Path,
    scale: str | None = None,
    mix: bool = False,
    labels: Path | None = None,
    formats: tuple = ("md", "csv", "html"),
) -> dict:
    """Write the report's files into `out`; returns {"markdown": text, "files": [paths], "sections": [...]}."""
    runs, superseded = load_runs(Path(results))
    if scale:
        runs = [r for r in runs if r.result["scale"] == scale]
    labels_ = read_labels(labels)
    sections = build_sections(runs, labels_, mix)
    meta = {
        "results": str(results),
        "runs": len(runs),
        "superseded": superseded,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
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
        (out / "report.html").write_text(to_html(sections, meta, write_run_pages(sections, out, labels_)))
        files.append(out / "report.html")
    return {"markdown": md, "files": files, "sections": sections}
