"""ai4ai.view: one run's page, read back from a real ci run (a command agent that edits a file and
calls the proxy), rendered in Chromium, and from hand-made run folders (escaping, empty sections,
the command's errors, the report's links)."""

import html
import json
import re
import subprocess
from pathlib import Path

import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.analysis.reporting import report
from ai4ai.analysis.runpage import SECTIONS, parse_curve, write_page
from ai4ai.core import record, trajectory
from ai4ai.core.layout import RunDir
from tests.fixtures.results import fake_result
from tests.requirements import chromium, requires

from .conftest import EDIT_AND_PROXY, needs_bwrap

SCRIPT = "<script>alert(1)</script>"


def sections(page: str) -> dict[str, str]:
    """The page's sections by id."""
    found = dict(re.findall(r"<section id='(\w+)'>(.*?)</section>", page, flags=re.S))
    assert list(found) == [sid for sid, _ in SECTIONS], list(found)
    return found


def num(x: float, digits: int = 4) -> str:
    """A number as the page prints it."""
    return f"{x:.{digits}g}"


@pytest.fixture
def proxied_run(command_ci_run):
    """The session's real ci run by a command agent that edits optim.py, makes two proxy calls and
    marks a submission (tests/conftest.py, shared with test_end_to_end): (run_dir, result)."""
    return command_ci_run


