"""Shared machinery of the coding-agent CLIs (claude, codex): preflight, sandbox wiring, the API
gateway, transcript, usage and the spending cap. Not an agent kind itself.

Cost and tokens come from the gateway (ai4ai/window/gateway.py) only: it sits outside the sandbox and
reads the model API's own responses. The CLI's stdout is kept as a transcript and never parsed
for cost, since every process of the agent can write to it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from ai4ai import PROJECT_ROOT
from ai4ai.agents.base import AgentContext, AgentOutcome
from ai4ai.sandbox.box import Mount
from ai4ai.window.gateway import Gateway, GatewayError, Upstream

SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc")
DUMMY_KEY = "ai4ai-dummy-key-the-gateway-holds-the-real-one"
GATEWAY_INSIDE = "/run/ai4ai-api"
HOME_INSIDE = "/home/agent"
# What the CLIs write (home, sessions, shell snapshots) lives here, outside the run directory,
# and is deleted after the run; AI4AI_AGENT_SCRATCH moves it (e.g. to keep it for debugging).
SCRATCH_ROOT = os.environ.get("AI4AI_AGENT_SCRATCH") or tempfile.gettempdir()


class AgentSetupError(RuntimeError):
    """The agent cannot start here (missing CLI or key); raised before anything runs."""


@dataclass(frozen=True)
class Wiring:
    """What a CLI kind needs from the gateway: how the key is sent, and where the CLI is pointed."""

    auth: str  # x-api-key | bearer
    default_base_url: str
    env: Callable[[str], dict]  # gateway URL inside the sandbox -> the CLI's env
    argv: Callable[[str], list]  # gateway URL inside the sandbox -> the command
    prepare_home: Callable[[Path], None] = lambda home: None
    # An error message the CLI reported in one of its JSON events, or None. Only used to name what
    # failed in an `error` result; never for cost.
    cli_error: Callable[[dict], str | None] = lambda event: None


def resolve_executable(cfg: dict, install_hint: str) -> Path:
    exe = shutil.which(str(cfg.get("executable") or cfg["kind"]))
    if exe is None:
        raise AgentSetupError(
            f"agent={cfg['kind']}: the `{cfg.get('executable') or cfg['kind']}` CLI is not on PATH; "
            f"install it with `{install_hint}` (or `.ci/run`, which pins the tested versions) "
            "or set agent.executable=/path/to/it"
        )
    return Path(exe)


def require_key(cfg: dict) -> str:
    name = cfg.get("api_key_env")
    if not name or not os.environ.get(name):
        raise AgentSetupError(
            f"agent={cfg['kind']}: set the {name} environment variable (the harness's API gateway "
            "holds it; the agent's sandbox gets a dummy, and it is never written to the run directory)"
        )
    return name


def check_network(cfg: dict) -> str:
    network = str(cfg.get("network", "api_only"))
    if network not in ("api_only", "open"):
        raise AgentSetupError(f"agent.network={network!r}: use api_only (only the API gateway) or open (host network)")
    return network


def preflight(cfg: dict, install_hint: str, default_base_url: str) -> None:
    resolve_executable(cfg, install_hint)
    require_key(cfg)
    check_network(cfg)
    try:
        Upstream.parse(cfg.get("base_url") or default_base_url)
    except GatewayError as e:
        raise AgentSetupError(str(e))


def _bind_root(path: Path) -> Path:
    """The folder to bind so that an npm-installed CLI and its package tree resolve."""
    real = path.resolve()
    for parent in real.parents:
        if parent.name == "node_modules":
            return parent
    return real.parent


def tool_mounts(exe: Path) -> list[Mount]:
    roots = {_bind_root(exe), exe.parent}
    node = shutil.which("node")
    if node:
        roots.add(Path(node).resolve().parent)
    out = []
    for r in sorted(roots):
        if str(r).startswith(SYSTEM_DIRS) or str(r).startswith(str(PROJECT_ROOT)):
            continue
        out.append(Mount(str(r), r, False))
    return out


def _free_port() -> int:
    # Under api_only the sandbox has its own network namespace and any port works; under `open`
    # it shares the host's, so take one nobody holds.
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Transcript:
    """The CLI's stdout, line by line, for reading afterwards. Never parsed for cost (any process
    of the agent can write to it); only the CLI's own error messages are kept, to name a failure."""

    def __init__(self, path: Path, cli_error: Callable[[dict], str | None]):
        self.lines = 0
        self.errors: list[str] = []
        self._cli_error = cli_error
        self._file = open(path, "a")

    def on_line(self, line: str) -> None:
        self.lines += 1
        self._file.write(line + "\n")
        self._file.flush()
        if line.startswith("{"):
            try:
                msg = self._cli_error(json.loads(line))
            except (ValueError, AttributeError, TypeError):
                msg = None
            if msg:
                self.errors = (self.errors + [str(msg)[:300]])[-3:]

    def close(self) -> None:
        self._file.close()


