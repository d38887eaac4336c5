"""One run's page: everything a run folder holds, as one self-contained HTML file.

    write_page(run_dir, out=None) -> the page (default <run_dir>/run.html)

Sections, each present even when the run has nothing for it (it then says why): the header
(result.json), the instructions, the agent's transcript (a CLI's `transcript.jsonl`, else
`agent.log`), the proxy calls (`trajectory.jsonl` and `.harness/proxy/call_NNNN/`), the submission
(`submission.patch`, `submission.json`, its class from ai4ai.analysis.classify), each grading
seed (`grade/seed_N/train.log` and the seed's entry of result.json) and the cost of each model API
call (the gateway's `api_calls.jsonl`). Plots are embedded PNGs; nothing is fetched and no script
runs. Every text a run holds is escaped here: the agent wrote much of it.

It is one file of over 500 lines on purpose: its invariant, that no text of the run reaches the
page unescaped (every cell and block passes through `esc`, and the helpers that take HTML are given
only what this file built), is checked by reading this file alone.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
from pathlib import Path

from ai4ai.analysis.runs import Run, classify_run
from ai4ai.core import trajectory
from ai4ai.core.layout import RunDir, read_json

# written by ai4ai.agents.cli (run_cli) beside agent.log, for the coding-agent CLIs only
TRANSCRIPT, API_CALLS = "transcript.jsonl", "api_calls.jsonl"
CLI_KINDS = ("claude", "codex")
NO_MODEL = {
    "baseline": "the baseline agent runs nothing in its window: no transcript, no model, no API calls",
    "command": "the command agent runs a shell command: it has no model and makes no API calls",
    "patch": "the patch agent applies a fixed patch: it has no model and makes no API calls",
}
MAX_TEXT = 8_000  # characters of one transcript entry shown
MAX_ENTRIES = 1_500  # transcript entries shown
MAX_READ = 4 << 20  # bytes read of any one file the agent or its training wrote
MAX_LOG = 200_000  # characters of a log shown (its tail)
MAX_ROWS = 5_000  # rows of a table shown
STEP_LINE = re.compile(r"^\s*(?:step|iter|update)\s+(\d+)(?:/\d+)?\b(.*)$", re.I)
NUMBER = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?")  # at a token's start ("7.1s")
WORD = re.compile(r"[A-Za-z][A-Za-z_]*")
TAGS = ("message", "thinking", "tool call", "tool output", "proxy reply", "command", "output", "result", "user")
NOT_CURVES = {"elapsed", "cpu", "time", "wall"}  # a step line's timings, not what it learned


def esc(x) -> str:
    return html.escape("" if x is None else str(x), quote=True)


def _read(path: Path) -> str | None:
    """A file's text (its first MAX_READ bytes, said so), or None when it is missing."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_READ + 1)
    except OSError:
        return None
    text = data[:MAX_READ].decode("utf-8", "replace")
    return text + f"\n[... cut at {MAX_READ} bytes]" if len(data) > MAX_READ else text


def _jsonl(path: Path) -> list[dict]:
    out = []
    for line in (_read(path) or "").splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):  # the agent's processes can write any line
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def _num(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def _fmt(x, digits: int = 4) -> str:
    v = _num(x)
    return "–" if v is None else (str(int(v)) if v == int(v) and abs(v) < 1e15 else f"{v:.{digits}g}")


def _cut(text: str, n: int = MAX_TEXT) -> str:
    return text if len(text) <= n else text[:n] + f"\n[... {len(text) - n} more characters]"


def _pre(text: str, n: int = MAX_TEXT) -> str:
    return f"<pre>{esc(_cut(text, n))}</pre>"


def _tail(text: str) -> str:
    """A log's last MAX_LOG characters."""
    return _pre(
        text if len(text) <= MAX_LOG else f"[... {len(text) - MAX_LOG} characters before]\n" + text[-MAX_LOG:],
        MAX_LOG + 100,
    )


def _details(summary: str, body: str, cls: str = "", open_: bool = False) -> str:
    """A collapsible part; `summary` and `body` are HTML already."""
    attrs = (f" class={cls!r}" if cls else "") + (" open" if open_ else "")
    return f"<details{attrs}><summary>{summary}</summary>{body}</details>"


def _table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """Cells are HTML already (escaped by the caller)."""
    th = "".join(f"<th>{esc(h)}</th>" for h in head) if any(head) else ""
    trs = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows[:MAX_ROWS])
    more = f"<p class='note'>{len(rows) - MAX_ROWS} more rows not shown</p>" if len(rows) > MAX_ROWS else ""
    return f"<table{f' class={cls!r}' if cls else ''}>{f'<thead><tr>{th}</tr></thead>' if th else ''}<tbody>{trs}</tbody></table>{more}"


