"""Agent kinds: one module each, discovered by name (conf/agent/<name>.yaml sets `kind`).

Each module defines `run(ctx: AgentContext) -> AgentOutcome`.
"""

from __future__ import annotations

import importlib
import pkgutil

from ai4ai.agents.base import AgentContext, AgentOutcome  # noqa: F401


def kinds() -> list[str]:
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name not in ("base", "cli"))


def get(kind: str):
    if kind not in kinds():
        raise ValueError(f"unknown agent kind {kind!r}; kinds: {', '.join(kinds())}")
    return importlib.import_module(f"{__name__}.{kind}")
