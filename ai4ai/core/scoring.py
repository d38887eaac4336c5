"""sigma: one scale for every task. 0 = no information, 0.1 = the shipped algorithm, 1 = best."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # types only: scoring sits below the task module
    from ai4ai.core.task import Task


@dataclass(frozen=True)
class Anchors:
    no_info: float  # raw metric of the no-information model
    baseline: float  # raw metric of the shipped algorithm (mean over calibration seeds)
    best: float  # best attainable raw metric


def phi(raw: float, direction: str, transform: str) -> float:
    """The raw metric oriented so that larger is better."""
    if not math.isfinite(raw):
        return -math.inf
    if transform == "neg_log":
        if raw <= 0:
            raise ValueError(f"transform neg_log needs a positive metric, got {raw}")
        return -math.log(raw)
    if transform != "identity":
        raise ValueError(f"unknown transform {transform!r}")
    return raw if direction == "max" else -raw


def _anchor_phis(anchors: Anchors, direction: str, transform: str) -> tuple[float, float, float]:
    return tuple(phi(a, direction, transform) for a in (anchors.no_info, anchors.baseline, anchors.best))


def _piecewise(p: float, p0: float, pb: float, p1: float) -> float:
    """DESIGN.md's sigma of one oriented value: through (phi0, 0), (phib, 0.1), (phi1, 1), clipped."""
    s = 0.1 * (p - p0) / (pb - p0) if p <= pb else 0.1 + 0.9 * (p - pb) / (p1 - pb)
    return float(min(1.0, max(0.0, s)))


def sigma(raw: float, anchors: Anchors, direction: str, transform: str) -> float:
    """Piecewise-linear map of phi(raw) through (phi0, 0), (phib, 0.1), (phi1, 1), clipped to [0, 1]."""
    p = phi(raw, direction, transform)
    p0, pb, p1 = _anchor_phis(anchors, direction, transform)
    if not (p0 < pb < p1):
        raise ValueError(
            f"anchors out of order (phi0 {p0:.4g}, phib {pb:.4g}, phi1 {p1:.4g}): "
            "need no_info < baseline < best after orientation"
        )
    if p == -math.inf:
        return 0.0
    return _piecewise(p, p0, pb, p1)


def seed_noise_sigma(phi_std: float, anchors: Anchors, direction: str, transform: str, upper: bool = True) -> float:
    """One seed's std of sigma, from the seed std of phi: on the upper branch (above 0.1) or the lower."""
    p0, pb, p1 = _anchor_phis(anchors, direction, transform)
    return float(0.9 * phi_std / (p1 - pb) if upper else 0.1 * phi_std / (pb - p0))


def pooled_sigma(phis: list[float | None], anchors: Anchors, direction: str, transform: str) -> float:
    """The run's score: sigma of the seeds' mean phi, times the share of valid seeds (None = invalid).

    Averaging per-seed sigmas instead would be biased upward at the shipped algorithm: sigma has a
    kink at 0.1 (slope 0.1/(phib-phi0) below, 0.9/(phi1-phib) above), so seed noise around phib
    lands more above 0.1 than below. Pooling phi first keeps the shipped algorithm at 0.1 up to
    the noise of a mean. An invalid seed still counts as 0.
    """
    valid = [p for p in phis if p is not None and math.isfinite(p)]
    if not valid:
        return 0.0
    return _piecewise(sum(valid) / len(valid), *_anchor_phis(anchors, direction, transform)) * len(valid) / len(phis)


def bootstrap_interval(
    values: list, level: float = 0.95, n: int = 2000, seed: int = 0, statistic=None
) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic` (default the mean) over resampled seeds."""
    if len(values) == 0:
        return (math.nan, math.nan)
    stat = statistic or (lambda xs: float(np.mean(xs)))
    if len(values) < 2:
        v = stat(list(values))
        return (v, v)
    rng = np.random.default_rng(seed)
    draws = [stat([values[i] for i in rng.integers(0, len(values), size=len(values))]) for _ in range(n)]
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


# --------------------------------------------------------------------------- a run's seeds


@dataclass(frozen=True)
class Scored:
    status: str
    reason: str | None
    raw_per_seed: list
    score_per_seed: list
    raw_mean: float | None
    raw_std: float | None
    score: float | None
    phi_per_seed: list = field(default_factory=list)
    flags: list = field(default_factory=list)  # scored, but a reader must know (see replicate_flags)

    def interval(self, anchors: Anchors, task: Task) -> list | None:
        if not self.phi_per_seed:
            return None
        m = task.metric
        return list(
            bootstrap_interval(
                self.phi_per_seed, statistic=lambda ps: pooled_sigma(ps, anchors, m.direction, m.transform)
            )
        )


def score_seeds(task: Task, results: list, anchors: Anchors) -> Scored:
    """`results`: grading.SeedResult per seed (grading builds on this module, so the type is not imported)."""
    statuses = {r.status for r in results}
    raws = [r.raw for r in results]
    if "error" in statuses:
        errs = "; ".join(f"seed {r.seed}: {r.reason}" for r in results if r.status == "error")
        return Scored("error", errs, raws, [], None, None, None)
    m = task.metric
    scores = [sigma(r.raw, anchors, m.direction, m.transform) if r.status == "graded" else 0.0 for r in results]
    phis = [phi(r.raw, m.direction, m.transform) if r.status == "graded" else None for r in results]
    valid = [r.raw for r in results if r.status == "graded"]
    invalid = [f"seed {r.seed}: {r.reason}" for r in results if r.status == "invalid"]
    status = "graded" if valid else "invalid"
    mean = phi_mean_raw(task, valid) if valid else None
    std = float(_std([p for p in phis if p is not None])) if valid else None
    return Scored(
        status,
        "; ".join(invalid) or None,
        raws,
        scores,
        mean,
        std,
        pooled_sigma(phis, anchors, m.direction, m.transform),
        phis,
        replicate_flags(task, results),
    )


def replicate_flags(task: Task, results: list) -> list[str]:
    """`identical weights on seeds A and B` for each group of graded seeds whose chosen weights hash
    the same: the submission ignored --seed, so its replicates are one run counted several times.

    A flag, not `invalid`: training without randomness, or with a fixed data order, is a legitimate
    algorithm (the pruning task's shipped one is deterministic), and its mean score is no better for
    it. What collapsing costs is the noise estimate (std 0, a zero-width interval) and what it can
    buy is a seed chosen for luck; both are the reader's to judge, so the result says so wherever
    its number is shown. A task that declares its shipped algorithm deterministic gives identical
    weights by design, and the flag would fire on every submission there, the shipped one included.
    """
    if task.deterministic:
        return []
    groups: dict = {}
    for r in results:
        if r.status == "graded" and r.weights_sha256:
            groups.setdefault(r.weights_sha256, []).append(r.seed)
    flags = []
    for seeds in sorted(g for g in groups.values() if len(g) > 1):
        names = [str(x) for x in seeds]
        flags.append(f"identical weights on seeds {', '.join(names[:-1])} and {names[-1]}")
    return flags


def _std(xs: list[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = sum(xs) / len(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def phi_mean_raw(task: Task, raws: list[float]) -> float:
    """The raw value whose phi is the mean phi (geometric mean under neg_log)."""
    if task.metric.transform == "neg_log":
        return math.exp(sum(math.log(r) for r in raws) / len(raws))
    return sum(raws) / len(raws)