def _none(why: str) -> str:
    return f"<p class='none'>none recorded: {esc(why)}</p>"


def png_base64(fig, dpi: int) -> str:
    """A matplotlib figure as base64 PNG (the figure closed): what an offline page embeds."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode()


def _png(fig) -> str:
    return f"<img alt='plot' src='data:image/png;base64,{png_base64(fig, 90)}'>"


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _section(sid: str, title: str, body: str) -> str:
    return f"<section id='{sid}'><h2>{esc(title)}</h2>{body}</section>"


# --------------------------------------------------------------------------- header


def header(run_dir: Path, result: dict | None, labels: dict) -> tuple[str, str]:
    """(the page's title, the header section)."""
    if result is None:
        title = f"run {run_dir.name}"
        return title, _section("header", title, _none("no result.json: the run has not finished grading"))
    cfg = result.get("agent_config") or {}
    raw = result.get("raw") or {}
    cls = classify_run(Run(run_dir, result), labels)[0]
    source = (read_json(RunDir(run_dir).submission_json, {}) or {}).get("source")
    seeds = result.get("seeds") or []
    per_seed = ", ".join(
        f"seed {s}: {_fmt(v, 3)}" for s, v in zip(seeds, result.get("score_per_seed") or [], strict=False)
    )
    lo_hi = result.get("score_interval")
    rows = [
        ("task", f"{result.get('task')} ({result.get('family')})"),
        ("scale", result.get("scale")),
        ("agent", f"{result.get('agent')} (kind {cfg.get('kind')}, replicate seed {result.get('seed')})"),
        ("status", str(result.get("status")) + (f": {result['reason']}" if result.get("reason") else "")),
        (
            "score (σ)",
            _fmt(result.get("score"), 4) + (f"  [{_fmt(lo_hi[0], 3)}, {_fmt(lo_hi[1], 3)}]" if lo_hi else ""),
        ),
        ("per-seed scores", per_seed or "–"),
        (f"raw {raw.get('metric')} ({raw.get('direction')})", f"{_fmt(raw.get('mean'))} ± {_fmt(raw.get('std'), 2)}"),
        ("submission class", f"{cls.label}: {cls.reason}"),
        ("submission source", source or "–"),
        ("flags", "; ".join(result.get("flags") or []) or "–"),
        ("run", run_dir.name),
        ("started", (result.get("provenance") or {}).get("started_at")),
        ("benchmark version", result.get("benchmark_version")),
        ("sandbox", (result.get("sandbox") or {}).get("backend")),
    ]
    title = f"{result.get('task')} · {result.get('agent')} · {result.get('scale')} · {run_dir.name}"
    body = _table(["", ""], [[f"<b>{esc(k)}</b>", esc(v)] for k, v in rows], "kv")
    return title, _section("header", title, body)


# --------------------------------------------------------------------------- the transcript


def _d(x) -> dict:
    """`x` if it is an object, else an empty one: a transcript's events hold whatever was printed."""
    return x if isinstance(x, dict) else {}


def _blocks(content) -> list[dict]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _text_of(content) -> str:
    return "\n".join(str(b.get("text", "")) if b.get("type") == "text" else json.dumps(b) for b in _blocks(content))


def _entry(kind: str, title: str, body: str, out: str | None = None) -> str:
    tag = kind.split()[0] if kind in TAGS else "other"
    head = f"<span class='tag {tag}'>{esc(kind)}</span> {esc(title[:160])}"
    return _details(head, _pre(body) + ("" if out is None else "<div class='out'>output</div>" + _pre(out)), "entry")


def claude_entries(events: list[dict]) -> list[str]:
    """Claude Code's stream-json: assistant text and tool calls (with their results), the result."""
    results = {}
    for e in events:
        if e.get("type") == "user":
            for b in _blocks(_d(e.get("message")).get("content")):
                if b.get("type") == "tool_result":
                    results[str(b.get("tool_use_id"))] = _text_of(b.get("content"))
    out, shown = [], set()
    for e in events:
        t, msg = e.get("type"), _d(e.get("message"))
        if t == "assistant":
            for b in _blocks(msg.get("content")):
                if b.get("type") == "text":
                    out.append(_entry("message", str(b.get("text", "")), str(b.get("text", ""))))
                elif b.get("type") == "thinking":
                    out.append(_entry("thinking", str(b.get("thinking", "")), str(b.get("thinking", ""))))
                elif b.get("type") == "tool_use":
                    inp = b.get("input") if isinstance(b.get("input"), dict) else {}
                    title = f"{b.get('name')}: {inp.get('command') or inp.get('file_path') or json.dumps(inp)}"
                    shown.add(str(b.get("id")))
                    out.append(_entry("tool call", title, json.dumps(inp, indent=1), results.get(str(b.get("id")), "")))
        elif t == "user":
            for b in _blocks(msg.get("content")):
                if b.get("type") == "tool_result" and str(b.get("tool_use_id")) not in shown:
                    out.append(_entry("tool output", _text_of(b.get("content")), _text_of(b.get("content"))))
                elif b.get("type") == "text":
                    out.append(_entry("user", str(b.get("text", "")), str(b.get("text", ""))))
        elif t == "result":
            out.append(_entry("result", f"{e.get('subtype')}: {e.get('result')}", json.dumps(e, indent=1)))
        else:
            out.append(_entry(str(t or "event"), str(e.get("subtype") or ""), json.dumps(e, indent=1)))
    return out


def codex_entries(events: list[dict]) -> list[str]:
    """`codex exec --json`: each item once (completed, else as last seen), and turn and error events."""
    last = {}
    for e in events:
        item = e.get("item")
        if str(e.get("type", "")).startswith("item.") and isinstance(item, dict):
            last[str(item.get("id"))] = item
    out, done = [], set()
    for e in events:
        t, item = str(e.get("type", "")), e.get("item")
        if t.startswith("item.") and isinstance(item, dict):
            key = str(item.get("id"))
            if key in done:
                continue
            done.add(key)
            item = last[key]
            kind = str(item.get("type"))
            if kind == "command_execution":
                out.append(
                    _entry(
                        "tool call",
                        f"shell: {item.get('command')} (exit {item.get('exit_code')})",
                        str(item.get("command")),
                        str(item.get("aggregated_output") or ""),
                    )
                )
            elif kind in ("agent_message", "reasoning"):
                text = str(item.get("text", ""))
                out.append(_entry("message" if kind == "agent_message" else "thinking", text, text))
            else:
                out.append(_entry(kind, json.dumps(item)[:160], json.dumps(item, indent=1)))
        elif t in ("turn.started", "thread.started"):
            continue
        else:
            title = str(e.get("message") or _d(e.get("error")).get("message") or json.dumps(e.get("usage") or ""))
            out.append(_entry(t or "event", title, json.dumps(e, indent=1)))
    return out


def log_entries(text: str) -> list[str]:
    """A plain agent.log: the JSON objects in it (ai4ai-proxy's replies) each on their own, the
    text between them as output blocks."""
    out, buf, i, dec = [], [], 0, json.JSONDecoder()
    lines = text.splitlines(keepends=True)
    while i < len(lines):
        if lines[i].lstrip().startswith("{"):
            rest = "".join(lines[i : i + 400])
            try:
                obj, end = dec.raw_decode(rest.lstrip())
            except (ValueError, RecursionError):
                obj = None
            if isinstance(obj, dict):
                if buf:
                    out.append(_entry("output", buf[0].strip() or "(blank)", "".join(buf)))
                    buf = []
                out.append(
                    _entry("proxy reply" if "ok" in obj else "json", _proxy_title(obj), json.dumps(obj, indent=1))
                )
                consumed = rest.lstrip()[:end]
                i += consumed.count("\n") + 1
                continue
        buf.append(lines[i])
        i += 1
    if buf:
        out.append(_entry("output", buf[0].strip() or "(blank)", "".join(buf)))
    return out


def _proxy_title(obj: dict) -> str:
    if "marked" in obj:
        return f"ai4ai-proxy --submit: marked {str(obj.get('marked'))[:12]} files {obj.get('files')}"
    if "proxy_metric" in obj:
        return (
            f"ai4ai-proxy: {obj.get('metric')} {_fmt(obj.get('proxy_metric'))}, score {_fmt(obj.get('proxy_score'), 3)}"
            f" ({obj.get('reason')})"
        )
    return json.dumps(obj)[:160]


def transcript_section(run_dir: Path, result: dict | None) -> str:
    rd = RunDir(run_dir)
    kind = str(((result or {}).get("agent_config") or {}).get("kind") or "")
    outcome = read_json(rd.agent_outcome, None)
    parts = []
    if isinstance(outcome, dict):
        parts.append(
            f"<p>exit code {esc(outcome.get('exit_code'))}, {'timed out, ' if outcome.get('timed_out') else ''}"
            f"{_fmt(outcome.get('wall_s'), 4)} s in the window, started {esc(outcome.get('started_at'))}"
            + (f"; error: {esc(outcome.get('error'))}" if outcome.get("error") else "")
            + "</p>"
        )
    command = ((result or {}).get("agent_config") or {}).get("command")
    entries = [_entry("command", str(command), str(command))] if kind == "command" and command else []
    events = _jsonl(run_dir / TRANSCRIPT)
    log = _read(rd.agent_log)
    if events:
        codex = kind == "codex" or any("item" in e or "thread_id" in e for e in events[:20])
        entries += codex_entries(events) if codex else claude_entries(events)
        source = f"{TRANSCRIPT} ({len(events)} events)"
    elif log:
        entries += log_entries(log)
        source = "agent.log"
    else:
        why = NO_MODEL.get(kind, f"no {TRANSCRIPT} and no agent.log in the run folder")
        return _section("transcript", "Agent transcript", "".join(parts) + _none(why))
    more = len(entries) - MAX_ENTRIES
    body = (
        f"<p>from {esc(source)}; {len(entries)} entries, each collapsible</p>"
        + "".join(entries[:MAX_ENTRIES])
        + (f"<p class='note'>{more} more entries not shown</p>" if more > 0 else "")
    )
    if events and log:
        body += _details("agent.log (the CLI's raw output)", _tail(log))
    return _section("transcript", "Agent transcript", "".join(parts) + body)


# --------------------------------------------------------------------------- proxy calls


def proxy_section(run_dir: Path, result: dict | None) -> str:
    rd = RunDir(run_dir)
    evs = trajectory.events(rd.trajectory, kind=None)
    kind = str(((result or {}).get("agent_config") or {}).get("kind") or "")
    if not evs:
        why = (
            "the baseline agent runs nothing, so it calls no proxy"
            if kind == "baseline"
            else f"the agent made no proxy call ({'no trajectory.jsonl' if not rd.trajectory.exists() else 'trajectory.jsonl is empty'})"
        )
        return _section("proxy", "Proxy calls", _none(why))
    raw = (result or {}).get("raw") or {}
    rows, calls = [], []
    for e in evs:
        rows.append(
            [
                esc(e.get("event")),
                esc(e.get("call", "")),
                esc(_fmt(e.get("elapsed_s"), 5)),
                esc(_fmt(e.get("proxy_metric"))),
                esc(_fmt(e.get("proxy_score"), 3)),
                esc(e.get("status", "marked" if e.get("event") == "submit" else "")),
                esc(e.get("reason", "")),
                esc(e.get("detail") or ""),
                esc(_fmt(e.get("duration_s"), 4)),
                esc(str(e.get("patch_sha256") or "")[:12]),
            ]
        )
        if e.get("event") == trajectory.PROXY and isinstance(e.get("call"), int):
            calls.append(_call_details(rd, e["call"]))
    head = ["event", "call", "s since start", f"proxy {raw.get('metric') or 'metric'}", "proxy σ", "status"]
    head += ["reason", "detail", "took (s)", "patch"]
    body = _table(head, rows) + _proxy_plot(rd.trajectory, raw) + "".join(calls)
    return _section("proxy", "Proxy calls", body)


def _call_details(rd: RunDir, n: int) -> str:
    d = rd.proxy_call(n)
    if not d.is_dir():
        return _details(f"call {n}: no folder", _none(f"{d.relative_to(rd.root)} is missing"))
    ev = read_json(d / "eval" / "eval_result.json", {}) or {}
    parts = [f"<p>folder {esc(d.relative_to(rd.root))}; validation metric {esc(_fmt(ev.get('validation_metric')))}</p>"]
    for name, label in (("run/train.log", "train.log"), ("submission.patch", "the code it trained")):
        text = _read(d / name)
        parts.append(_details(esc(label), _tail(text) if text else _none(f"no {name}")))
    return _details(f"call {n}: its training log and patch", "".join(parts), "entry")


def _proxy_plot(path: Path, raw: dict) -> str:
    pts, label = trajectory.curve(path), "proxy σ"
    if not pts:
        pts = trajectory.curve(path, raw=True)
        better = {"max": "higher", "min": "lower"}.get(raw.get("direction"))
        label = f"proxy {raw.get('metric') or 'metric'}" + (f" ({better} is better)" if better else "")
    if not pts:
        return "<p class='note'>no proxy call produced a number: nothing to plot</p>"
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 2.6))
    xs, ys = zip(*pts)
    ax.plot(xs, ys, marker="o")
    ax.set_xlabel("minutes into the agent window")
    ax.set_ylabel(label)
    return f"<figure>{_png(fig)}<figcaption>{esc(label)} over the agent window</figcaption></figure>"


