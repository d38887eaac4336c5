import math

import pytest

from ai4ai.core.scoring import Anchors, bootstrap_interval, phi, score_seeds, sigma
from ai4ai.grading.seeds import SeedResult


def test_sigma_max_direction_hits_the_three_anchors():
    a = Anchors(no_info=0.5, baseline=0.6, best=1.0)
    assert sigma(0.5, a, "max", "identity") == pytest.approx(0.0)
    assert sigma(0.6, a, "max", "identity") == pytest.approx(0.1)
    assert sigma(1.0, a, "max", "identity") == pytest.approx(1.0)
    assert sigma(0.55, a, "max", "identity") == pytest.approx(0.05)  # lower branch
    assert sigma(0.8, a, "max", "identity") == pytest.approx(0.55)  # upper branch: 0.1 + 0.9 * 0.5


def test_sigma_min_direction_identity():
    a = Anchors(no_info=10.0, baseline=6.0, best=2.0)
    assert sigma(6.0, a, "min", "identity") == pytest.approx(0.1)
    assert sigma(4.0, a, "min", "identity") == pytest.approx(0.55)
    assert sigma(8.0, a, "min", "identity") == pytest.approx(0.05)


def test_sigma_neg_log_uses_log_perplexity():
    a = Anchors(no_info=32.0, baseline=8.0, best=4.0)
    mid = math.exp((math.log(8.0) + math.log(4.0)) / 2)  # halfway in log space
    assert sigma(mid, a, "min", "neg_log") == pytest.approx(0.55)
    assert sigma(8.0, a, "min", "neg_log") == pytest.approx(0.1)
    assert phi(math.e, "min", "neg_log") == pytest.approx(-1.0)


def test_sigma_is_clipped():
    a = Anchors(no_info=0.5, baseline=0.6, best=0.9)
    assert sigma(0.1, a, "max", "identity") == 0.0
    assert sigma(0.99, a, "max", "identity") == 1.0
    assert sigma(float("nan"), a, "max", "identity") == 0.0
    assert sigma(float("inf"), Anchors(32, 8, 4), "min", "neg_log") == 0.0


def test_anchors_out_of_order_are_refused():
    with pytest.raises(ValueError, match="out of order"):
        sigma(0.7, Anchors(no_info=0.6, baseline=0.5, best=1.0), "max", "identity")


def test_invalid_seed_scores_zero_and_all_invalid_is_invalid(optimizer_task):
    a = Anchors(32.0, 8.0, 6.0)
    ok = SeedResult(seed=0, status="graded", reason=None, raw=8.0, train_s=1.0, timed_out=False)
    bad = SeedResult(
        seed=1, status="invalid", reason="training exited with code 1", raw=None, train_s=1.0, timed_out=False
    )
    s = score_seeds(optimizer_task, [ok, bad], a)
    assert s.status == "graded" and s.score_per_seed == [pytest.approx(0.1), 0.0]
    assert s.score == pytest.approx(0.05) and "seed 1" in s.reason
    s = score_seeds(optimizer_task, [bad], a)
    assert s.status == "invalid" and s.score == 0.0


def test_error_seed_is_not_scored(optimizer_task):
    err = SeedResult(seed=0, status="error", reason="harness error: boom", raw=None, train_s=0, timed_out=False)
    s = score_seeds(optimizer_task, [err], Anchors(32.0, 8.0, 6.0))
    assert s.status == "error" and s.score is None


def test_bootstrap_interval_brackets_the_mean():
    lo, hi = bootstrap_interval([0.1, 0.2, 0.3, 0.25])
    assert lo <= 0.2125 <= hi and lo < hi
    assert bootstrap_interval([0.4]) == (0.4, 0.4)


def test_pooled_score_is_unbiased_at_the_shipped_algorithm():
    """Seeds spread evenly around the shipped phi: per-seed sigmas average above 0.1 (the kink), the pooled score does not."""
    from ai4ai.core.scoring import pooled_sigma

    a = Anchors(no_info=32.0, baseline=8.0, best=6.0)
    raws = [8.0 * math.exp(d) for d in (-0.02, 0.02, -0.01, 0.01)]
    per_seed = [sigma(r, a, "min", "neg_log") for r in raws]
    assert sum(per_seed) / len(per_seed) > 0.12
    phis = [phi(r, "min", "neg_log") for r in raws]
    assert pooled_sigma(phis, a, "min", "neg_log") == pytest.approx(0.1)
    assert pooled_sigma(phis + [None], a, "min", "neg_log") == pytest.approx(0.1 * 4 / 5)  # an invalid seed counts 0
    assert pooled_sigma([None], a, "min", "neg_log") == 0.0
    lo, hi = bootstrap_interval(phis, statistic=lambda ps: pooled_sigma(ps, a, "min", "neg_log"))
    assert lo <= 0.1 <= hi