@needs_bwrap
def test_the_page_of_a_real_run_holds_each_section(proxied_run, tmp_path):
    run_dir, result = proxied_run
    rd = RunDir(run_dir)
    assert result["status"] == "graded", result["reason"]
    path = write_page(run_dir)
    assert path == run_dir / "run.html"
    s = sections(path.read_text())
    # header: the result's own fields
    assert f"optimizer · command · ci · {html.escape(run_dir.name)}" in s["header"]
    assert num(result["score"]) in s["header"] and result["provenance"]["started_at"] in s["header"]
    for seed, score in zip(result["seeds"], result["score_per_seed"], strict=True):
        assert f"seed {seed}: {num(score, 3)}" in s["header"]
    assert "hyperparameters" in s["header"] and "marked" in s["header"]  # its class and its source
    # the instructions, whole and escaped
    assert html.escape(rd.instructions.read_text()) in s["instructions"]
    # the transcript: the command, then what ai4ai-proxy answered it, call by call
    assert html.escape(EDIT_AND_PROXY) in s["transcript"] and "from agent.log" in s["transcript"]
    calls = trajectory.events(rd.trajectory)
    assert [c["call"] for c in calls] == [1, 2]
    for c in calls:
        assert f"ai4ai-proxy: perplexity {num(c['proxy_metric'])}" in s["transcript"]
    assert "ai4ai-proxy --submit: marked" in s["transcript"]
    # the proxy calls: each call's number, time and metric, which its folder's evaluation agrees with
    folders = sorted(p.name for p in (rd.harness / "proxy").iterdir())
    assert folders == ["call_0001", "call_0002"]
    for c in calls:
        evaluated = json.loads((rd.proxy_call(c["call"]) / "eval" / "eval_result.json").read_text())
        assert evaluated["validation_metric"] == pytest.approx(c["proxy_metric"])
        row = f"<td>proxy</td><td>{c['call']}</td><td>{num(c['elapsed_s'], 5)}</td><td>{num(c['proxy_metric'])}</td>"
        assert row in s["proxy"]
        assert f"validation metric {num(evaluated['validation_metric'])}" in s["proxy"]
    assert "<td>submit</td>" in s["proxy"] and "data:image/png;base64," in s["proxy"]  # the plot
    # the diff, every changed line coloured
    patch = rd.submission_patch.read_text()
    changed = [ln for ln in patch.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---"))]
    assert len(changed) == 2, patch
    for ln in changed:
        cls = "add" if ln[0] == "+" else "del"
        assert f"<span class='{cls}'>{html.escape(ln)}</span>" in s["submission"]
    assert "LR = 4e-3" in s["submission"]
    # each seed: its hidden metric, its cut, and the curve its train.log holds
    seeds = result["checkpoints"]["per_seed"]
    assert len(seeds) == len(result["seeds"]) >= 1
    for entry, raw in zip(seeds, result["raw"]["per_seed"], strict=True):
        assert f"<h3>seed {entry['seed']}</h3>" in s["seeds"]
        assert f"<td>{num(raw)}</td>" in s["seeds"]
        cut = {None: "not cut: training exited on its own", "cpu": "cut by its CPU cap", "wall": "cut by the wall"}
        assert cut[entry["cut"]] in s["seeds"]
        log = (rd.grade / f"seed_{entry['seed']}" / "train.log").read_text()
        last = re.findall(r"^step (\d+)/\d+ loss ([\d.]+)", log, flags=re.M)[-1]
        curve = parse_curve(log)
        assert len(curve["loss"]) >= 3 and curve["loss"][-1] == (int(last[0]), float(last[1])), curve
    assert s["seeds"].count("data:image/png;base64,") == len(seeds)
    # no model, no API calls: said so
    assert "none recorded: the command agent" in s["cost"]


@needs_bwrap
@requires("chromium")
def test_the_page_renders_in_headless_chromium(proxied_run, tmp_path):
    run_dir, _ = proxied_run
    page = write_page(run_dir, tmp_path / "page.html")
    text = page.read_text()
    refs = re.findall(r"""(?:src|href)\s*=\s*['"]([^'"]*)""", text)
    assert refs and all(r.startswith(("data:image/png;base64,", "#")) for r in refs), [r[:40] for r in refs]
    home = tmp_path / "chrome"
    dom = _chromium(["--dump-dom", page.as_uri()], home)
    for _, title in SECTIONS[1:]:
        assert f"<h2>{title}</h2>" in dom.stdout, (title, dom.stderr[-2000:])
    shot = tmp_path / "shot.png"
    _chromium([f"--screenshot={shot}", "--window-size=1280,2000", page.as_uri()], home)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    from PIL import Image

    img = Image.open(shot).convert("RGB")
    assert img.size == (1280, 2000)
    assert len(img.getcolors(maxcolors=1 << 20) or []) > 50  # text, tables and plots, not a blank page


def _chromium(args: list[str], home: Path) -> subprocess.CompletedProcess:
    """Headless Chromium with no network: every host resolves nowhere, every proxy is refused."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "XDG_CONFIG_HOME": str(home / ".config")}
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions"]
    flags += ["--host-resolver-rules=MAP * ~NOTFOUND", "--proxy-server=127.0.0.1:9", "--virtual-time-budget=5000"]
    return subprocess.run(
        [chromium(), *flags, f"--user-data-dir={home / 'profile'}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


# --------------------------------------------------------------------------- hand-made run folders


def _hostile_run(root: Path, cli: str) -> Path:
    """A run folder whose every text the agent could write holds SCRIPT: a transcript in the shape
    of `cli` (claude | codex | command, whose transcript is agent.log), the patch, a proxy call's
    detail and log, a seed's train.log and the gateway's log."""
    run = root / cli
    rd = RunDir(run)
    (rd.grade / "seed_0").mkdir(parents=True)
    result = fake_result(agent=f"{cli} {SCRIPT}", agent_config={"kind": cli, "command": SCRIPT}, files=["optim.py"])
    result["checkpoints"]["per_seed"] = [{"seed": 0, "status": "graded", "reason": SCRIPT, "cut": "cpu", "cpu_s": 9.0}]
    rd.result.write_text(json.dumps(result))
    rd.instructions.write_text(f"# task\n{SCRIPT}\n")
    rd.agent_log.write_text(f"{SCRIPT}\n" + json.dumps({"ok": True, "metric": SCRIPT, "proxy_metric": 9.5}) + "\n")
    events = {
        "claude": [
            {"type": "assistant", "message": {"content": [{"type": "text", "text": SCRIPT}]}},
            {
                "type": "assistant",
                "message": {
                    "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": SCRIPT}}]
                },
            },
            {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "content": SCRIPT}]}},
            {"type": "result", "subtype": "success", "result": SCRIPT},
        ],
        "codex": [
            {"type": "item.completed", "item": {"id": "i0", "type": "agent_message", "text": SCRIPT}},
            {
                "type": "item.completed",
                "item": {"id": "i1", "type": "command_execution", "command": SCRIPT, "aggregated_output": SCRIPT},
            },
            {"type": "turn.failed", "error": {"message": SCRIPT}},
        ],
    }.get(cli)
    if events:
        (run / "transcript.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
        api = [
            {
                "t": 100.0,
                "path": "/v1/messages",
                "model": SCRIPT,
                "status": 200,
                "usd": 0.25,
                "usage": {"input_tokens": 1000},
            },
            {"t": 101.5, "path": SCRIPT, "status": 404, "refused": "route"},
        ]
        (run / "api_calls.jsonl").write_text("".join(json.dumps(r) + "\n" for r in api))
    rd.submission_patch.write_text(f"--- a/optim.py\n+++ b/optim.py\n@@ -1,1 +1,1 @@\n-x = 1\n+# {SCRIPT}\n")
    rd.trajectory.write_text(
        json.dumps(
            {"elapsed_s": 30, "event": "proxy", "call": 1, "proxy_metric": 9.5, "status": "invalid", "detail": SCRIPT}
        )
        + "\n"
    )
    (rd.proxy_call(1) / "run").mkdir(parents=True)
    (rd.proxy_call(1) / "run" / "train.log").write_text(SCRIPT)
    (rd.grade / "seed_0" / "train.log").write_text(f"step 1 loss 2.0\n{SCRIPT}\nstep 2 loss 1.5 {SCRIPT}\n")
    return run


@pytest.mark.parametrize("cli", ["claude", "codex", "command"])
def test_every_text_of_the_run_is_escaped(tmp_path, cli):
    page = write_page(_hostile_run(tmp_path, cli)).read_text()
    assert "<script" not in page.lower()
    s = sections(page)
    shown = html.escape(SCRIPT)
    assert {sid for sid, body in s.items() if shown in body} >= {
        "header",
        "instructions",
        "transcript",
        "proxy",
        "submission",
        "seeds",
    }
    assert f"<span class='add'>+# {shown}</span>" in s["submission"]
    assert "cut by its CPU cap (9 CPU-s" in s["seeds"]
    if cli == "command":
        assert "none recorded: the command agent" in s["cost"]
        assert "ai4ai-proxy: " + shown in s["transcript"]  # agent.log's JSON reply, read as one
    else:
        assert shown in s["cost"] and "<b>0.25</b>" in s["cost"] and "<td>1000</td>" in s["cost"]
        assert "route" in s["cost"]  # the refused call
        # a tool call and its output in one collapsible entry
        entry = next(e for e in s["transcript"].split("<details class='entry'>") if "tool call" in e)
        assert entry.count(shown) >= 2 and "output" in entry


@pytest.mark.parametrize("cli", ["claude", "codex"])
def test_a_transcript_of_junk_still_renders(tmp_path, cli):
    """Any process of the agent can print to the CLI's stdout: lines of any shape are shown or skipped,
    never a reason for the page to fail; so is a training log's line of any length."""
    run = _hostile_run(tmp_path, cli)
    junk = [
        {"type": " ", "message": "a string"},
        {"type": "user", "message": {"content": [{"type": "tool_result", "tool_use_id": [1], "content": 5}]}},
        {"type": "assistant", "message": {"content": 5}},
        {"type": "item.completed", "item": {"id": [1], "type": "  "}},
        {"type": "error", "error": "a string"},
        {"type": "turn.failed", "error": ["a list"]},
    ]
    lines = [json.dumps(e) for e in junk] + ["[" * 100_000 + "]" * 100_000, "not json", "[1, 2]"]
    with open(run / "transcript.jsonl", "a") as f:
        f.write("\n".join(lines) + "\n")
    with open(RunDir(run).grade / "seed_0" / "train.log", "a") as f:
        f.write("step 3 " + "a " * 500_000 + "\nstep 4 loss 1.25\n")
    s = sections(write_page(run).read_text())
    assert s["transcript"].count("<details class='entry'>") >= 3 + len(junk) - 1
    assert "<script" not in s["transcript"].lower()
    assert parse_curve((RunDir(run).grade / "seed_0" / "train.log").read_text())["loss"] == [
        (1, 2.0),
        (2, 1.5),
        (4, 1.25),
    ]


def test_an_empty_run_says_why_each_section_is_empty(tmp_path):
    """A baseline run's folder as grading leaves it when nothing else was written: every section is
    there, each saying what is missing and why."""
    run = tmp_path / "base"
    run.mkdir()
    (run / "result.json").write_text(json.dumps(fake_result(agent="baseline")))
    s = sections(write_page(run).read_text())
    assert "none recorded" not in s["header"]
    assert "none recorded: no instructions.md" in s["instructions"]
    assert "none recorded: the baseline agent runs nothing" in s["transcript"]
    assert "none recorded: the baseline agent runs nothing, so it calls no proxy" in s["proxy"]
    assert "none recorded: no submission.patch" in s["submission"]
    assert "none recorded: no grade/ folder" not in s["seeds"]  # its seed is in result.json
    assert "<h3>seed 0</h3>" in s["seeds"] and "none recorded: no grade/seed_0/train.log" in s["seeds"]
    assert "none recorded: the baseline agent runs nothing" in s["cost"]


def _view(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["python", "-m", "ai4ai.view", *args], capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT
    )


def test_the_command_refuses_a_folder_that_is_not_a_run(tmp_path):
    (tmp_path / "empty").mkdir()
    for args, said in (
        ([f"run={tmp_path / 'empty'}"], "not a run folder"),
        ([f"run={tmp_path / 'gone'}"], "no such folder"),
        ([], "no run given"),
    ):
        p = _view(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        lines = p.stdout.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("ai4ai: ") and said in lines[0] and "run=RUN_DIR" in lines[0]
    assert list((tmp_path / "empty").iterdir()) == [] and not (tmp_path / "gone").exists()
    run = _hostile_run(tmp_path, "command")
    p = _view(f"run={run}", f"out={tmp_path / 'page.html'}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str(tmp_path / "page.html") and (tmp_path / "page.html").is_file()


def test_the_report_links_each_run_to_its_page(tmp_path):
    db = tmp_path / "results.sqlite"
    run = _hostile_run(tmp_path, "claude")
    record.insert(db, json.loads(RunDir(run).result.read_text()), run)
    record.insert(db, fake_result(seed=1), tmp_path / "elsewhere")  # a run whose folder is not here
    out = tmp_path / "report"
    report(db, out, formats=("html",))
    links = re.findall(r"<td><a href='(runs/[^']+)'>([^<]+)</a></td>", (out / "report.html").read_text())
    assert [name for _, name in links] == ["claude"], links
    page = (out / links[0][0]).read_text()
    assert "optimizer · claude" in page and "<h2>Proxy calls</h2>" in page