# --------------------------------------------------------------------------- the submission


def diff_html(patch: str) -> str:
    out = []
    for line in _cut(patch, MAX_READ).splitlines():
        cls = (
            "meta"
            if line.startswith(("+++", "---", "diff ", "index "))
            else "hunk"
            if line.startswith("@@")
            else "add"
            if line.startswith("+")
            else "del"
            if line.startswith("-")
            else ""
        )
        out.append(f"<span class='{cls}'>{esc(line)}</span>" if cls else esc(line))
    return "<pre class='diff'>" + "\n".join(out) + "</pre>"


def submission_section(run_dir: Path, result: dict | None, labels: dict) -> str:
    rd = RunDir(run_dir)
    sub = read_json(rd.submission_json, None) or (result or {}).get("submission") or {}
    patch = _read(rd.submission_patch)
    parts = []
    if result is not None:
        c = classify_run(Run(run_dir, result), labels)[0]
        parts.append(f"<p>class <b>{esc(c.label)}</b>: {esc(c.reason)}</p>")
    if sub:
        rejected = "; ".join(f"{r.get('path')} ({r.get('reason')})" for r in sub.get("rejected_files") or [])
        parts.append(
            f"<p>source {esc(sub.get('source', '–'))}; files {esc(', '.join(sub.get('files') or []) or 'none')}; "
            f"+{esc(sub.get('lines_added'))}/-{esc(sub.get('lines_removed'))} lines; sha256 {esc(sub.get('sha256'))}"
            + (f"; rejected: {esc(rejected)}" if rejected else "")
            + "</p>"
        )
    if patch is None:
        parts.append(_none("no submission.patch: the run ended before its submission was taken"))
    elif not patch.strip():
        parts.append(_none("the submission is empty: the agent left every editable file as it was"))
    else:
        parts.append(diff_html(patch))
    return _section("submission", "Submission", "".join(parts))


