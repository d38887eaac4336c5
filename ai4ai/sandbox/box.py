"""Run a phase (agent, training) in a sandbox under a wall-clock cap.

Backends: `bwrap` (bubblewrap: read-only system, only the named folders writable, private
HOME/TMPDIR/caches, no network unless asked, own PID namespace) and `none` (a plain
subprocess, marked in every result). No sandbox mounts the project root: what a phase needs
of the project (the kernels package) is bound read-only on its own.

Inside bwrap, folders appear at neutral paths (/workspace, /repo, /out, ...); `Sandbox.host`
maps such a path back to the host for the `none` backend, where no remapping is possible.

One file of over 500 lines: the mounts a phase gets and the loop that caps it (the cgroup it
starts in, the CPU and wall caps, the end of the tree) are one boundary, the sandbox's, and its
invariants are checked by reading them side by side.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import site
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ai4ai import PROJECT_ROOT
from ai4ai.core.layout import AGENT_HOME, HARNESS_BIN, KERNELS, KERNELS_PARENT, SOCKET_DIR, WORKSPACE
from ai4ai.sandbox import cgroup, package_data
from ai4ai.sandbox.tree import (
    MAX_LOG_BYTES,
    TreeCpu,
    end_all,
    host_busy_times,
    host_cpu_times,
    idle_cores_since,
    others_cores_since,
    pump,
    set_subreaper,
    signal_tree,
)
from ai4ai.sandbox.walk import UNBOUNDED, walk

KERNELS_DIR = PROJECT_ROOT / "ai4ai_kernels"
GRACE_S = 10.0
# Processes one phase may hold at once (its whole tree, counted from the host). RLIMIT_NPROC is
# not used: it counts every process of the user (and nothing at all for root), not the phase's.
MAX_PROCS = int(os.environ.get("AI4AI_MAX_PROCS", "1024"))
PROC_CHECK_S = 0.25
WATCH_S = 1.0

# Joins the run's cgroups (each cgroup.procs named, comma-separated; "-" for none) and applies
# RLIMIT_AS to itself, then execs the phase (bwrap or the command): every process of the phase
# inherits both, and none of it ever runs outside the cgroups. A trampoline rather than
# preexec_fn, which is unsafe in a threaded harness.
_LIMITER = (
    "import os, resource, sys\n"
    "m = int(sys.argv[1])\n"
    "for f in sys.argv[2].split(',') if sys.argv[2] != '-' else []:\n"
    "    with open(f, 'w') as fh:\n"
    "        fh.write(str(os.getpid()))\n"
    "if m > 0:\n"
    "    resource.setrlimit(resource.RLIMIT_AS, (m, m))\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)


# Under bwrap as root, the command is started through this trampoline: bwrap (privileged, no user
# namespace) keeps only CAP_SETUID/CAP_SETGID for it, and it drops to the unprivileged sandbox
# user before exec. setresuid away from 0 clears every permitted and effective capability, and
# bwrap sets no_new_privs, so no setuid binary or file capability can raise them again. The
# alternative, a user namespace mapped `0 0 1`, leaves the phase as host uid 0: it could open
# /proc/sys/kernel/core_pattern for writing, and the kernel runs the program named there as root.
_DROP = (
    "import os, sys\n"
    "u, g = int(sys.argv[1]), int(sys.argv[2])\n"
    "os.setgroups([])\n"
    "os.setresgid(g, g, g)\n"
    "os.setresuid(u, u, u)\n"
    "if 0 in os.getresuid() or 0 in os.getresgid():\n"
    "    sys.exit('ai4ai sandbox: could not drop root')\n"
    "os.execvp(sys.argv[3], sys.argv[3:])\n"
)

# Writable kernel interfaces under a fresh /proc, bound read-only over it (each if present).
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")


def sandbox_user() -> tuple[int, int] | None:
    """(uid, gid) a phase runs as when the harness is root: AI4AI_SANDBOX_UID/GID, else `nobody`.

    None when the harness is not root: bwrap then maps the caller's own (unprivileged) uid."""
    if os.geteuid() != 0:
        return None
    if os.environ.get("AI4AI_SANDBOX_UID"):
        uid = int(os.environ["AI4AI_SANDBOX_UID"])
        return uid, int(os.environ.get("AI4AI_SANDBOX_GID", uid))
    try:
        pw = pwd.getpwnam("nobody")
        uid, gid = pw.pw_uid, pw.pw_gid
    except KeyError:
        uid, gid = 65534, 65534
    if uid == 0 or gid == 0:
        raise SandboxError("the sandbox user maps to uid or gid 0; set AI4AI_SANDBOX_UID to an unprivileged id")
    return uid, gid


