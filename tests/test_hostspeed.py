"""A CPU-second cap carried from the host that calibrated it to the host that grades (hostspeed).

CI met the failure this guards against: on a host where the shipped optimizer ran 1.8x slower, both
of its graded runs were cut by a cap measured on a faster host of the same device class."""

from dataclasses import replace

import pytest
import yaml

from ai4ai.analysis import auditing
from ai4ai.core import hostspeed
from ai4ai.grading import anchors, records
from ai4ai.grading.seeds import grade_seeds

from .conftest import graded_context, needs_bwrap


def _ctx(compose_cfg, tmp_path, task="dpo", scale="ci"):
    return graded_context(compose_cfg, tmp_path, task, scale)


def _raw(ctx, edit=lambda r: r) -> dict:
    """A stored record of ctx's task version (of any CPU class, relabelled as this host's), edited,
    written back as the only record, and returned."""
    path = records.anchors_path(ctx.task.grader)
    k = ctx.key.as_dict()
    rec = next(
        r
        for r in yaml.safe_load(path.read_text())["records"]
        if all(r["key"][f] == k[f] for f in ("task", "scale", "task_version", "torch"))
    )
    rec = edit({**rec, "key": k})
    path.write_text(yaml.safe_dump({"records": [rec]}, sort_keys=False))
    return rec


def test_the_probe_is_a_steady_cpu_time_of_a_fixed_workload():
    p = hostspeed.measure(1, runs=2, fresh_s=0)  # two real runs, not the cache
    assert p["threads"] == 1 and len(p["runs"]) == 2 and p["cpu_s"] == min(p["runs"])
    assert p["cpu_s"] > 1.0  # an interpreter, torch and transformers, and ten steps
    assert max(p["runs"]) / min(p["runs"]) < 1.5, p["runs"]
    again = hostspeed.measure(1, runs=2)  # fresh runs of this host are reused
    assert again["runs"] == p["runs"]


def test_the_factor_scales_the_cpu_cap_and_only_ever_widens_the_net(compose_cfg, tmp_path):
    ctx = _ctx(compose_cfg, tmp_path)
    rec = records.find(ctx.task.grader, ctx.key)
    base = anchors.budget(ctx.task, "ci", rec, ctx.threads)
    slow = anchors.budget(ctx.task, "ci", rec, ctx.threads, hostspeed.ratio(20.0, 10.0))
    fast = anchors.budget(ctx.task, "ci", rec, ctx.threads, hostspeed.ratio(5.0, 10.0))
    assert slow.cpu_s == pytest.approx(1.9 * base.cpu_s, abs=0.2) and slow.wall_s == pytest.approx(1.9 * base.wall_s)
    assert fast.cpu_s == pytest.approx(0.6 * base.cpu_s, abs=0.2) and fast.wall_s == base.wall_s
    assert "host speed 1.90" in slow.source
    # the probe's own spread on one host moves nothing; beyond it, only the excess counts
    assert hostspeed.ratio(10.9, 10.0).factor == hostspeed.ratio(9.2, 10.0).factor == 1.0
    assert hostspeed.ratio(11.5, 10.0).factor == pytest.approx(1.05)
    wild = hostspeed.ratio(100.0, 10.0)
    assert wild.factor == hostspeed.CLAMP[1] and wild.clamped
    assert hostspeed.ratio(1.0, 10.0).factor == hostspeed.CLAMP[0]


