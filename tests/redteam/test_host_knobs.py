"""Route: host kernel knobs from inside a sandbox. A process of either phase (agent, training) must
not run as host uid 0, must hold no capability, and must find every writable kernel interface
under /proc refused: `core_pattern` names a program the kernel runs as root on the host at the
next crash anywhere on the machine, so one write there is root on the host."""

import os

import psutil

from .conftest import agent_sandbox, needs_bwrap, run_py, training_sandbox

PROBE = r"""
import glob, os, time
print('IDS', os.getresuid(), os.getresgid(), os.getgroups())
print('CAPS', [l.split()[1] for l in open('/proc/self/status') if l.startswith(('CapEff', 'CapPrm', 'CapAmb'))])
targets = ['/proc/sys/kernel/core_pattern', '/proc/sys/kernel/hostname', '/proc/sys/kernel/modprobe',
           '/proc/sys/vm/drop_caches', '/proc/sysrq-trigger'] + sorted(glob.glob('/proc/irq/*'))[:3] \
          + sorted(glob.glob('/proc/bus/*'))[:3]
for p in targets:
    if not os.path.exists(p):
        print('ABSENT', p)
        continue
    if os.path.isdir(p):
        try:
            open(os.path.join(p, 'planted'), 'w'); print('WROTE', p)
        except OSError as e:
            print('REFUSED', p, type(e).__name__)
        continue
    try:
        open(p, 'r+b'); print('OPENED_FOR_WRITE', p)
    except OSError as e:
        print('REFUSED', p, type(e).__name__)
try:
    import socket; socket.sethostname('pwned'); print('SETHOSTNAME ok')
except OSError as e:
    print('SETHOSTNAME refused', type(e).__name__)
open(os.environ['HOME'] + '/pid', 'w').write(str(os.getpid()))
print('ALIVE', flush=True)
time.sleep(1.5)
"""


def _check(log: str) -> None:
    assert "ALIVE" in log, log
    ids = next(ln for ln in log.splitlines() if ln.startswith("IDS"))
    assert "(0, 0, 0)" not in ids.split(")")[0] + ")", ids
    assert "CAPS ['0000000000000000', '0000000000000000', '0000000000000000']" in log, log
    assert "OPENED_FOR_WRITE" not in log and "WROTE" not in log, log
    assert "SETHOSTNAME refused" in log, log
    assert log.count("REFUSED") >= 4, log  # core_pattern, hostname, modprobe, drop_caches at least


def _uids_seen_from_host(sb, tmp_path, cwd):
    """Run the probe and read, from the host, the real uid of every process of the phase."""
    seen = set()
    stop = False
    import threading

    def watch():
        me = psutil.Process()
        while not stop:
            for c in me.children(recursive=True):
                try:
                    cmd = " ".join(c.cmdline())
                    # the probe itself, once exec'd (the launcher that drops root carries it as arguments)
                    if "print('ALIVE'" in cmd and "could not drop root" not in cmd:
                        seen.add(c.uids().real)
                except psutil.Error:
                    pass

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    out, log = run_py(sb, tmp_path, PROBE, cwd)
    stop = True
    t.join(timeout=2)
    return out, log, seen


@needs_bwrap
def test_agent_sandbox_touches_no_host_knob(tmp_path):
    sb, _ = agent_sandbox(tmp_path)
    out, log, uids = _uids_seen_from_host(sb, tmp_path, "/workspace")
    _check(log)
    if os.geteuid() == 0:
        assert uids and 0 not in uids, uids


@needs_bwrap
def test_training_sandbox_touches_no_host_knob(tmp_path, task):
    sb, _, _ = training_sandbox(tmp_path, task)
    out, log, uids = _uids_seen_from_host(sb, tmp_path, "/repo")
    _check(log)
    if os.geteuid() == 0:
        assert uids and 0 not in uids, uids