def give_to_sandbox_user(path: Path) -> None:
    """Make a writable mount the sandbox user's own (the whole tree: a workspace is a repo copy)."""
    user = sandbox_user()
    if user is None:
        return
    uid, gid = user
    os.chown(path, uid, gid, follow_symlinks=False)
    for _, fd, entries in walk(path, max_depth=UNBOUNDED, max_entries=UNBOUNDED):  # iterative: any depth
        for e in entries:
            os.chown(e.name, uid, gid, dir_fd=fd, follow_symlinks=False)


def default_memory_limit() -> int:
    """Address space per process of a CPU training phase: AI4AI_MAX_MEMORY_BYTES, else
    the larger of 80% of physical memory and 8 GiB (generous: it stops runaway allocation)."""
    env = os.environ.get("AI4AI_MAX_MEMORY_BYTES")
    if env:
        return int(env)
    return max(int(psutil.virtual_memory().total * 0.8), 8 << 30)


class SandboxError(RuntimeError):
    """The sandbox could not be set up (a harness fault, not the submission's)."""


@dataclass(frozen=True)
class Mount:
    inside: str
    host: Path
    writable: bool = False


@dataclass(frozen=True)
class Outcome:
    returncode: int | None
    timed_out: bool  # ended by the harness: wall clock, CPU cap or a stop request
    wall_s: float
    limit: str | None = None  # set when the phase was ended for breaking a sandbox limit
    cut: str | None = None  # wall | cpu | stop: what ended it, when the harness did
    cpu_s: float = 0.0  # user + system CPU time of the whole tree
    host_idle_cores: float | None = None  # the host's idle CPUs, averaged over the phase
    run_delay_s: float = 0.0  # time its threads waited, runnable, for a CPU (load evidence)
    lowered_priority: bool = False  # it niced itself or chose SCHED_BATCH/SCHED_IDLE
    cpu_accounting: str = "process-tree"  # cgroup-v2 | cgroup-v1 | process-tree: what cpu_s was read from
    cgroup_limits: dict | None = None  # limits the run's cgroup held (memory_bytes, tasks); None: no cgroup
    others_cores: float | None = None  # CPUs the rest of the host kept busy, averaged over the phase
    affinity_cpus: int | None = None  # fewest CPUs its runnable threads' affinities allowed together
    tree_cpu_s: float | None = None  # the process tree's own figure, where a cgroup gave cpu_s


def bwrap_available() -> bool:
    exe = shutil.which("bwrap")
    if not exe:
        return False
    try:
        r = subprocess.run([exe, "--unshare-all", "--ro-bind", "/", "/", "true"], capture_output=True, timeout=20)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def resolve_backend(name: str) -> str:
    if name == "auto":
        return "bwrap" if bwrap_available() else "none"
    if name == "bwrap" and not bwrap_available():
        raise SandboxError(
            "sandbox=bwrap but bubblewrap is missing or cannot create namespaces here; "
            "install it (apt-get install bubblewrap) or pass sandbox=none (results are marked)"
        )
    if name not in ("bwrap", "none"):
        raise SandboxError(f"unknown sandbox backend {name!r}; use auto, bwrap or none")
    return name


