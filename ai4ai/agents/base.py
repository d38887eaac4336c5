"""What every agent kind receives and returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ai4ai.sandbox.box import Sandbox


@dataclass(frozen=True)
class AgentContext:
    workspace: Path  # host path of the workspace (the agent sees /workspace under bwrap)
    instructions: str  # rendered task instructions
    window_s: float  # wall-clock window
    sandbox: Sandbox  # workspace mounted writable, nothing else of the project
    log_path: Path  # the agent's log in the run dir
    config: dict  # the agent's Hydra config, resolved
    pristine: Path  # harness-only pristine copy (the patch kind reads it; never mounted)


@dataclass(frozen=True)
class AgentOutcome:
    exit_code: int | None
    timed_out: bool
    wall_s: float
    transcript: list = field(default_factory=list)
    usage: dict[str, Any] = field(default_factory=dict)  # COST_KEYS and the gateway's counters
    error: str | None = None  # set when the agent never worked (e.g. never reached its model API): status error


# What result.json's `cost` holds (from the API gateway; see ai4ai/window/gateway.py).
COST_KEYS = (
    "usd",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cache_write_tokens",
    "reasoning_tokens",
    "calls",
    "refused",
    "retries",
    "capped",
    "source",
)
