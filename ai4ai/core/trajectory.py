"""trajectory.jsonl: every proxy call and submission mark an agent made, one JSON object a line.

The one writer (`Trajectory.append`, used by the proxy server) and the one reader (`events`, used
by the pipeline for result.json and by the report for its curves) of the file, so that its field
names are written once. A line is

    {"time": ISO-8601, "elapsed_s": seconds since the window opened, "event": "proxy" | "submit", ...}

and a proxy event carries `call`, `patch_sha256`, `proxy_metric`, `proxy_score` (sigma on the
validation anchors; null when the call failed), `status`, `reason` (proxy.REASONS), `detail`,
`duration_s`, `lock_wait_s` and `rejected`. The file lives outside the agent's workspace: the
agent cannot write it, but a reader still skips lines that are not objects of this shape.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

PROXY, SUBMIT = "proxy", "submit"
BRIEF_KEYS = ("call", "proxy_score", "proxy_metric", "elapsed_s", "patch_sha256")
EMPTY_SUMMARY = {
    "proxy_calls": 0,
    "first_valid_proxy": None,
    "best_proxy": None,
    "final_proxy": None,
    "regressed_after_best": None,
}


@dataclass
class Trajectory:
    path: Path
    started: float = field(default_factory=time.time)

    def start(self) -> None:
        self.path.touch()

    def append(self, event: str, **fields) -> dict:
        rec = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "elapsed_s": round(time.time() - self.started, 2),
            "event": event,
            **fields,
        }
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
        return rec


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def events(path: Path, kind: str | None = PROXY) -> list[dict]:
    """The file's events of `kind` (all with None), in order; a missing file has none."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("event") in (PROXY, SUBMIT) and (kind is None or rec["event"] == kind):
            out.append(rec)
    return out


def proxy_score(rec: dict) -> float | None:
    return _number(rec.get("proxy_score"))


def rank(score: float | None, metric: float | None, direction: str | None) -> float | None:
    """What a proxy call is ranked by (best_proxy, the summary's best call): its proxy score; for a
    task without validation anchors (one graded on a fresh instance) its raw validation metric,
    turned so that higher is better (the calls of one run share one metric); None for a call that
    produced nothing, or when the direction is not known."""
    score, metric = _number(score), _number(metric)
    if score is not None or metric is None or direction not in ("max", "min"):
        return score
    return metric if direction == "max" else -metric


def summary(path: Path, direction: str | None = None) -> dict:
    """result.json's `trajectory` field; `direction` (the task metric's) ranks the calls of a task
    whose proxy reports a raw metric only."""
    calls = events(path)
    ranked = [(rank(c.get("proxy_score"), c.get("proxy_metric"), direction), c) for c in calls]
    valid = [(r, c) for r, c in ranked if r is not None]
    if not valid:
        return {**EMPTY_SUMMARY, "proxy_calls": len(calls)}
    best_rank, best = max(valid, key=lambda x: x[0])
    final_rank, final = ranked[-1]

    def brief(c):
        return {k: c.get(k) for k in BRIEF_KEYS}

    return {
        "proxy_calls": len(calls),
        "first_valid_proxy": brief(valid[0][1]),
        "best_proxy": brief(best),
        "final_proxy": brief(final),
        "regressed_after_best": (final_rank if final_rank is not None else -math.inf) < best_rank,
    }


def curve(path: Path, raw: bool = False) -> list[tuple[float, float]]:
    """(minutes into the agent window, proxy score) of every scored proxy call; with `raw`, the raw
    validation metric of every call that has one (a task graded on a fresh instance has no score)."""

    def value(c):
        return _number(c.get("proxy_metric")) if raw else proxy_score(c)

    return sorted(
        (_number(c.get("elapsed_s")) / 60.0, value(c))
        for c in events(path)
        if value(c) is not None and _number(c.get("elapsed_s")) is not None
    )
