"""`claude`: Claude Code in headless mode (`claude -p`) with stream-json output.

Flags checked against `claude --help` (2.1.x): -p/--print, --output-format stream-json (needs
--verbose), --dangerously-skip-permissions (the harness's sandbox is the boundary), --model,
--effort (low|medium|high|xhigh|max), --max-budget-usd, --no-session-persistence.
"""
from __future__ import annotations

from .base import AgentContext, AgentOutcome
from .cli import UsageMeter, require_key, resolve_executable, run_cli

INSTALL = "npm install -g @anthropic-ai/claude-code"


def preflight(cfg: dict) -> None:
    resolve_executable(cfg, INSTALL)
    require_key(cfg)


def build_argv(exe: str, cfg: dict, prompt: str) -> list[str]:
    argv = [exe, "-p", prompt, "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions",
            "--no-session-persistence"]
    if cfg.get("model"):
        argv += ["--model", str(cfg["model"])]
    if cfg.get("effort"):
        argv += ["--effort", str(cfg["effort"])]
    if cfg.get("max_usd") is not None:
        argv += ["--max-budget-usd", str(cfg["max_usd"])]
    return argv + [str(a) for a in cfg.get("extra_args") or []]


def parse_event(event: dict, meter: UsageMeter) -> None:
    """stream-json: assistant messages carry per-turn usage; the final `result` carries the cost."""
    if event.get("type") == "assistant":
        usage = (event.get("message") or {}).get("usage") or {}
        meter.input_tokens += int(usage.get("input_tokens") or 0)
        meter.output_tokens += int(usage.get("output_tokens") or 0)
    if event.get("type") == "result":
        if event.get("total_cost_usd") is not None:
            meter.usd = float(event["total_cost_usd"])
        usage = event.get("usage") or {}
        if usage:
            meter.input_tokens = int(usage.get("input_tokens") or 0) + int(usage.get("cache_read_input_tokens") or 0) \
                + int(usage.get("cache_creation_input_tokens") or 0)
            meter.output_tokens = int(usage.get("output_tokens") or 0)
    if event.get("total_cost_usd") is not None and event.get("type") != "result":
        meter.usd = float(event["total_cost_usd"])


def run(ctx: AgentContext) -> AgentOutcome:
    exe = resolve_executable(ctx.config, INSTALL)
    argv = build_argv(str(exe), ctx.config, ctx.instructions)
    return run_cli(ctx, argv, parse_event, exe, {"DISABLE_AUTOUPDATER": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"})