def test_with_budget_measures_this_host_against_the_records_probe(compose_cfg, tmp_path, monkeypatch):
    ctx = _ctx(compose_cfg, tmp_path)
    monkeypatch.setattr(hostspeed, "measure", lambda threads, **kw: {"cpu_s": 16.0, "threads": threads})
    _raw(ctx, lambda r: {**r, "host_probe": {"cpu_s": 10.0, "threads": ctx.threads}})
    rec = records.find(ctx.task.grader, ctx.key)
    setup = anchors.with_budget(ctx, rec)
    assert setup.cpu_cap_s == pytest.approx(1.5 * anchors.budget(ctx.task, "ci", rec, ctx.threads).cpu_s, abs=0.1)
    assert setup.host_speed == {"probe_cpu_s_here": 16.0, "probe_cpu_s_record": 10.0, "factor": 1.5, "clamped": False}
    # a probe at another thread count, or none, leaves the cap as the record gives it
    _raw(ctx, lambda r: {**r, "host_probe": {"cpu_s": 10.0, "threads": ctx.threads + 1}})
    rec = records.find(ctx.task.grader, ctx.key)
    assert anchors.with_budget(ctx, rec).host_speed is None
    assert anchors.with_budget(ctx, rec).cpu_cap_s == anchors.budget(ctx.task, "ci", rec, ctx.threads).cpu_s


def test_every_task_and_scale_has_a_current_record_with_a_probe():
    """Each task's committed anchors at ci and smoke include a record of the current task version that
    carries its host's probe figure, so a grading on a slower or faster host (CI's, a user's) carries
    that record's CPU cap there. (Records of a CPU class calibrated before the probe, which only a host
    of that class could add a figure to, keep their caps as they are.)"""
    import yaml

    from ai4ai.core.provenance import task_version
    from ai4ai.core.task import list_tasks, load_task

    missing = []
    for name in list_tasks():
        task = load_task(name)
        recs = yaml.safe_load(records.anchors_path(task.grader).read_text())["records"]
        for scale in ("ci", "smoke"):
            current = [
                r for r in recs if r["key"]["scale"] == scale and r["key"]["task_version"] == task_version(task, scale)
            ]
            if not any(hostspeed.record_probe(r, int(r["key"]["device_class"].rsplit(":", 1)[1])) for r in current):
                missing.append(f"{name}/{scale}")
    assert not missing, (
        f"no current record with a host probe: {missing} (python -m ai4ai.calibrate ... probe_only=true)"
    )


# Training runs and the probe have run with passive thread pools (hostspeed.thread_env) since this
# commit time (f3963d5). A record of several threads whose CPU time was measured before it counted
# its workers' spin-waiting as CPU: optimizer's ci record on an AMD EPYC said 20.9 CPU-s where the
# same seed takes 10.2 now, so its cap gave a submission 2 x the compute it names (a red-team probe
# trained on the served data to that cap and scored 0.594 where 0.33 was its bound's basis).
PASSIVE_POOLS_SINCE = "2026-12-03T15:08:45+0000"


def test_no_current_record_counts_spinning_thread_pools_as_cpu():
    """Every current record of more than one thread measured its CPU time with passive pools, or its
    cap is loose by the spin; re-measure such a record on its class: calibrate ... cpu_only=true."""
    from ai4ai.core.provenance import task_version
    from ai4ai.core.task import list_tasks, load_task

    stale = []
    for name in list_tasks():
        task = load_task(name)
        for r in yaml.safe_load(records.anchors_path(task.grader).read_text())["records"]:
            k = r["key"]
            if k["task_version"] != task_version(task, k["scale"]) or r.get("train_cpu_s") is None:
                continue
            if int(k["device_class"].rsplit(":", 1)[1]) > 1 and r["provenance"]["calibrated_at"] < PASSIVE_POOLS_SINCE:
                stale.append(f"{name}/{k['scale']} on {k['device_class']} ({r['provenance']['calibrated_at']})")
    assert not stale, f"CPU time measured with spinning pools: {stale} (python -m ai4ai.calibrate ... cpu_only=true)"


