"""The real coding-agent CLIs at the versions pinned in .ci/agent-clis.txt (installed by .ci/run)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ai4ai import PROJECT_ROOT
from tests.requirements import missing

PINNED = PROJECT_ROOT / ".ci" / "agent-clis.txt"
PACKAGES = {"claude": "@anthropic-ai/claude-code", "codex": "@openai/codex"}


def npm_prefix() -> Path:
    return Path(os.environ.get("AI4AI_NPM_PREFIX") or Path.home() / ".cache" / "ai4ai-npm")


def pinned() -> dict[str, str]:
    out = {}
    for line in PINNED.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, _, version = line.rpartition("@")
            out[name] = version
    return out


def real_cli(kind: str) -> Path:
    """The installed executable of `kind` at its pinned version, or skip the test."""
    pkg = PACKAGES[kind]
    meta = npm_prefix() / "node_modules" / pkg / "package.json"
    exe = npm_prefix() / "node_modules" / ".bin" / kind
    if not meta.exists() or not exe.exists():
        missing("clis", f"{pkg} not installed under {npm_prefix()} (.ci/run installs it)")
    version = json.loads(meta.read_text())["version"]
    if version != pinned()[pkg]:
        missing("clis", f"{pkg} {version} installed, {pinned()[pkg]} pinned (.ci/run installs it)")
    return exe