def _api_error(kind: str, out, gw: dict, log_path: Path, cli_errors: list[str]) -> str | None:
    """Why the agent never worked, in its own words, or None when it made a successful model call."""
    if gw["ok_calls"] > 0:
        return None
    said = f"; {kind} said: {cli_errors[-1]}" if cli_errors else ""
    return _why(kind, out, gw, log_path) + said


def _why(kind: str, out, gw: dict, log_path: Path) -> str:
    if gw["refused"] and not gw["calls"]:
        why = "max_usd cap" if gw.get("capped") else "see the `refused` rows of api_calls.jsonl"
        return f"agent never reached its model API: the gateway refused every call ({why})"
    if gw["calls"]:
        return (
            f"agent never reached its model API: the upstream answered every call with an error "
            f"(last status {gw['last_status']}; see api_calls.jsonl)"
        )
    if gw["failures"]:
        return f"agent never reached its model API: upstream {gw['upstream']} unreachable"
    tail = ""
    try:
        tail = " ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])[-300:]
    except OSError:
        pass
    how = "timed out" if out.timed_out else f"exited {out.returncode}"
    return f"agent never reached its model API: {kind} {how} before its first call" + (f" ({tail})" if tail else "")


def run_cli(ctx: AgentContext, wiring: Wiring, exe: Path) -> AgentOutcome:
    cfg = ctx.config
    key = os.environ[require_key(cfg)]
    network = check_network(cfg)
    upstream = Upstream.parse(cfg.get("base_url") or wiring.default_base_url)
    run_dir = ctx.log_path.parent
    scratch = Path(tempfile.mkdtemp(prefix="ai4ai-agent-", dir=SCRATCH_ROOT))
    sock_dir, home = scratch / "api", scratch / "home"
    sock_dir.mkdir()
    (home / "tmp").mkdir(parents=True)
    for d in (scratch, sock_dir):
        d.chmod(0o755)  # the sandbox's unprivileged user must reach the socket
    wiring.prepare_home(home)
    # The sandbox's home moves out of the run directory: nothing the CLI writes there is copied.
    old_home = next((m.host for m in ctx.sandbox.mounts if m.inside == HOME_INSIDE), None)
    mounts = [m for m in ctx.sandbox.mounts if m.inside != HOME_INSIDE]
    mounts += [Mount(HOME_INSIDE, home, True), Mount(GATEWAY_INSIDE, sock_dir, False)] + tool_mounts(exe)
    sb = replace(ctx.sandbox, mounts=mounts, network=(network == "open"))
    port = _free_port()
    url = f"http://127.0.0.1:{port}{upstream.path}"
    env = {
        k: (str(home) + v[len(str(old_home)) :] if old_home and v.startswith(str(old_home)) else v)
        for k, v in {**ctx.sandbox.env, **wiring.env(url)}.items()
    }
    # No proxy variables: the CLI talks to the gateway directly, and nothing else is reachable.
    for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        env.pop(k, None)
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    sb.env = env
    stop = threading.Event()
    gw = Gateway(
        socket_path=sock_dir / "api.sock",
        upstream=upstream,
        key=key,
        auth=wiring.auth,
        prices=dict(cfg.get("prices") or {}),
        log_path=run_dir / "api_calls.jsonl",
        max_usd=cfg.get("max_usd"),
        on_cap=stop.set,
        max_retries=int(cfg.get("max_retries", 4)),
        backoff_s=float(cfg.get("retry_backoff_s", 1.0)),
    )
    sock = sb.path(GATEWAY_INSIDE) + "/api.sock"
    command = [
        "python",
        sb.path("/opt/ai4ai/bin") + "/ai4ai-launch",
        "--forward",
        f"{port}:{sock}",
        "--",
        *wiring.argv(url),
    ]
    transcript = Transcript(run_dir / "transcript.jsonl", wiring.cli_error)
    gw.start()
    try:
        out = sb.run(command, "/workspace", ctx.window_s, ctx.log_path, on_line=transcript.on_line, stop=stop)
    finally:
        gw.stop()
        transcript.close()
        if not os.environ.get("AI4AI_AGENT_SCRATCH"):
            shutil.rmtree(scratch, ignore_errors=True)
    usage = gw.summary()
    usage["last_status"] = gw.last_status
    error = _api_error(cfg["kind"], out, usage, ctx.log_path, transcript.errors)
    return AgentOutcome(
        exit_code=out.returncode,
        timed_out=out.timed_out and not gw.capped,
        wall_s=out.wall_s,
        transcript=[str(run_dir / "transcript.jsonl"), str(run_dir / "api_calls.jsonl")],
        usage=usage,
        error=error,
    )