@needs_bwrap
def test_a_cap_from_a_twice_faster_host_does_not_cut_the_shipped_algorithm_here(compose_cfg, tmp_path):
    """The real thing: dpo's record edited into one from a host twice as fast as this one (half the CPU
    time and half the probe figure). Taken as it is, its cap (1.5 x half) cuts the shipped algorithm;
    carried by the probe, the shipped algorithm trains to its end."""
    ctx = _ctx(compose_cfg, tmp_path)
    here = hostspeed.measure(ctx.threads)["cpu_s"]

    def faster_host(r, probe=True):
        t = r["train_cpu_s"]
        r = {
            **r,
            "train_cpu_s": {
                **t,
                "per_seed": [x / 2 for x in t["per_seed"]],
                "mean": t["mean"] / 2,
                "max": t["max"] / 2,
            },
        }
        return (
            {**r, "host_probe": {"cpu_s": here / 2, "threads": ctx.threads}}
            if probe
            else {k: v for k, v in r.items() if k != "host_probe"}
        )

    _raw(ctx, faster_host)
    setup = anchors.with_budget(ctx, records.find(ctx.task.grader, ctx.key))
    assert setup.host_speed["factor"] == pytest.approx(1.9, rel=0.35)
    (r,) = grade_seeds(setup, anchors.empty_submission(), [0], tmp_path / "carried")
    assert r.status == "graded" and r.cut is None and r.first_cut_cpu_s is None, r
    # control: the same record without its probe cuts the shipped algorithm (twice: retrained once)
    _raw(ctx, lambda rec: faster_host(rec, probe=False))
    bare = anchors.with_budget(ctx, records.find(ctx.task.grader, ctx.key))
    assert bare.host_speed is None and bare.cpu_cap_s < setup.cpu_cap_s / 1.3
    (c,) = grade_seeds(bare, anchors.empty_submission(), [0], tmp_path / "bare")
    assert c.cut == "cpu" and c.first_cut_cpu_s is not None, c


def test_an_audit_carries_the_recorded_cap_to_its_own_host(compose_cfg, tmp_path):
    ctx = _ctx(compose_cfg, tmp_path)
    setup = replace(
        ctx,
        cap_s=100.0,
        cpu_cap_s=30.0,
        host_speed={"probe_cpu_s_here": 16.0, "probe_cpu_s_record": 10.0, "factor": 1.6, "clamped": False},
    )
    timing = {
        "cap_s": 120.0,
        "cpu_cap_s": 24.0,
        "host_speed": {"probe_cpu_s_here": 8.0, "probe_cpu_s_record": 10.0, "factor": 0.8, "clamped": False},
    }
    carried, speed = auditing.recorded_caps(setup, timing)  # graded on a host twice as fast as this one
    assert speed.factor == pytest.approx(1.9) and carried.cpu_cap_s == 45.6 and carried.cap_s == pytest.approx(228.0)
    # a run graded before the probe: taken to have run at its anchors' host's speed
    carried, speed = auditing.recorded_caps(setup, {"cap_s": 120.0, "cpu_cap_s": 24.0})
    assert speed.factor == pytest.approx(1.5) and carried.cpu_cap_s == 36.0
    # no probe anywhere: the recorded caps as they are
    carried, speed = auditing.recorded_caps(replace(setup, host_speed=None), {"cap_s": 120.0, "cpu_cap_s": 24.0})
    assert speed is None and (carried.cap_s, carried.cpu_cap_s) == (120.0, 24.0)


def test_a_record_without_a_probe_gets_this_hosts_and_says_when(compose_cfg, tmp_path):
    ctx = _ctx(compose_cfg, tmp_path)
    _raw(ctx, lambda r: {k: v for k, v in r.items() if k != "host_probe"})
    rec = records.find(ctx.task.grader, ctx.key)
    stored = anchors.add_probe(ctx, rec)
    again = records.find(ctx.task.grader, ctx.key)
    assert again.raw["host_probe"]["cpu_s"] == stored["host_probe"]["cpu_s"] > 0
    assert "after calibration" in again.raw["host_probe"]["measured"]
    assert again.anchors == rec.anchors and again.raw["provenance"] == rec.raw["provenance"]
    other = replace(again, match="metered-cpu")
    with pytest.raises(SystemExit, match="cpu_only=true"):
        anchors.add_probe(ctx, other)
