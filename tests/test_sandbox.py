"""The sandbox: no project root, no hidden grader, no network, writes only where allowed, caps end trees."""

import os
import sys
import time
import uuid

import psutil
import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.sandbox.box import KERNELS_DIR, Mount, Sandbox, bwrap_available
from tests.requirements import missing

from .conftest import needs_bwrap


def _sandbox(tmp_path, backend="bwrap"):
    ws = tmp_path / "ws"
    home = tmp_path / "home"
    (home / "tmp").mkdir(parents=True)
    ws.mkdir(exist_ok=True)
    sb = Sandbox(
        backend=backend,
        mounts=[
            Mount("/workspace", ws, True),
            Mount("/home/agent", home, True),
            Mount("/opt/ai4ai/ai4ai_kernels", KERNELS_DIR, False),
        ],
    )
    sb.env = sb.base_env("/home/agent")
    return sb, ws


def _survivors(marker: str) -> list:
    """Processes whose command line carries `marker` (none may outlive a phase)."""
    return [p for p in psutil.process_iter(["cmdline"]) if any(marker in (c or "") for c in (p.info["cmdline"] or []))]


def _run(sb, tmp_path, script, timeout=60):
    log = tmp_path / f"log_{uuid.uuid4().hex}.txt"
    out = sb.run([sys.executable, "-c", script], "/workspace", timeout, log, grace_s=1)
    return out, log.read_text()


@needs_bwrap
def test_agent_cannot_read_the_hidden_grader_or_the_project(tmp_path):
    sb, _ = _sandbox(tmp_path)
    secrets = PROJECT_ROOT / "grader_hidden" / "optimizer" / "secrets.yaml"
    script = f"""
import os, importlib.util
for p in [{str(secrets)!r}, {str(PROJECT_ROOT / "README.md")!r}]:
    print(p, 'EXISTS' if os.path.exists(p) else 'absent')
root = {str(PROJECT_ROOT.resolve())!r}
print('root holds:', sorted(os.listdir(root)) if os.path.isdir(root) else None)
print('ai4ai importable:', importlib.util.find_spec('ai4ai') is not None)
import torch, ai4ai_kernels
ce = ai4ai_kernels.cross_entropy(torch.zeros(2, 8), torch.tensor([1, 3]))
print('kernels importable:', abs(ce.item() - torch.log(torch.tensor(8.0)).item()) < 1e-5)
found = []
for root, dirs, files in os.walk('/', topdown=True):
    dirs[:] = [d for d in dirs if root != '/' or d not in ('proc', 'sys', 'dev')]
    if 'secrets.yaml' in files or 'grader_hidden' in dirs:
        found.append(root)
print('walk found:', found)
"""
    out, log = _run(sb, tmp_path, script)
    assert out.returncode == 0, log
    assert "EXISTS" not in log
    # nothing at the project's path, a venv inside the checkout included (bound at sandbox.VENV_INSIDE)
    assert "root holds: None" in log, log
    assert "ai4ai importable: False" in log
    assert "kernels importable: True" in log
    assert "walk found: []" in log


@needs_bwrap
def test_only_loopback_interface(tmp_path):
    sb, _ = _sandbox(tmp_path)
    script = "print('IFACES', sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))"
    out, log = _run(sb, tmp_path, script)
    assert out.returncode == 0, log
    assert "IFACES ['lo']" in log


@needs_bwrap
def test_writes_outside_the_writable_mounts_fail(tmp_path):
    sb, ws = _sandbox(tmp_path)
    victim = tmp_path / "outside.txt"
    script = f"""
import os
for p in ['/workspace/ok.txt', {str(victim)!r}, '/usr/planted.py', '/opt/ai4ai/ai4ai_kernels/planted.py',
          {str(PROJECT_ROOT / "planted.txt")!r}]:
    try:
        open(p, 'w').write('x'); print('WROTE', p)
    except OSError as e:
        print('DENIED', p, type(e).__name__)
"""
    out, log = _run(sb, tmp_path, script)
    assert out.returncode == 0, log
    assert log.count("WROTE") == 1 and "WROTE /workspace/ok.txt" in log
    assert (ws / "ok.txt").exists() and not victim.exists()
    assert not (PROJECT_ROOT / "planted.txt").exists() and not (KERNELS_DIR / "planted.py").exists()


