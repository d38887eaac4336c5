"""sigma: one scale for every task. 0 = no information, 0.1 = the shipped algorithm, 1 = best."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Anchors:
    no_info: float      # raw metric of the no-information model
    baseline: float     # raw metric of the shipped algorithm (mean over calibration seeds)
    best: float         # best attainable raw metric


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
        raise ValueError(f"anchors out of order (phi0 {p0:.4g}, phib {pb:.4g}, phi1 {p1:.4g}): "
                         "need no_info < baseline < best after orientation")
    if p == -math.inf:
        return 0.0
    return _piecewise(p, p0, pb, p1)


def seed_noise_sigma(phi_std: float, anchors: Anchors, direction: str, transform: str,
                     upper: bool = True) -> float:
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


def bootstrap_interval(values: list, level: float = 0.95, n: int = 2000, seed: int = 0,
                       statistic=None) -> tuple[float, float]:
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