def _under(p: Path, root: Path) -> bool:
    try:
        p.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _python_dirs() -> list[Path]:
    """Folders the interpreter and its installed packages live in, never the project root."""
    dirs = {Path(sys.base_prefix), Path(sys.prefix)}
    for d in site.getsitepackages() + [site.getusersitepackages()]:
        dirs.add(Path(d))
    out = []
    for d in sorted(dirs):
        if not d.exists():
            continue
        if _under(PROJECT_ROOT, d) and d.resolve() != PROJECT_ROOT.resolve():
            # A prefix that contains the project (unusual): bind only its lib/ and bin/.
            out += [x for x in (d / "lib", d / "bin") if x.exists() and not _under(PROJECT_ROOT, x)]
            continue
        out.append(d)
    return out


# A virtual environment inside the project's checkout (`python -m venv .venv`, the common layout) is
# bound here, not at its host path: its host path would make the checkout's own folder appear in
# the sandbox, which tells a phase where the project lives. Python finds a venv from the path it
# was started by (pyvenv.cfg beside or above it), so the moved venv works as it is.
VENV_INSIDE = "/opt/ai4ai/venv"


def _moved_venv() -> str | None:
    """The host path of the interpreter's venv when it lies inside the project (bound at VENV_INSIDE)."""
    prefix = Path(sys.prefix)
    if prefix != Path(sys.base_prefix) and _under(prefix, PROJECT_ROOT) and prefix.resolve() != PROJECT_ROOT.resolve():
        return str(prefix)
    return None


def inside_path(host: str) -> str:
    """Where a host path of the interpreter's appears inside bwrap (itself, unless the venv moved)."""
    venv = _moved_venv()
    if venv and (host == venv or host.startswith(venv + "/")):
        return VENV_INSIDE + host[len(venv) :]
    return host


def _inside_search_path(value: str) -> str:
    """A PATH as a bwrap phase should see it: the interpreter's folders where they are bound, and no
    folder of the project (an activated venv inside the checkout puts its host path there)."""
    out = []
    for d in value.split(os.pathsep):
        inside = inside_path(d)
        if not d or (inside == d and _under(Path(d), PROJECT_ROOT)) or inside in out:
            continue
        out.append(inside)
    return os.pathsep.join(out)


