"""`codex`: the Codex CLI's non-interactive `codex exec --json`.

Flags checked against `codex exec --help` (0.171): --json, --dangerously-bypass-approvals-and-sandbox
(the harness's sandbox is the boundary), --skip-git-repo-check, --ephemeral, -m/--model,
-C/--cd, -c key=value (TOML) for config.toml keys.

The model is reached through the harness's API gateway, declared as a model provider of its own
(`model_providers.ai4ai`: base_url, env_key, wire_api = "responses"); the env_key variable holds
a dummy and the gateway sends the real key as `Authorization: Bearer`. The provider of its own,
rather than the built-in `openai` one with `openai_base_url`, because the built-in one first tries
a Responses WebSocket (which the gateway does not relay) and cannot be told not to; its cost is
that Codex finds no model metadata for the provider's models and uses its generic defaults. Its tools run through a
plain (not login) shell that inherits the sandbox's environment, so a profile cannot reset PATH
and `ai4ai-proxy` and the harness's Python stay visible (`allow_login_shell = false`,
`shell_environment_policy.inherit = "all"`). CODEX_HOME is made inside the sandbox-only home.
"""

from __future__ import annotations

import json
from pathlib import Path

from ai4ai.agents.base import AgentContext, AgentOutcome
from ai4ai.agents.cli import DUMMY_KEY, HOME_INSIDE, Wiring, resolve_executable, run_cli
from ai4ai.agents.cli import preflight as _preflight

INSTALL = "npm install -g @openai/codex"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_VAR = "AI4AI_GATEWAY_KEY"  # the provider's env_key: a dummy the gateway replaces


def preflight(cfg: dict) -> None:
    _preflight(cfg, INSTALL, DEFAULT_BASE_URL)


def _c(key: str, value) -> list[str]:
    # -c values are TOML; a JSON string or boolean is valid TOML too
    return ["-c", f"{key}={json.dumps(value)}"]


def build_argv(exe: str, cfg: dict, prompt: str, workdir: str, url: str) -> list[str]:
    argv = [
        exe,
        "exec",
        "--json",
        "--dangerously-bypass-approvals-and-sandbox",
        "--skip-git-repo-check",
        "--ephemeral",
        "-C",
        workdir,
    ]
    if cfg.get("model"):
        argv += ["-m", str(cfg["model"])]
    argv += (
        _c("model_provider", "ai4ai")
        + _c("model_providers.ai4ai.name", "ai4ai gateway")
        + _c("model_providers.ai4ai.base_url", url)
        + _c("model_providers.ai4ai.env_key", KEY_VAR)
        + _c("model_providers.ai4ai.wire_api", "responses")
        + _c("model_providers.ai4ai.supports_websockets", False)
        + _c("allow_login_shell", False)
        + _c("shell_environment_policy.inherit", "all")
        + _c("check_for_update_on_startup", False)
    )
    if cfg.get("effort"):
        argv += _c("model_reasoning_effort", str(cfg["effort"]))
    return argv + [str(a) for a in cfg.get("extra_args") or []] + [prompt]


def prepare_home(home: Path) -> None:
    (home / ".codex").mkdir(parents=True, exist_ok=True)  # codex refuses a CODEX_HOME that does not exist


def cli_error(event: dict) -> str | None:
    """`codex exec --json` reports failures as `error` and `turn.failed` events."""
    if event.get("type") == "error":
        return str(event.get("message"))
    if event.get("type") == "turn.failed":
        return str((event.get("error") or {}).get("message") or "turn failed")
    return None


def run(ctx: AgentContext) -> AgentOutcome:
    exe = resolve_executable(ctx.config, INSTALL)
    workdir = ctx.sandbox.path("/workspace")
    wiring = Wiring(
        auth="bearer",
        default_base_url=DEFAULT_BASE_URL,
        env=lambda url: {KEY_VAR: DUMMY_KEY, "CODEX_HOME": ctx.sandbox.path(HOME_INSIDE) + "/.codex"},
        argv=lambda url: build_argv(str(exe), ctx.config, ctx.instructions, workdir, url),
        prepare_home=prepare_home,
        cli_error=cli_error,
    )
    return run_cli(ctx, wiring, exe)
