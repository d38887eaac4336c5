"""Shared machinery of the coding-agent CLIs (claude, codex): preflight, sandbox wiring,
network policy, transcript, usage and the spending cap. Not an agent kind itself."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from dataclasses import replace
from pathlib import Path
from typing import Callable

from .. import PROJECT_ROOT
from ..egress import EgressProxy, parse_allowlist
from ..sandbox import Mount
from .base import AgentContext, AgentOutcome

EGRESS_PORT = 18080
SYSTEM_DIRS = ("/usr", "/bin", "/lib", "/lib64", "/sbin", "/etc")


class AgentSetupError(RuntimeError):
    """The agent cannot start here (missing CLI or key); raised before anything runs."""


def resolve_executable(cfg: dict, install_hint: str) -> Path:
    exe = shutil.which(str(cfg.get("executable") or cfg["kind"]))
    if exe is None:
        raise AgentSetupError(f"agent={cfg['kind']}: the `{cfg.get('executable') or cfg['kind']}` CLI is not on PATH; "
                              f"install it with `{install_hint}` or set agent.executable=/path/to/it")
    return Path(exe)


def require_key(cfg: dict) -> str:
    name = cfg.get("api_key_env")
    if not name or not os.environ.get(name):
        raise AgentSetupError(f"agent={cfg['kind']}: set the {name} environment variable (the key is passed to the "
                              "agent's sandbox only, never written to the run directory)")
    return name


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


class UsageMeter:
    """Running token and cost totals from the CLI's JSON events; trips `stop` past the cap."""

    def __init__(self, max_usd: float | None, stop: threading.Event, transcript: Path,
                 parse: Callable[[dict, "UsageMeter"], None]):
        self.max_usd, self.stop, self.parse = max_usd, stop, parse
        self.usd, self.input_tokens, self.output_tokens = None, 0, 0
        self.capped = False
        self.events = 0
        self._file = open(transcript, "a")

    def on_line(self, line: str) -> None:
        self._file.write(line + "\n")
        self._file.flush()
        try:
            event = json.loads(line)
        except ValueError:
            return
        if not isinstance(event, dict):
            return
        self.events += 1
        self.parse(event, self)
        if self.max_usd is not None and self.usd is not None and self.usd > self.max_usd:
            self.capped = True
            self.stop.set()

    def close(self) -> dict:
        self._file.close()
        return {"usd": self.usd, "input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


def run_cli(ctx: AgentContext, argv: list[str], parse: Callable[[dict, UsageMeter], None],
            exe: Path, extra_env: dict) -> AgentOutcome:
    cfg = ctx.config
    key_name = require_key(cfg)
    mounts = list(ctx.sandbox.mounts) + tool_mounts(exe)
    env = dict(ctx.sandbox.env, **extra_env)
    env[key_name] = os.environ[key_name]
    network = str(cfg.get("network", "api_only"))
    egress, sock_dir = None, None
    command = argv
    if network == "api_only":
        sock_dir = Path(tempfile.mkdtemp(prefix="ai4ai-egress-"))
        egress = EgressProxy(sock_dir / "egress.sock", parse_allowlist(list(cfg.get("api_hosts") or [])))
        egress.start()
        mounts.append(Mount("/run/ai4ai-egress", sock_dir, True))
        sock = ctx.sandbox.path("/run/ai4ai-egress") + "/egress.sock" if ctx.sandbox.backend == "bwrap" \
            else str(sock_dir / "egress.sock")
        proxy_url = f"http://127.0.0.1:{EGRESS_PORT}"
        env.update(HTTPS_PROXY=proxy_url, https_proxy=proxy_url, HTTP_PROXY=proxy_url, http_proxy=proxy_url,
                   NO_PROXY="", no_proxy="")
        command = ["python", ctx.sandbox.path("/opt/ai4ai/bin") + "/ai4ai-launch",
                   "--forward", f"{EGRESS_PORT}:{sock}", "--", *argv]
    elif network != "open":
        raise AgentSetupError(f"agent.network={network!r}: use open or api_only")
    sb = replace(ctx.sandbox, mounts=mounts, env=env, network=(network == "open"))
    stop = threading.Event()
    transcript = ctx.log_path.parent / "transcript.jsonl"
    meter = UsageMeter(cfg.get("max_usd"), stop, transcript, parse)
    try:
        out = sb.run(command, "/workspace", ctx.window_s, ctx.log_path, on_line=meter.on_line, stop=stop)
    finally:
        usage = meter.close()
        if egress:
            egress.stop()
            shutil.rmtree(sock_dir, ignore_errors=True)
    usage["capped"] = meter.capped
    if egress:
        usage["egress"] = [{"host": h, "port": p, "allowed": a} for h, p, a in egress.log[:200]]
    return AgentOutcome(exit_code=out.returncode, timed_out=out.timed_out and not meter.capped, wall_s=out.wall_s,
                        transcript=[str(transcript)], usage=usage)
