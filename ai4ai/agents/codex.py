"""`codex`: the Codex CLI's non-interactive `codex exec --json`.

Flags checked against `codex exec --help` (0.17x): --json, --dangerously-bypass-approvals-and-sandbox
(the harness's sandbox is the boundary), --skip-git-repo-check, --ephemeral, -m/--model,
-c model_reasoning_effort=..., -C/--cd. Codex reports tokens, not dollars: cost is tokens times
the agent config's prices.
"""
from __future__ import annotations

from .base import AgentContext, AgentOutcome
from .cli import UsageMeter, require_key, resolve_executable, run_cli

INSTALL = "npm install -g @openai/codex"


def preflight(cfg: dict) -> None:
    resolve_executable(cfg, INSTALL)
    require_key(cfg)


def build_argv(exe: str, cfg: dict, prompt: str, workdir: str) -> list[str]:
    argv = [exe, "exec", "--json", "--dangerously-bypass-approvals-and-sandbox", "--skip-git-repo-check",
            "--ephemeral", "-C", workdir]
    if cfg.get("model"):
        argv += ["-m", str(cfg["model"])]
    if cfg.get("effort"):
        argv += ["-c", f"model_reasoning_effort={cfg['effort']}"]
    return argv + [str(a) for a in cfg.get("extra_args") or []] + [prompt]


def make_parser(cfg: dict):
    price_in = float(cfg.get("usd_per_mtok_input") or 0.0)
    price_out = float(cfg.get("usd_per_mtok_output") or 0.0)

    def parse_event(event: dict, meter: UsageMeter) -> None:
        """JSONL: each `turn.completed` carries that turn's token usage."""
        if event.get("type") == "turn.completed":
            usage = event.get("usage") or {}
            meter.input_tokens += int(usage.get("input_tokens") or 0)
            meter.output_tokens += int(usage.get("output_tokens") or 0)
            if price_in or price_out:
                meter.usd = (meter.input_tokens * price_in + meter.output_tokens * price_out) / 1e6
    return parse_event


def run(ctx: AgentContext) -> AgentOutcome:
    exe = resolve_executable(ctx.config, INSTALL)
    argv = build_argv(str(exe), ctx.config, ctx.instructions, ctx.sandbox.path("/workspace"))
    return run_cli(ctx, argv, make_parser(ctx.config), exe, {"CODEX_HOME": ctx.sandbox.path("/home/agent") + "/.codex"})
