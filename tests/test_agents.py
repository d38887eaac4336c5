"""Agent kinds: preflight, the sandbox an API-backed CLI gets (a dummy key, only the gateway
reachable, stdout not trusted for cost), submission policies, trajectory summary. The real CLIs
run in tests/agents/test_real_clis.py."""

import json
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from ai4ai import pipeline
from ai4ai.agents.base import AgentContext
from ai4ai.agents.cli import DUMMY_KEY, Wiring, run_cli
from ai4ai.core.trajectory import summary as trajectory_summary
from ai4ai.repo.submission import Submission
from ai4ai.sandbox.box import KERNELS_DIR, Mount, Sandbox
from ai4ai.window.proxy import choose_submission
from tests.requirements import requires

KEY = "sk-test-NEVER-IN-RUN-DIR-9f3a"


def test_missing_cli_or_key_fails_before_anything(compose_cfg, tmp_path, monkeypatch, capsys):
    cfg = compose_cfg("config", ["task=optimizer", "scale=ci", "agent=claude", "agent.executable=no-such-claude"])
    with pytest.raises(SystemExit):
        pipeline.run(cfg, tmp_path / "r1")
    assert "npm install -g @anthropic-ai/claude-code" in capsys.readouterr().out
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = compose_cfg("config", ["task=optimizer", "scale=ci", "agent=codex", f"agent.executable={sys.executable}"])
    with pytest.raises(SystemExit):
        pipeline.run(cfg, tmp_path / "r2")
    assert "OPENAI_API_KEY" in capsys.readouterr().out
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    cfg = compose_cfg(
        "config",
        [
            "task=optimizer",
            "scale=ci",
            "agent=codex",
            f"agent.executable={sys.executable}",
            "agent.base_url=ftp://example.org",
        ],
    )
    with pytest.raises(SystemExit):
        pipeline.run(cfg, tmp_path / "r3")
    assert "agent.base_url" in capsys.readouterr().out
    assert not any((tmp_path / r).exists() for r in ("r1", "r2", "r3"))


def _sub(tag):
    return Submission(files={"optim.py": tag}, rejected={}, patch=tag, lines_added=1, lines_removed=0)


def test_submission_policies():
    class Server:
        marked = _sub("marked")
        snapshots = [(0.2, _sub("p1")), (0.5, _sub("p2")), (None, _sub("broken")), (0.3, _sub("p3"))]

    final = _sub("final")
    assert choose_submission("final", final, Server())[0].patch == "final"
    assert choose_submission("marked", final, Server()) == (Server.marked, "marked")
    assert choose_submission("best_proxy", final, Server())[0].patch == "p2"

    class Empty:
        marked = None
        snapshots = []

    assert choose_submission("marked", final, Empty())[1] == "final"
    assert choose_submission("best_proxy", final, Empty())[1] == "final"
    with pytest.raises(ValueError):
        choose_submission("latest", final, Empty())


def test_best_proxy_ranks_raw_metrics_where_a_task_has_no_validation_anchors():
    from ai4ai.core.trajectory import rank

    assert rank(0.3, 0.9, "max") == 0.3  # a score, when there is one
    assert rank(None, None, "max") is None  # a call that produced nothing
    assert rank(None, 0.81, "max") == 0.81  # reward_model: accuracy, higher is better
    assert rank(None, 3.2, "min") == -3.2  # optimizer: perplexity, lower is better
    assert rank(None, 3.2, None) is None  # no direction, no ranking of raw metrics

    class Server:  # a run graded on a fresh instance
        marked = None
        snapshots = [(rank(None, x, "min"), _sub(t)) for x, t in ((3.0, "a"), (2.5, "b"), (None, "c"))]

    assert choose_submission("best_proxy", _sub("final"), Server())[0].patch == "b"