# --------------------------------------------------------------------------- grading seeds


def parse_curve(text: str) -> dict[str, list[tuple[int, float]]]:
    """What a training log printed per step: {name: [(step, value)]} from its lines `step N[/T] name
    value ...` (also `iter`, `update`), timings left out. The log is the submission's own output: a
    line that does not parse is skipped."""
    series: dict[str, list[tuple[int, float]]] = {}
    for line in text.splitlines():
        m = STEP_LINE.match(line)
        if not m:
            continue
        for name, v in _pairs(m.group(2)):
            if not NOT_CURVES & set(name.lower().split()):
                series.setdefault(name, []).append((int(m.group(1)), v))
    return series


def _pairs(rest: str):
    """(name, value) of `loss 2.31 train solve rate 0.4 elapsed 7.1s`: the words before each number.
    Read token by token (a line of any length costs its length)."""
    words: list[str] = []
    for tok in rest.split(maxsplit=64)[:64]:
        m = NUMBER.match(tok)
        if m:
            v = _num(float(m.group().replace(",", "")))
            if words and v is not None:
                yield " ".join(words[-4:]), v
            words = []
        elif WORD.fullmatch(tok):
            words.append(tok)
        else:
            words = []


def _curve_plot(series: dict, title: str) -> str:
    names = list(series)[:3]
    plt = _plt()
    fig, axes = plt.subplots(1, len(names), figsize=(3.4 * len(names), 2.4), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        xs, ys = zip(*series[name])
        ax.plot(xs, ys, marker=".")
        ax.set_xlabel("step")
        ax.set_ylabel(name)
    fig.suptitle(title, fontsize=9)
    return f"<figure>{_png(fig)}<figcaption>{esc(title)}: {esc(', '.join(names))} per step</figcaption></figure>"


def _seed_dirs(rd: RunDir) -> dict[int, Path]:
    out = {}
    for d in sorted(rd.grade.glob("seed_*")) if rd.grade.is_dir() else []:
        if d.is_dir() and d.name[5:].isdigit():
            out[int(d.name[5:])] = d
    return out


def _cut_text(entry: dict, timing: dict) -> str:
    cut = entry.get("cut")
    if cut == "cpu":
        return f"cut by its CPU cap ({_fmt(entry.get('cpu_s'), 4)} CPU-s of a {_fmt(timing.get('cpu_cap_s'), 4)} cap)"
    if cut == "wall":
        return f"cut by the wall-clock cap ({_fmt(timing.get('cap_s'), 4)} s)"
    return "not cut: training exited on its own" + (" (timed out)" if entry.get("timed_out") else "")


def seeds_section(run_dir: Path, result: dict | None) -> str:
    rd = RunDir(run_dir)
    dirs = _seed_dirs(rd)
    entries = {e.get("seed"): e for e in ((result or {}).get("checkpoints") or {}).get("per_seed") or []}
    order = list((result or {}).get("seeds") or [])
    seeds = order + sorted(s for s in set(dirs) | set(entries) if s not in order)
    if not seeds:
        why = "no grade/ folder and no seed in result.json: the run was not graded"
        if result is not None and result.get("status") == "error":
            why += f" (status error: {result.get('reason')})"
        return _section("seeds", "Grading seeds", _none(why))
    raw = (result or {}).get("raw") or {}
    timing = (result or {}).get("timing") or {}
    raws, scores = raw.get("per_seed") or [], (result or {}).get("score_per_seed") or []
    parts = []
    for s in seeds:
        e, d = entries.get(s, {}), dirs.get(s)
        i = order.index(s) if s in order else None
        metric = raws[i] if i is not None and i < len(raws) else None
        score = scores[i] if i is not None and i < len(scores) else None
        rows = [
            ("status", (e.get("status") or "not in result.json") + (f": {e['reason']}" if e.get("reason") else "")),
            (f"hidden {raw.get('metric') or 'metric'}", _fmt(metric)),
            ("score (σ)", _fmt(score, 4)),
            ("selection metric of the chosen checkpoint", _fmt(e.get("selection_metric"))),
            ("validation metric (the repo's own validation split, not scored)", _fmt(e.get("validation_metric"))),
            ("chosen checkpoint", e.get("chosen") or "–"),
            ("cut", _cut_text(e, timing) if e else "–"),
            ("training", f"{_fmt(e.get('train_s'), 4)} s wall, {_fmt(e.get('cpu_s'), 4)} CPU-s"),
        ]
        body = _table(["", ""], [[f"<b>{esc(k)}</b>", esc(v)] for k, v in rows], "kv")
        log = _read(d / "train.log") if d else None
        if log is None:
            body += _none(f"no grade/seed_{s}/train.log")
        else:
            series = parse_curve(log)
            body += (
                _curve_plot(series, f"seed {s}")
                if series
                else "<p class='note'>no per-step line (step N ... name value) in train.log: no curve</p>"
            )
            body += _details("train.log", _tail(log))
        if d and (d / "cut_1").is_dir():
            body += _details(
                "its first training, cut by the CPU cap (retrained once)", _tail(_read(d / "cut_1" / "train.log") or "")
            )
        parts.append(f"<h3>seed {esc(s)}</h3>{body}")
    return _section("seeds", "Grading seeds", "".join(parts))


# --------------------------------------------------------------------------- API cost


TOKENS = ("input_tokens", "cached_input_tokens", "cache_write_tokens", "output_tokens", "reasoning_tokens")


def cost_section(run_dir: Path, result: dict | None) -> str:
    kind = str(((result or {}).get("agent_config") or {}).get("kind") or "")
    rows_in = _jsonl(run_dir / API_CALLS)
    if not rows_in:
        why = NO_MODEL.get(kind) or (
            f"no {API_CALLS}: the {kind} agent's gateway recorded no call"
            if kind in CLI_KINDS
            else f"no {API_CALLS} in the run folder (agent kind {kind or 'unknown'})"
        )
        return _section("cost", "Model API calls and cost", _none(why))
    t0 = next((_num(r.get("t")) for r in rows_in if _num(r.get("t")) is not None), None)
    totals, rows = dict.fromkeys((*TOKENS, "usd"), 0.0), []
    for n, r in enumerate(rows_in, 1):
        usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
        for k in TOKENS:
            totals[k] += _num(usage.get(k)) or 0.0
        totals["usd"] += _num(r.get("usd")) or 0.0
        t = _num(r.get("t"))
        note = r.get("refused") or r.get("error") or r.get("charged") or ""
        retries = r.get("retries") if isinstance(r.get("retries"), list) else []
        rows.append(
            [esc(n), esc(_fmt(t - t0, 5) if t is not None and t0 is not None else "–"), esc(r.get("path"))]
            + [esc(r.get("model")), esc(r.get("status"))]
            + [esc(_fmt(usage.get(k))) for k in TOKENS]
            + [esc(_fmt(r.get("usd"), 4)), esc(f"{note}{f'; {len(retries)} retries' if retries else ''}")]
        )
    rows.append(
        ["<b>total</b>", "", "", "", ""]
        + [esc(_fmt(totals[k])) for k in TOKENS]
        + [f"<b>{esc(_fmt(totals['usd'], 4))}</b>", ""]
    )
    head = ["call", "s since first", "path", "model", "status", "tokens in", "cached in", "cache write", "tokens out"]
    head += ["reasoning", "USD", "note"]
    cost = (result or {}).get("cost") or {}
    body = f"<p>from {API_CALLS} (the gateway's log); result.json's cost: {esc(_fmt(cost.get('usd'), 4))} USD</p>"
    return _section("cost", "Model API calls and cost", body + _table(head, rows))


# --------------------------------------------------------------------------- the page

CSS = """body{font-family:sans-serif;margin:1.5em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1em;font-size:0.88em}
th,td{border:1px solid #ccc;padding:2px 7px;text-align:left;vertical-align:top}
th{background:#f0f0f0}table.kv td:first-child{white-space:nowrap}
pre{background:#f7f7f7;padding:6px;overflow-x:auto;white-space:pre-wrap;word-break:break-all;font-size:0.85em}
details.entry{border-left:3px solid #ccd;margin:3px 0;padding-left:6px}summary{cursor:pointer}
.tag{display:inline-block;font-size:0.8em;padding:0 5px;border-radius:3px;background:#dde;color:#224}
.tag.tool{background:#fde7c8}.tag.message{background:#d8f0d8}.tag.proxy{background:#e3d8f5}
pre.diff .add{background:#e6ffec;color:#116329}pre.diff .del{background:#ffebe9;color:#82071e}
pre.diff .hunk{color:#0550ae}pre.diff .meta{color:#666;font-weight:bold}
.none{color:#777;font-style:italic}.note{color:#555;font-size:0.85em}.out{font-size:0.8em;color:#555}
h2{border-bottom:2px solid #ddd;padding-bottom:3px}nav a{margin-right:1em}"""
SECTIONS = [
    ("header", "Run"),
    ("instructions", "Instructions"),
    ("transcript", "Agent transcript"),
    ("proxy", "Proxy calls"),
    ("submission", "Submission"),
    ("seeds", "Grading seeds"),
    ("cost", "Model API calls and cost"),
]


def render(run_dir: Path, labels: dict | None = None) -> str:
    """The page's HTML."""
    run_dir, labels = Path(run_dir), labels or {}
    rd = RunDir(run_dir)
    result = read_json(rd.result, None)
    result = result if isinstance(result, dict) else None
    title, head = header(run_dir, result, labels)
    text = _read(rd.instructions)
    instructions = (
        _details(f"instructions.md ({text.count(chr(10)) + 1} lines)", _pre(text, MAX_READ), "entry")
        if text
        else _none("no instructions.md: the run had no agent window (a grade-only run), or ended before it")
    )
    nav = "<nav>" + "".join(f"<a href='#{sid}'>{esc(t)}</a>" for sid, t in SECTIONS) + "</nav>"
    parts = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>{CSS}</style>"
        f"</head><body><h1>ai4ai run</h1>{nav}",
        head,
        _section("instructions", "Instructions", instructions),
        transcript_section(run_dir, result),
        proxy_section(run_dir, result),
        submission_section(run_dir, result, labels),
        seeds_section(run_dir, result),
        cost_section(run_dir, result),
        "</body></html>",
    ]
    return "\n".join(parts)


def is_run_dir(path: Path) -> bool:
    """Whether `path` holds a run: any of the files a run writes first or last."""
    rd = RunDir(Path(path))
    marks = (rd.result, rd.agent_outcome, rd.agent_log, rd.instructions, rd.submission_patch, rd.trajectory)
    return Path(path).is_dir() and (any(p.is_file() for p in marks) or rd.grade.is_dir())


def write_page(run_dir: Path, out: Path | None = None, labels: dict | None = None) -> Path:
    """Write the run's page (default <run_dir>/run.html) and return its path. `labels`: human
    overrides of patch classes (ai4ai.analysis.runs.read_labels), as the report uses."""
    run_dir = Path(run_dir)
    out = Path(out) if out is not None else run_dir / "run.html"
    page = render(run_dir, labels)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(page)
    return out