@dataclass
class Sandbox:
    backend: str  # bwrap | none
    mounts: list[Mount]
    network: bool = False
    env: dict[str, str] = field(default_factory=dict)
    gpu: bool = False
    max_memory_bytes: int | None = None  # RLIMIT_AS of every process of the phase; None: no limit
    max_procs: int | None = MAX_PROCS  # the phase is ended when its tree holds more processes
    extend_s: Callable[[], float] | None = None  # seconds added to the wall-clock limit while it runs
    hide_package_data: bool = True  # empty the data folders that installed packages ship
    watch: Callable[[], str | None] | None = None  # polled each second: a message ends the phase (a limit)
    max_log_bytes: int = MAX_LOG_BYTES  # the log is truncated past this, with a marker
    cgroup: bool = True  # CPU time, memory and tasks held in a cgroup of the run's own (where one can be made)

    def host(self, inside: str) -> Path:
        """The host path behind an inside path (for the `none` backend and for the harness)."""
        for m in sorted(self.mounts, key=lambda m: -len(m.inside)):
            if inside == m.inside or inside.startswith(m.inside.rstrip("/") + "/"):
                return m.host / inside[len(m.inside) :].lstrip("/")
        raise SandboxError(f"{inside} is not inside any mount")

    def path(self, inside: str) -> str:
        """The path a command should use: the inside path under bwrap, the host path otherwise."""
        return inside if self.backend == "bwrap" else str(self.host(inside))

    def base_env(self, home_inside: str) -> dict[str, str]:
        home = self.path(home_inside)
        env = {
            # the harness's interpreter first, so `python` in a phase has the same packages
            "PATH": (_inside_search_path if self.backend == "bwrap" else str)(
                os.path.dirname(sys.executable) + ":" + os.environ.get("PATH", "/usr/bin:/bin")
            ),
            "HOME": home,
            "TMPDIR": self.path(home_inside + "/tmp") if self.backend == "none" else "/tmp",
            "XDG_CACHE_HOME": f"{home}/.cache",
            "TRITON_CACHE_DIR": f"{home}/.cache/triton",
            "TORCHINDUCTOR_CACHE_DIR": f"{home}/.cache/inductor",
            "HF_HOME": f"{home}/.cache/hf",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONNOUSERSITE": "1",
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
        }
        if self.backend == "bwrap" and any(m.inside == KERNELS for m in self.mounts):
            env["PYTHONPATH"] = KERNELS_PARENT  # the `none` backend finds the installed package
        return env

    def argv(self, command: list[str], cwd_inside: str) -> list[str]:
        if self.backend == "none":
            return command
        # The environment is passed to bwrap itself (never on its command line, where secrets
        # such as API keys would show in the process list); bwrap hands it to the command.
        # --cap-drop ALL: when the harness runs as root, bwrap otherwise leaves the command every
        # capability in its namespace, enough to remount the read-only binds read-write.
        user = sandbox_user()
        if user is None:  # unprivileged: bwrap maps the caller's own uid in a user namespace
            a = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session"]
            if self.network:
                a.append("--share-net")
        else:  # root: no user namespace (it would keep host uid 0); see _DROP
            a = [
                "bwrap",
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-uts",
                "--unshare-cgroup-try",
                "--die-with-parent",
                "--new-session",
            ]
            if not self.network:
                a.append("--unshare-net")
        # --cap-drop ALL: as root, bwrap otherwise leaves the command every capability, enough to
        # remount the read-only binds read-write; the trampoline needs only setuid/setgid to drop root.
        a += ["--cap-drop", "ALL"]
        if user is not None:
            a += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        for sysdir in ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"):
            if os.path.exists(sysdir):
                a += ["--ro-bind", sysdir, sysdir]
        # the private /tmp first: an interpreter or venv that lives under /tmp is bound on top of it
        a += ["--proc", "/proc"]
        for knob in PROC_READ_ONLY:
            a += ["--ro-bind-try", knob, knob]
        a += ["--dev", "/dev", "--perms", "1777", "--tmpfs", "/tmp"]
        binds = [(str(d), inside_path(str(d)), False) for d in _python_dirs()]
        # datasets shipped inside installed packages are data outside every budget: hidden
        hide = package_data.bwrap_args(package_data.hidden_paths(), inside_path) if self.hide_package_data else []
        for m in self.mounts:
            if _under(PROJECT_ROOT, m.host) and not m.host.resolve() == KERNELS_DIR.resolve():
                raise SandboxError(f"refusing to mount {m.host}: it contains the project root")
            binds.append((str(m.host), m.inside, m.writable))
        # Folders bwrap makes on the way to a mount point copy the host's modes (/root is 0700): made
        # 0755 here first, or the unprivileged sandbox user could not reach the interpreter under it.
        bound = {"/tmp", "/proc", "/dev", "/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc"} | {b[1] for b in binds}
        made = {"/"}
        for _, inside, _ in binds:
            for parent in map(str, reversed(Path(inside).parents)):
                # the private /tmp is empty: a folder on the way under it (a venv in a checkout
                # under /tmp) is made here too, or bwrap would make it 0700 and the user stops there
                if parent in made or parent in bound or any(parent.startswith(b + "/") for b in bound - {"/tmp"}):
                    continue  # exists already, or comes with a bind
                a += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        for i, (host, inside, writable) in enumerate(binds):
            a += ["--bind" if writable else "--ro-bind", host, inside]
            if i == len(_python_dirs()) - 1:
                a += hide  # over the interpreter's folders, before the phase's own mounts
        if self.gpu:
            for dev in sorted(Path("/dev").glob("nvidia*")):
                a += ["--dev-bind", str(dev), str(dev)]
        a += ["--chdir", cwd_inside, "--"]
        if user is not None:
            a += [inside_path(sys.executable), "-I", "-S", "-c", _DROP, str(user[0]), str(user[1])]
        return a + [inside_path(command[0]), *command[1:]] if command else a

    def run(
        self,
        command: list[str],
        cwd_inside: str,
        timeout_s: float,
        log_path: Path,
        on_line: Callable[[str], None] | None = None,
        grace_s: float = GRACE_S,
        stop: threading.Event | None = None,
        cpu_limit_s: float | None = None,
    ) -> Outcome:
        """Run `command` until it exits, `timeout_s` passes, its tree has used `cpu_limit_s` CPU
        seconds or `stop` is set; then SIGTERM, SIGKILL after grace (no grace for the CPU cap, where
        a cgroup counts it).

        CPU time is read from a cgroup of the run's own where one can be made (sandbox.cgroup): every
        process of the run is in it from its first instruction, its usage counts the tasks no one
        waited for, and a final figure over `cpu_limit_s` marks the run cut by the CPU cap whatever
        the tree's own figures said. Elsewhere, from the process tree (`cpu_accounting` says which).

        Every process the phase started is ended when it returns, including ones that left
        the process group (setsid, double fork). Output goes to `log_path` line by line.
        """
        for m in self.mounts:
            if m.writable:
                m.host.mkdir(parents=True, exist_ok=True)
                if self.backend == "bwrap":
                    give_to_sandbox_user(m.host)
        env = dict(self.env)
        if self.backend == "none":
            cwd = self.host(cwd_inside)
        else:
            cwd = Path("/")
        set_subreaper()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.argv(command, cwd_inside)
        cg, _why = cgroup.create(cgroup.default_memory_max()) if self.cgroup else (None, "not asked")
        try:
            if self.max_memory_bytes or cg is not None:
                joins = ",".join(cg.procs_files) if cg is not None else "-"
                argv = [sys.executable, "-I", "-S", "-c", _LIMITER, str(int(self.max_memory_bytes or 0)), joins, *argv]
            return self._run(argv, cwd, env, log_path, on_line, grace_s, stop, cpu_limit_s, timeout_s, cg)
        finally:
            if cg is not None:
                cg.close()  # kills what is left of the run, removes its cgroups

    def _run(self, argv, cwd, env, log_path, on_line, grace_s, stop, cpu_limit_s, timeout_s, cg) -> Outcome:
        me = psutil.Process()
        before = {c.pid for c in me.children(recursive=True)}
        t0 = time.monotonic()
        host0, busy0 = host_cpu_times(), host_busy_times()
        limit, cut, rusage = None, None, None
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
            reader = threading.Thread(target=pump, args=(proc.stdout, log, on_line, self.max_log_bytes), daemon=True)
            reader.start()
            meter = TreeCpu(proc.pid)
            deadline = t0 + timeout_s
            next_check, next_watch, over = t0, t0 + WATCH_S, 0

            def reap(block: bool = False) -> bool:
                nonlocal rusage
                if proc.returncode is not None:
                    return True
                try:
                    pid, status, ru = os.wait4(proc.pid, 0 if block else os.WNOHANG)
                except ChildProcessError:
                    return True
                if pid == 0:
                    return False
                proc.returncode, rusage = os.waitstatus_to_exitcode(status), ru
                return True

            def spent() -> float:
                """CPU seconds of the run now: the cgroup's (exact), else the tree's sample."""
                cpu, n = meter.sample()
                return (cg.usage_s() if cg is not None else cpu), n

            while not reap():
                if time.monotonic() >= deadline + (self.extend_s() if self.extend_s else 0.0):
                    cut = "wall"
                    break
                if stop and stop.is_set():
                    cut = "stop"
                    break
                time.sleep(0.05)
                if time.monotonic() >= next_check:
                    next_check = time.monotonic() + PROC_CHECK_S
                    cpu, n = spent()
                    if self.max_procs and n > self.max_procs:
                        limit = f"more than {self.max_procs} processes at once"
                        break
                    # a tree's sample can count a reaped child twice: two in a row; the cgroup's cannot
                    over = over + 1 if cpu_limit_s is not None and cpu > cpu_limit_s else 0
                    if over >= (1 if cg is not None else 2):
                        cut = "cpu"
                        break
                if self.watch is not None and time.monotonic() >= next_watch:
                    next_watch = time.monotonic() + WATCH_S
                    limit = self.watch()
                    if limit:
                        break
            if cg is not None and cut == "cpu":
                # the budget is spent: no grace, in which a tree that catches SIGTERM would go on computing
                cg.kill()
            elif proc.returncode is None and limit is None:
                # bwrap dies on SIGTERM and takes the namespace with it, so under bwrap the grace
                # signal goes to the processes inside only; SIGKILL to everything follows the grace.
                signal_tree(proc.pid, signal.SIGTERM, include_root=self.backend != "bwrap")
                grace_end = time.monotonic() + grace_s
                while not reap() and time.monotonic() < grace_end:
                    cpu, _ = spent()
                    if cg is not None and cpu_limit_s is not None and cpu > cpu_limit_s:
                        break  # the CPU cap holds in the grace too
                    time.sleep(0.05)
            wall = time.monotonic() - t0
            if proc.returncode is None:
                meter.sample()
            end_all(proc.pid, me, before)
            if cg is not None:
                cg.kill()  # whatever of the run the tree no longer shows (daemons, orphans)
            deadline = time.monotonic() + 5
            while not reap() and time.monotonic() < deadline:
                time.sleep(0.05)
            reader.join(timeout=5)
        tree_cpu = round(meter.exact(rusage), 3)
        cpu_s = round(cg.usage_s(), 3) if cg is not None else tree_cpu
        if cg is not None and cpu_limit_s is not None and cpu_s > cpu_limit_s and cut in (None, "wall"):
            # the final figure is checked too: CPU spent between two polls, or in the grace, counts
            cut = "cpu"
        return Outcome(
            returncode=None if cut else proc.returncode,
            timed_out=cut is not None,
            wall_s=wall,
            limit=limit,
            cut=cut,
            cpu_s=cpu_s,
            host_idle_cores=idle_cores_since(host0),
            run_delay_s=round(meter.run_delay, 3),
            lowered_priority=meter.lowered,
            cpu_accounting=cg.accounting if cg is not None else "process-tree",
            cgroup_limits=dict(cg.limits) if cg is not None else None,
            others_cores=others_cores_since(busy0, cpu_s),
            affinity_cpus=meter.affinity_cpus,
            tree_cpu_s=tree_cpu if cg is not None else None,
        )


