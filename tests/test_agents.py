"""Agent kinds with stand-in CLIs (no network): transcript, usage, proxy, policies, deadline, cap."""
import json
import shutil
import socket
import threading
import time
from pathlib import Path

import psutil
import pytest

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.agents import claude as claude_agent
from ai4ai.agents import codex as codex_agent
from ai4ai.agents.base import AgentContext
from ai4ai.proxy import choose_submission, trajectory_summary
from ai4ai.sandbox import KERNELS_DIR, Mount, Sandbox, bwrap_available
from ai4ai.submission import Submission

STANDINS = Path(__file__).parent / "standins"
KEY = "sk-test-NEVER-IN-RUN-DIR-9f3a"


@pytest.fixture
def standin_bin(tmp_path, monkeypatch):
    d = tmp_path / "bin"
    d.mkdir()
    for name in ("claude", "codex"):
        shutil.copy(STANDINS / name, d / name)
        (d / name).chmod(0o755)
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    return d


def _no_key_anywhere(run_dir: Path):
    for p in run_dir.rglob("*"):
        if p.is_file() and p.stat().st_size < 5_000_000:
            assert KEY.encode() not in p.read_bytes(), f"API key leaked into {p}"


def test_claude_end_to_end_with_proxy_and_marked_submission(compose_cfg, tmp_path, standin_bin):
    cfg = compose_cfg("config", ["task=optimizer", "scale=ci", "agent=claude", f"agent.executable={standin_bin}/claude",
                                 "agent.network=open", "agent.extra_args=[--append-system-prompt,MODE:edit]"])
    run_dir = tmp_path / "run_claude"
    pipeline.run(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded"
    assert r["cost"] == {"usd": 0.42, "input_tokens": 6000, "output_tokens": 800}   # 5000 + 1000 cache reads
    assert r["trajectory"]["proxy_calls"] == 1 and r["trajectory"]["first_valid_proxy"]["proxy_score"] is not None
    patch = (run_dir / "submission.patch").read_text()
    assert "LR = 4e-3" in patch and "AFTER_MARK" not in patch          # the marked snapshot, not the final files
    assert json.loads((run_dir / "submission.json").read_text())["source"] == "marked"
    events = [json.loads(x) for x in (run_dir / "transcript.jsonl").read_text().splitlines()]
    assert events[0]["type"] == "system" and events[-1]["type"] == "result"
    traj = [json.loads(x) for x in (run_dir / "trajectory.jsonl").read_text().splitlines()]
    assert [t["event"] for t in traj] == ["proxy", "submit"] and traj[0]["proxy_metric"] > 1.0
    assert "ai4ai-proxy" in (run_dir / "instructions.md").read_text()
    _no_key_anywhere(run_dir)


def test_codex_end_to_end_cost_from_tokens(compose_cfg, tmp_path, standin_bin):
    cfg = compose_cfg("config", ["task=optimizer", "scale=ci", "agent=codex", f"agent.executable={standin_bin}/codex",
                                 "agent.network=open", "submission=final"])
    run_dir = tmp_path / "run_codex"
    pipeline.run(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded" and "LR = 5e-3" in (run_dir / "submission.patch").read_text()
    assert r["cost"]["input_tokens"] == 200000 and r["cost"]["usd"] == pytest.approx(0.35)
    assert r["trajectory"]["proxy_calls"] == 0
    _no_key_anywhere(run_dir)


def test_missing_cli_or_key_fails_before_anything(compose_cfg, tmp_path, standin_bin, monkeypatch, capsys):
    cfg = compose_cfg("config", ["task=optimizer", "scale=ci", "agent=claude", "agent.executable=no-such-claude"])
    with pytest.raises(SystemExit):
        pipeline.run(cfg, tmp_path / "r1")
    assert "npm install -g @anthropic-ai/claude-code" in capsys.readouterr().out
    monkeypatch.delenv("OPENAI_API_KEY")
    cfg = compose_cfg("config", ["task=optimizer", "scale=ci", "agent=codex", f"agent.executable={standin_bin}/codex"])
    with pytest.raises(SystemExit):
        pipeline.run(cfg, tmp_path / "r2")
    assert "OPENAI_API_KEY" in capsys.readouterr().out
    assert not (tmp_path / "r1").exists() and not (tmp_path / "r2").exists()


def _ctx(tmp_path, cfg, window_s):
    ws = tmp_path / "ws"
    shutil.copytree(PROJECT_ROOT / "repos_frozen" / "optimizer", ws)
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True)
    from ai4ai.proxy import client_bin
    backend = "bwrap" if bwrap_available() else "none"
    sb = Sandbox(backend=backend, mounts=[Mount("/workspace", ws, True), Mount("/home/agent", home, True),
                                          Mount("/opt/ai4ai/ai4ai_kernels", KERNELS_DIR, False),
                                          Mount("/opt/ai4ai/bin", client_bin(tmp_path), False)])
    env = sb.base_env("/home/agent")
    env["PATH"] = sb.path("/opt/ai4ai/bin") + ":" + env["PATH"]
    sb.env = env
    return AgentContext(workspace=ws, instructions="do things", window_s=window_s, sandbox=sb,
                        log_path=tmp_path / "agent.log", config=cfg, pristine=ws)


@pytest.mark.parametrize("kind", ["claude", "codex"])
def test_deadline_ends_the_cli_and_its_setsid_child(tmp_path, standin_bin, kind):
    mod = {"claude": claude_agent, "codex": codex_agent}[kind]
    cfg = {"kind": kind, "executable": str(standin_bin / kind), "network": "open", "api_key_env":
           "ANTHROPIC_API_KEY" if kind == "claude" else "OPENAI_API_KEY",
           "extra_args": ["--append-system-prompt", "MODE:hang"] if kind == "claude" else ["-c", "standin_mode=hang"]}
    t0 = time.monotonic()
    out = mod.run(_ctx(tmp_path, cfg, window_s=3))
    assert out.timed_out and time.monotonic() - t0 < 30
    time.sleep(0.5)
    left = [p for p in psutil.process_iter(["cmdline"]) if any(f"standin_{kind}_child" in (c or "")
                                                               for c in (p.info["cmdline"] or []))]
    assert left == []


def test_spending_cap_ends_the_agent(tmp_path, standin_bin):
    cfg = {"kind": "claude", "executable": str(standin_bin / "claude"), "network": "open",
           "api_key_env": "ANTHROPIC_API_KEY", "max_usd": 1.2, "extra_args": ["--append-system-prompt", "MODE:spend"]}
    t0 = time.monotonic()
    out = claude_agent.run(_ctx(tmp_path, cfg, window_s=60))
    assert out.usage["capped"] and out.usage["usd"] == pytest.approx(1.5) and not out.timed_out
    assert time.monotonic() - t0 < 30


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


def test_trajectory_summary(tmp_path):
    p = tmp_path / "trajectory.jsonl"
    rows = [{"event": "proxy", "call": 1, "proxy_score": None, "status": "invalid"},
            {"event": "proxy", "call": 2, "proxy_score": 0.2, "elapsed_s": 5},
            {"event": "submit"},
            {"event": "proxy", "call": 3, "proxy_score": 0.4, "elapsed_s": 9},
            {"event": "proxy", "call": 4, "proxy_score": 0.3, "elapsed_s": 12}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    t = trajectory_summary(p)
    assert t["proxy_calls"] == 4 and t["first_valid_proxy"]["call"] == 2
    assert t["best_proxy"]["call"] == 3 and t["final_proxy"]["call"] == 4 and t["regressed_after_best"] is True


@pytest.mark.skipif(not bwrap_available(), reason="api_only needs the bwrap network namespace")
def test_api_only_network_reaches_allowlisted_hosts_only(tmp_path, standin_bin):
    """A local stand-in host plays the API; nothing outside this machine is contacted."""
    from ai4ai.agents.cli import run_cli
    servers = []
    for _ in range(2):
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(4)
        servers.append(srv)

    def echo(srv):
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            c.sendall(b"API-HELLO:" + c.recv(100))
            c.close()
    for s in servers:
        threading.Thread(target=echo, args=(s,), daemon=True).start()
    ok_port, bad_port = (s.getsockname()[1] for s in servers)
    probe = tmp_path / "bin" / "probe"
    probe.write_text(f"""#!/usr/bin/env python3
import os, socket
host, port = os.environ['HTTPS_PROXY'].rsplit('/', 1)[1].split(':')
for target in ['127.0.0.1:{ok_port}', '127.0.0.1:{bad_port}']:
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(('CONNECT %s HTTP/1.1\\r\\nHost: %s\\r\\n\\r\\n' % (target, target)).encode())
    head = s.recv(200).decode()
    if ' 200 ' in head:
        s.sendall(b'ping'); print('TUNNEL', target, s.recv(100).decode(), flush=True)
    else:
        print('REFUSED', target, head.split(chr(13))[0], flush=True)
print('IFACES', sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]), flush=True)
""")
    probe.chmod(0o755)
    cfg = {"kind": "probe", "network": "api_only", "api_key_env": "ANTHROPIC_API_KEY",
           "api_hosts": [f"127.0.0.1:{ok_port}"]}
    ctx = _ctx(tmp_path, cfg, window_s=30)
    out = run_cli(ctx, [str(probe)], lambda e, m: None, probe, {})
    log = ctx.log_path.read_text()
    for s in servers:
        s.close()
    assert f"TUNNEL 127.0.0.1:{ok_port} API-HELLO:ping" in log, log
    assert f"REFUSED 127.0.0.1:{bad_port} HTTP/1.1 403 Forbidden" in log, log
    assert "IFACES ['lo']" in log
    assert out.usage["egress"] == [{"host": "127.0.0.1", "port": ok_port, "allowed": True},
                                   {"host": "127.0.0.1", "port": bad_port, "allowed": False}]


@pytest.mark.slow
@pytest.mark.parametrize("package,cmd,flags", [
    ("@anthropic-ai/claude-code", ["claude", "--help"],
     ["-p", "--output-format", "--verbose", "--dangerously-skip-permissions", "--no-session-persistence",
      "--model", "--effort", "--max-budget-usd"]),
    ("@openai/codex", ["codex", "exec", "--help"],
     ["--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check", "--ephemeral", "-C", "-m", "-c"]),
])
def test_real_cli_accepts_the_adapter_flags(tmp_path, package, cmd, flags):
    """Installs the real CLI from npm (slow; skipped without network) and checks its --help."""
    import subprocess
    if shutil.which("npm") is None:
        pytest.skip("npm missing")
    r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", str(tmp_path), package],
                       capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.skip(f"npm install failed (no network?): {r.stderr[-300:]}")
    exe = tmp_path / "node_modules" / ".bin" / cmd[0]
    help_text = subprocess.run([str(exe), *cmd[1:]], capture_output=True, text=True, timeout=120).stdout
    import re
    for f in flags:
        assert re.search(rf"(^|[\s,]){re.escape(f)}([\s,<=]|$)", help_text, re.M), f"{cmd[0]} does not document {f}"
