"""The instructions an agent receives: the task, its repo's README, the rules, the deadline."""

from __future__ import annotations

import time

from ai4ai import PROJECT_ROOT
from ai4ai.core.task import Task

RULES = """\
Rules (the grader enforces them; breaking them gains nothing):
- Change only the editable paths: {editable}. Everything else is protected; changes to it are
  discarded, and the grader applies only your patch of the editable paths to a pristine copy.
- Train only on the provided training split (and what your algorithm derives from it): no
  external data, no hand-written data generators, no weights or data embedded in source.
- The grader retrains from scratch with seeds of its own, under the scale's budget, and scores
  the chosen checkpoint on hidden data you never see. The validation split is for your proxy only.
- The grader, its data and other runs are out of reach of this sandbox.
"""


PROXY = """\
Proxy scores: run `ai4ai-proxy` in a shell. The harness trains your current editable files at
this scale's budget in a fresh sandbox and answers with the validation metric and its place on
the 0 / 0.1 / 1.0 scale (against validation anchors). Calls run one at a time and their time
counts against your window. `ai4ai-proxy --submit` marks the current files as your submission
(otherwise the files as they stand at the deadline are taken); `ai4ai-time` prints the seconds
left in your window, `ai4ai-proxy --status` the same and your proxy calls so far. The score that counts is the hidden one, on other seeds and other data.
"""

FRESH_INSTANCE = """\
This task is graded on a fresh instance of its source: graded runs are served, and tested on, data
of another instance of the same family, drawn from a secret seed (the repository's README says what
varies). Your proxy calls train and validate on the instance you are given, so they answer with the
raw validation metric only, not a place on the 0 / 0.1 / 1.0 scale.
"""


def render(task: Task, scale: str, window_s: float, started: float | None = None) -> str:
    started = started or time.time()
    deadline = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(started + window_s))
    editable = ", ".join(
        list(task.editable_files) + ([f"new .py files in {task.editable_folder}/"] if task.editable_folder else [])
    )
    parts = [
        f"# Task: {task.name} ({task.family})\n\n{task.description}\n",
        f"Scale: {scale}. Your window is {window_s:.0f} seconds ({window_s / 60:.1f} minutes) of wall clock and "
        f"ends at {deadline} (Unix time {int(started + window_s)}); at the deadline your processes are ended and "
        f"the editable files are taken as your submission. Time your proxy calls spend waiting for the device is "
        f"added back to the window; run `ai4ai-time` in a shell at any time: it prints the seconds left, counting "
        f"that. Plan your proxy calls so that the last one finishes before the deadline.\n",
        f"Goal: improve the training algorithm so that the trained model scores better on the hidden "
        f"metric ({task.metric.name}, {'higher' if task.metric.direction == 'max' else 'lower'} is better).\n",
        RULES.format(editable=editable),
        PROXY + (FRESH_INSTANCE if task.grading_data else ""),
        "## The repository's README\n\n" + (task.repo / "README.md").read_text(),
    ]
    kernels_readme = PROJECT_ROOT / "ai4ai_kernels" / "README.md"
    if kernels_readme.exists():
        parts.append("## Fused kernels you may use\n\n" + kernels_readme.read_text())
    return "\n".join(parts)