@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_timeout_ends_the_whole_tree_including_escapees(tmp_path, backend):
    if backend == "bwrap" and not bwrap_available():
        missing("sandbox", "bubblewrap unavailable")
    sb, _ = _sandbox(tmp_path, backend)
    marker = f"ai4ai_escape_{uuid.uuid4().hex[:8]}"
    # a setsid daemon, a double fork and a SIGTERM-ignoring parent
    script = f"""
import os, signal, subprocess, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen(['sh', '-c', 'exec -a {marker} sleep 300'], start_new_session=True)
if os.fork() == 0:
    if os.fork() == 0:
        os.setsid(); os.execvp('sh', ['sh', '-c', 'exec -a {marker} sleep 301'])
    os._exit(0)
print('started', flush=True)
time.sleep(300)
"""
    t0 = time.monotonic()
    out, log = _run(sb, tmp_path, script, timeout=3)
    assert out.timed_out and "started" in log
    assert time.monotonic() - t0 < 30
    time.sleep(0.5)
    left = _survivors(marker)
    assert left == [], f"processes outlived the cap: {left}"


@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_processes_left_after_a_normal_exit_are_ended(tmp_path, backend):
    if backend == "bwrap" and not bwrap_available():
        missing("sandbox", "bubblewrap unavailable")
    sb, _ = _sandbox(tmp_path, backend)
    marker = f"ai4ai_daemon_{uuid.uuid4().hex[:8]}"
    script = f"import subprocess; subprocess.Popen(['sh', '-c', 'exec -a {marker} sleep 300'], start_new_session=True)"
    out, _ = _run(sb, tmp_path, script, timeout=30)
    assert out.returncode == 0 and not out.timed_out
    time.sleep(0.5)
    left = _survivors(marker)
    assert left == []


def test_sandbox_refuses_to_mount_the_project_root(tmp_path):
    from ai4ai.sandbox.box import SandboxError

    sb = Sandbox(backend="bwrap", mounts=[Mount("/workspace", PROJECT_ROOT, True)])
    with pytest.raises(SandboxError, match="project root"):
        sb.argv(["true"], "/workspace")


@pytest.mark.parametrize("backend", ["bwrap", "none"])
def test_sigterm_grace_lets_a_run_save_before_the_kill(tmp_path, backend):
    """At the cap the command gets SIGTERM first and may write its last checkpoint in the grace period."""
    if backend == "bwrap" and not bwrap_available():
        missing("sandbox", "bubblewrap unavailable")
    sb, ws = _sandbox(tmp_path, backend)
    script = f"""
import signal, sys, time
def on_term(*_):
    open({sb.path("/workspace")!r} + '/saved_on_term', 'w').write('ok'); sys.exit(0)
signal.signal(signal.SIGTERM, on_term)
print('ready', flush=True)
time.sleep(300)
"""
    log = tmp_path / "term.log"
    out = sb.run([sys.executable, "-c", script], "/workspace", 3, log, grace_s=5)
    assert out.timed_out and "ready" in log.read_text()
    assert (ws / "saved_on_term").read_text() == "ok"


@pytest.mark.parametrize("asked, said", [("auto", True), ("none", False)])
def test_a_run_without_a_working_bubblewrap_says_so_at_its_start(
    asked, said, tmp_path, monkeypatch, capsys, compose_cfg
):
    """A bwrap on PATH that cannot make a namespace (as on a host without user namespaces): with
    sandbox=auto the run's context says, in one line at its start, that it is unsandboxed and what
    fixes it; sandbox=none was asked for, and says nothing."""
    from ai4ai.grading.context import UNSANDBOXED, context

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    ctx = context(compose_cfg("grade", ["task=optimizer", "scale=ci", f"sandbox={asked}"]), tmp_path / "run")
    assert ctx.backend == "none"
    err = capsys.readouterr()
    lines = [ln for ln in (err.out + err.err).splitlines() if "UNSANDBOXED" in ln]
    assert len(lines) == (1 if said else 0), lines
    if said:
        assert UNSANDBOXED in lines[0] and "apt-get install -y bubblewrap" in lines[0]
