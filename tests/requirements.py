"""What a test needs from the machine, and whether its absence skips the test or fails it.

A test that needs bubblewrap, Chromium or the real agent CLIs skips where they are missing, so a
contributor's laptop runs the rest. CI must not pass that way: it sets `AI4AI_REQUIRE` (a comma list
of the groups below, or `all`), and a test whose group is required fails, with the reason, instead
of skipping. tools/check_ran.py then checks from the JUnit report that the essential groups ran.
"""

from __future__ import annotations

import functools
import os
import shutil

import pytest

ENV = "AI4AI_REQUIRE"
GROUPS = {
    "sandbox": "bubblewrap that can create namespaces (apt-get install bubblewrap; run as root or with userns)",
    "chromium": "headless Chromium (apt-get install chromium)",
    "clis": "the agent CLIs pinned in .ci/agent-clis.txt (.ci/run installs them with npm)",
}


def required() -> set[str]:
    """The groups AI4AI_REQUIRE names; an unknown name is an error, not a silent no-op."""
    raw = {g.strip() for g in os.environ.get(ENV, "").split(",") if g.strip()}
    if "all" in raw:
        return set(GROUPS)
    unknown = raw - set(GROUPS)
    if unknown:
        raise pytest.UsageError(f"{ENV} names unknown groups {sorted(unknown)}; known: {sorted(GROUPS)} or all")
    return raw


def missing(group: str, reason: str):
    """Skip the running test for `reason`, or fail it where `group` is required."""
    if group not in GROUPS:
        raise ValueError(f"unknown requirement group {group!r}")
    if group in required():
        pytest.fail(f"{reason}: {ENV} requires {group} ({GROUPS[group]})", pytrace=False)
    pytest.skip(reason)


def requires(group: str):
    """A marker: the test needs `group` (checked before it runs, in tests/conftest.py)."""
    if group not in GROUPS:
        raise ValueError(f"unknown requirement group {group!r}")
    return pytest.mark.requires(group)


@functools.cache
def available(group: str) -> tuple[bool, str]:
    """(whether `group` is usable here, the reason when not). The CLIs are checked per test, by
    tests/agents/clis.py, since each test needs one of them at its pinned version."""
    if group == "sandbox":
        from ai4ai.sandbox.box import bwrap_available

        return bwrap_available(), "bubblewrap is not installed or cannot create namespaces here"
    if group == "chromium":
        return chromium() is not None, "chromium is not installed (apt-get install chromium)"
    return True, ""


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def mark_slow(items) -> None:
    """Say in the JUnit report which tests are slow, so tools/check_ran.py can check that CI's second
    call ran the graded attacks, not only that something under tests/redteam/ ran."""
    for item in items:
        if item.get_closest_marker("slow") is not None:
            item.user_properties.append(("slow", "1"))