def test_trajectory_summary(tmp_path):
    p = tmp_path / "trajectory.jsonl"
    rows = [
        {"event": "proxy", "call": 1, "proxy_score": None, "status": "invalid"},
        {"event": "proxy", "call": 2, "proxy_score": 0.2, "elapsed_s": 5},
        {"event": "submit"},
        {"event": "proxy", "call": 3, "proxy_score": 0.4, "elapsed_s": 9},
        {"event": "proxy", "call": 4, "proxy_score": 0.3, "elapsed_s": 12},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    t = trajectory_summary(p)
    assert t["proxy_calls"] == 4 and t["first_valid_proxy"]["call"] == 2
    assert t["best_proxy"]["call"] == 3 and t["final_proxy"]["call"] == 4 and t["regressed_after_best"] is True


def test_trajectory_summary_of_a_task_graded_on_a_fresh_instance(tmp_path):
    """No validation anchors (optimizer, reward_model): the calls carry a raw metric and no score, and
    the summary ranks them by it in the task's direction instead of reporting no valid call."""
    p = tmp_path / "trajectory.jsonl"
    rows = [
        {"event": "proxy", "call": 1, "proxy_metric": None, "proxy_score": None, "status": "invalid"},
        {"event": "proxy", "call": 2, "proxy_metric": 9.4, "proxy_score": None},
        {"event": "proxy", "call": 3, "proxy_metric": 9.1, "proxy_score": None},
        {"event": "proxy", "call": 4, "proxy_metric": 9.2, "proxy_score": None},
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    t = trajectory_summary(p, "min")  # perplexity: lower is better
    assert t["first_valid_proxy"]["call"] == 2 and t["best_proxy"]["call"] == 3
    assert t["final_proxy"]["call"] == 4 and t["regressed_after_best"] is True
    t = trajectory_summary(p, "max")  # the same numbers as accuracies
    assert t["best_proxy"]["call"] == 2 and t["regressed_after_best"] is True
    assert trajectory_summary(p)["best_proxy"] is None  # no direction: nothing to rank by


PROBE = """
import json, os, socket, sys, urllib.request
url = os.environ["ANTHROPIC_BASE_URL"]
req = urllib.request.Request(url + "/v1/messages", method="POST", headers={
    "x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"},
    data=json.dumps({"model": "claude-sonnet-4-5", "stream": True, "messages": [],
                     "tools": [{"name": "Bash"}]}).encode())
resp = urllib.request.urlopen(req, timeout=30)
print("GATEWAY", resp.status, b"message_stop" in resp.read(), flush=True)
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3)
    print("DIRECT reached the API", flush=True)
except OSError:
    print("DIRECT blocked", flush=True)
seen = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                seen.append(open(f"/proc/{pid}/{f}", "rb").read().decode(errors="replace"))
            except OSError:
                pass
print("SEEN", json.dumps(seen), flush=True)
print("IFACES", sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").readlines()[2:]), flush=True)
print(json.dumps({"type": "result", "total_cost_usd": 0.0001, "usage": {"input_tokens": 1, "output_tokens": 1}}))
import time; time.sleep(1.5)
"""


@requires("sandbox")  # api_only needs the bwrap network namespace
@pytest.mark.parametrize("network", ["api_only", "open"])
def test_sandbox_holds_a_dummy_reaches_only_the_gateway_and_stdout_is_not_cost(
    tmp_path, monkeypatch, fake_api, network
):
    """api_only: only the gateway is reachable. open (the escape hatch): the host network too, and
    the key and the cost record are the gateway's all the same."""
    api = fake_api("edit", KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    probe = tmp_path / "bin" / "probe.py"
    probe.parent.mkdir()
    probe.write_text(PROBE)
    ws, home = tmp_path / "ws", tmp_path / "run" / "agent_home"
    ws.mkdir()
    (home / "tmp").mkdir(parents=True)
    from ai4ai.window.proxy import client_bin

    sb = Sandbox(
        backend="bwrap",
        mounts=[
            Mount("/workspace", ws, True),
            Mount("/home/agent", home, True),
            Mount("/opt/ai4ai/ai4ai_kernels", KERNELS_DIR, False),
            Mount("/opt/ai4ai/bin", client_bin(tmp_path), False),
            Mount("/opt/probe", probe.parent, False),
        ],
    )
    sb.env = sb.base_env("/home/agent")
    cfg = {
        "kind": "probe",
        "api_key_env": "ANTHROPIC_API_KEY",
        "base_url": api.base,
        "network": network,
        "prices": {"default": {"input": 3.0, "cached_input": 0.3, "cache_write": 3.75, "output": 15.0}},
    }
    ctx = AgentContext(
        workspace=ws,
        instructions="",
        window_s=60,
        sandbox=sb,
        log_path=tmp_path / "run" / "agent.log",
        config=cfg,
        pristine=ws,
    )
    wiring = Wiring(
        auth="x-api-key",
        default_base_url="https://api.anthropic.com",
        env=lambda url: {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": DUMMY_KEY},
        argv=lambda url: ["python", "/opt/probe/probe.py", str(api.port)],
    )
    host_cmdlines, done = [], threading.Event()

    def watch():  # every command line on the host while the agent runs
        while not done.is_set():
            for p in psutil.process_iter(["cmdline"]):
                host_cmdlines.append(" ".join(p.info["cmdline"] or []))
            time.sleep(0.2)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        out = run_cli(ctx, wiring, Path(sys.executable))
    finally:
        done.set()
        t.join()
    log = ctx.log_path.read_text()
    assert "GATEWAY 200 True" in log, log
    if network == "api_only":
        assert "DIRECT blocked" in log and "IFACES ['lo']" in log, log
    else:
        assert "DIRECT reached the API" in log, log
    seen = json.loads(next(x for x in log.splitlines() if x.startswith("SEEN "))[5:])
    assert any(DUMMY_KEY in s for s in seen) and not any(KEY in s for s in seen)
    assert host_cmdlines and not any(KEY in c for c in host_cmdlines)
    # the forged result line is in the transcript and counts for nothing: the API's usage does
    assert '"total_cost_usd": 0.0001' in (tmp_path / "run" / "transcript.jsonl").read_text()
    assert api.bad_keys == 0 and len(api.reported) == 1
    assert out.usage["input_tokens"] == 1700 and out.usage["output_tokens"] == 40 and out.error is None
    assert out.usage["usd"] == pytest.approx((1000 * 3.0 + 500 * 0.3 + 200 * 3.75 + 40 * 15.0) / 1e6)
    assert [p.name for p in home.iterdir()] == ["tmp"]  # nothing the agent wrote landed in the run dir's home
    for p in (tmp_path / "run").rglob("*"):
        if p.is_file():
            assert KEY.encode() not in p.read_bytes(), p


def test_the_agent_is_told_where_its_proxy_has_no_scale():
    """A task graded on a fresh instance (data.grading) answers proxy calls with a raw metric only; its
    instructions say so and why, and a task with validation anchors' do not."""
    from ai4ai.core.task import load_task
    from ai4ai.window.instructions import render

    for name, fresh in (("optimizer", True), ("reward_model", True), ("sft", True), ("pruning", False)):
        text = render(load_task(name), "ci", 120, started=1_800_000_000)
        assert ("graded on a fresh instance of its source" in text) is fresh, name
        assert ("raw validation metric only" in text) is fresh, name


def test_the_agent_knows_its_time(tmp_path, monkeypatch):
    import subprocess

    from ai4ai.core.task import load_task
    from ai4ai.window.instructions import render
    from ai4ai.window.proxy import client_bin

    text = render(load_task("optimizer"), "ci", 120, started=1_800_000_000)
    assert "120 seconds" in text and "Unix time 1800000120" in text and "ai4ai-time" in text
    exe = client_bin(tmp_path) / "ai4ai-time"
    env = {"PATH": "/usr/bin:/bin", "AI4AI_DEADLINE": str(int(time.time()) + 300)}
    out = subprocess.run([sys.executable, str(exe)], env=env, capture_output=True, text=True)
    assert out.returncode == 0 and 295 <= int(out.stdout) <= 300
    out = subprocess.run([sys.executable, str(exe)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert out.returncode == 2 and "AI4AI_DEADLINE" in out.stderr
    # with the harness reachable, its count wins (the window grows by the proxy's waits for the device)
    import socket as so

    srv = so.socket(so.AF_UNIX)
    srv.bind(str(tmp_path / "p.sock"))
    srv.listen(1)

    def answer():
        c, _ = srv.accept()
        c.recv(100)
        c.sendall(b'{"ok": true, "seconds_left": 42.7, "proxy_calls": 0}\n')
        c.close()

    threading.Thread(target=answer, daemon=True).start()
    out = subprocess.run(
        [sys.executable, str(exe)],
        env=dict(env, AI4AI_PROXY_SOCKET=str(tmp_path / "p.sock")),
        capture_output=True,
        text=True,
    )
    srv.close()
    assert out.returncode == 0 and out.stdout.strip() == "42"
