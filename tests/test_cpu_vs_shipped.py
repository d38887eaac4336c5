"""A result says how much CPU its training runs used against the shipped algorithm's (the CPU cap's
headroom can be spent on plain steps: docs/tasks.md, "Compute headroom buys steps")."""

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ai4ai.core.result import CPU_NOTE_AT, final_line
from ai4ai.grading.anchors import cpu_vs_shipped
from ai4ai.grading.records import Record
from tests.fixtures.results import fake_result


def _record(mean: float | None) -> Record:
    raw = {} if mean is None else {"train_cpu_s": {"per_seed": [mean], "mean": mean, "max": mean}}
    return Record(key=None, anchors=None, validation=None, phi_std=0.0, train_wall_s=1.0, match="exact", raw=raw)


def test_the_ratio_is_the_mean_run_over_the_shipped_mean_carried_to_this_host():
    assert cpu_vs_shipped(_record(10.0), [14.0, 15.0], None) == 1.45
    assert cpu_vs_shipped(_record(10.0), [14.0, 15.0], {"factor": 1.0}) == 1.45
    # a host whose probe ran in 0.75 of the record host's time: the shipped run costs 7.5 CPU-s here
    assert cpu_vs_shipped(_record(10.0), [7.5], {"factor": 0.75}) == 1.0
    # seeds whose CPU time was not read do not count; nothing read, or no shipped figure: unknown
    assert cpu_vs_shipped(_record(10.0), [None, 12.0, 0.0], None) == 1.2
    assert cpu_vs_shipped(_record(10.0), [None], None) is None
    assert cpu_vs_shipped(_record(None), [12.0], None) is None
    assert cpu_vs_shipped(None, [12.0], None) is None


@settings(max_examples=200, deadline=None)
@given(
    shipped=st.floats(0.01, 1e5),
    used=st.lists(st.one_of(st.none(), st.floats(0.0, 1e6)), max_size=6),
    factor=st.one_of(st.none(), st.floats(0.05, 20.0)),
)
def test_the_ratio_scales_as_cpu_over_shipped_whatever_the_figures(shipped, used, factor):
    speed = None if factor is None else {"factor": factor}
    r = cpu_vs_shipped(_record(shipped), used, speed)
    real = [c for c in used if c is not None and c > 0]
    if not real:
        assert r is None
        return
    want = sum(real) / len(real) / (shipped * (factor or 1.0))
    assert r is not None and r >= 0 and math.isclose(r, round(want, 3), rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize(
    "ratio,noted",
    [(None, False), (0.97, False), (CPU_NOTE_AT - 0.001, False), (CPU_NOTE_AT, True), (1.46, True)],
)
def test_the_final_line_names_compute_past_the_note_level(ratio, noted, tmp_path):
    r = fake_result(task="optimizer", scores=(0.267,))
    if ratio is not None:
        r["timing"]["cpu_vs_shipped"] = ratio
    line = final_line(r, tmp_path)
    assert ("x the shipped run's CPU time a seed" in line) is noted, line
    if noted:
        assert f"[compute: {ratio:.2f} x" in line
