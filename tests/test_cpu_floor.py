"""The CPU cap's floor (`cpu_min_s` at ci and smoke): where the shipped run costs seconds, a method
that needs more still has room. Invariant: cap = max(cap_factor x shipped CPU, floor) x host speed,
the floor never lowers a cap, and a floor is refused where the wall clock binds."""

import random
from dataclasses import replace

import pytest
import yaml

from ai4ai.core import hostspeed
from ai4ai.core.task import TASK_DIR, TaskError, load_task, parse_task
from ai4ai.grading import anchors
from ai4ai.grading.records import Record


def _with_floor(task, scale, floor):
    return replace(task, scales={**task.scales, scale: replace(task.scale(scale), cpu_min_s=floor)})


def _record(cpu_s, wall_s=5.0) -> Record:
    """What budget() reads of a stored record: the shipped run's CPU and wall time."""
    return Record(None, None, None, 0.0, wall_s, "exact", {}, train_cpu_s=cpu_s)


def test_the_floor_binds_only_above_the_factors_cap_and_travels_with_host_speed():
    task = load_task("pruning")
    rng = random.Random(0)
    for _ in range(300):
        scale = rng.choice(["ci", "smoke"])
        cpu, floor = rng.uniform(0.1, 200), rng.choice([0.0, rng.uniform(0.1, 400)])
        speed = rng.choice([None, hostspeed.ratio(rng.uniform(1, 40), rng.uniform(1, 40))])
        t = _with_floor(task, scale, floor)
        b = anchors.budget(t, scale, _record(cpu), 1, speed)
        want = max(t.scale(scale).cap_factor * cpu, floor) * (speed.factor if speed else 1.0)
        assert b.cpu_s == pytest.approx(want, abs=0.06), (cpu, floor, speed, b)
        plain = anchors.budget(task, scale, _record(cpu), 1, speed)
        assert b.cpu_s >= plain.cpu_s - 1e-9  # a floor never lowers a cap
        assert ("cpu_min_s" in b.source) == (floor > t.scale(scale).cap_factor * cpu), b.source


def test_the_rule_the_agent_reads_states_the_floor():
    task = _with_floor(load_task("pruning"), "smoke", 60.0)
    rule = anchors.budget_rule(task)
    assert "never below 60 CPU-s (`smoke`)" in " ".join(rule.split())
    assert "never below" not in anchors.budget_rule(_with_floor(task, "smoke", 0.0))


@pytest.mark.parametrize(
    "scale, value, says",
    [
        ("full", 60, "at full the wall clock binds"),
        ("smoke", -1, "from 0 to 1e6"),
        ("smoke", True, "from 0 to 1e6"),
        ("smoke", "60", "from 0 to 1e6"),
        ("ci", float("nan"), "from 0 to 1e6"),
        ("ci", 1e9, "from 0 to 1e6"),
    ],
)
def test_a_bad_floor_is_one_clear_error(scale, value, says):
    d = yaml.safe_load((TASK_DIR / "pruning.yaml").read_text())
    d["scales"][scale]["cpu_min_s"] = value
    with pytest.raises(TaskError, match=says) as e:
        parse_task(d, "pruning.yaml")
    assert f"scales.{scale}.cpu_min_s" in str(e.value)