def agent_sandbox(
    backend: str,
    workspace: Path,
    home: Path,
    bin_dir: Path,
    sock_dir: Path,
    *,
    network: bool,
    threads: int,
    scale: str,
    window_s: float,
    deadline: float,
) -> Sandbox:
    """The agent phase's sandbox: the workspace and a private home writable, the proxy client and its
    socket, the kernels package; nothing else of the project. The one definition `pipeline.run` and
    the red-team suite both use."""
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    sb = Sandbox(
        backend=backend,
        network=network,
        mounts=[
            Mount(WORKSPACE, workspace, True),
            Mount(AGENT_HOME, home, True),
            Mount(KERNELS, KERNELS_DIR, False),
            Mount(HARNESS_BIN, bin_dir, False),
            Mount(SOCKET_DIR, sock_dir, True),
        ],
    )
    env = sb.base_env(AGENT_HOME)
    env.update(
        OMP_NUM_THREADS=str(threads),
        AI4AI_SCALE=scale,
        AI4AI_WINDOW_S=str(int(window_s)),
        AI4AI_DEADLINE=str(int(deadline)),
        AI4AI_PROXY_SOCKET=sb.path(SOCKET_DIR) + "/proxy.sock",
        PATH=sb.path(HARNESS_BIN) + ":" + env["PATH"],
    )
    sb.env = env
    return sb
