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


def sigma(raw: float, anchors: Anchors, direction: str, transform: str) -> float:
    """Piecewise-linear map of phi(raw) through (phi0, 0), (phib, 0.1), (phi1, 1), clipped to [0, 1]."""
    p = phi(raw, direction, transform)
    p0, pb, p1 = (phi(a, direction, transform) for a in (anchors.no_info, anchors.baseline, anchors.best))
    if not (p0 < pb < p1):
        raise ValueError(f"anchors out of order (phi0 {p0:.4g}, phib {pb:.4g}, phi1 {p1:.4g}): "
                         "need no_info < baseline < best after orientation")
    if p == -math.inf:
        return 0.0
    s = 0.1 * (p - p0) / (pb - p0) if p <= pb else 0.1 + 0.9 * (p - pb) / (p1 - pb)
    return float(min(1.0, max(0.0, s)))


def bootstrap_interval(values: list[float], level: float = 0.95, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean; a single value gives a zero-width interval."""
    v = np.asarray(values, dtype=float)
    if len(v) < 2:
        return (float(v.mean()), float(v.mean())) if len(v) else (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, len(v), size=(n, len(v)))].mean(1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)
