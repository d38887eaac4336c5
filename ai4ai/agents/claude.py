"""`claude`: Claude Code in headless mode (`claude -p`) with stream-json output.

Flags checked against `claude --help` (2.1.x): -p/--print, --output-format stream-json (needs
--verbose), --dangerously-skip-permissions (the harness's sandbox is the boundary; Claude Code
refuses it as root, and the sandbox runs it as an unprivileged user), --model, --effort
(low|medium|high|xhigh|max), --no-session-persistence.

The model is reached through the harness's API gateway: ANTHROPIC_BASE_URL points at it and
ANTHROPIC_API_KEY holds a dummy (the gateway sends the real key as x-api-key). The spending cap
is the gateway's (it refuses calls past agent.max_usd), not Claude Code's own --max-budget-usd,
which prices tokens from a table inside the CLI.
"""

from __future__ import annotations

from ai4ai.agents.base import AgentContext, AgentOutcome
from ai4ai.agents.cli import DUMMY_KEY, Wiring, resolve_executable, run_cli
from ai4ai.agents.cli import preflight as _preflight

INSTALL = "npm install -g @anthropic-ai/claude-code"
DEFAULT_BASE_URL = "https://api.anthropic.com"


def preflight(cfg: dict) -> None:
    _preflight(cfg, INSTALL, DEFAULT_BASE_URL)


def build_argv(exe: str, cfg: dict, prompt: str) -> list[str]:
    argv = [
        exe,
        "-p",
        prompt,
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--no-session-persistence",
    ]
    if cfg.get("model"):
        argv += ["--model", str(cfg["model"])]
    if cfg.get("effort"):
        argv += ["--effort", str(cfg["effort"])]
    return argv + [str(a) for a in cfg.get("extra_args") or []]


def sandbox_env(url: str) -> dict:
    return {
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": DUMMY_KEY,
        # no auto-update, telemetry or error reports: nothing but the gateway is reachable anyway
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def cli_error(event: dict) -> str | None:
    """stream-json's final `result` event says whether the session failed, and why."""
    if event.get("type") == "result" and (event.get("is_error") or str(event.get("subtype", "")).startswith("error")):
        return str(event.get("result") or event.get("subtype"))
    return None


def run(ctx: AgentContext) -> AgentOutcome:
    exe = resolve_executable(ctx.config, INSTALL)
    wiring = Wiring(
        auth="x-api-key",
        default_base_url=DEFAULT_BASE_URL,
        env=sandbox_env,
        argv=lambda url: build_argv(str(exe), ctx.config, ctx.instructions),
        cli_error=cli_error,
    )
    return run_cli(ctx, wiring, exe)
