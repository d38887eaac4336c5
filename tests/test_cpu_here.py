"""At smoke a CPU cap is this CPU class's own: a record from another class, or one without CPU time,
is completed by measuring the shipped algorithm here (anchors.needs_cpu_here / measure_cpu)."""

import pytest
import yaml

from ai4ai.core.scoring import Anchors, phi
from ai4ai.grading import anchors, records

from .conftest import graded_context, needs_bwrap

OTHER = "cpu:Some Other CPU:{threads}"


_ctx = graded_context


@pytest.fixture(scope="module")
def _shipped_trainings() -> dict:
    return {}


@pytest.fixture
def shared_shipped(monkeypatch, _shipped_trainings):
    """anchors._train_shipped with its real trainings shared by this module's tests: the shipped
    algorithm of one task and scale on the same calibration seeds is one training, whichever test's
    measure_cpu or verify asks for it first (dpo at ci, seed 1000: each test read the same seed)."""
    real = anchors._train_shipped

    def train(ctx, workdir, seeds, what):
        key = (ctx.task.name, ctx.scale, ctx.key.device_class, tuple(seeds))
        if key not in _shipped_trainings:
            _shipped_trainings[key] = real(ctx, workdir, seeds, what)
        return list(_shipped_trainings[key])

    monkeypatch.setattr(anchors, "_train_shipped", train)


def _move_records(ctx, device_class: str, edit=lambda r: r) -> dict:
    """Keep only ctx's key's stored records (any class), relabelled as `device_class`; return one."""
    path = records.anchors_path(ctx.task.grader)
    k = ctx.key.as_dict()
    recs = [
        r
        for r in yaml.safe_load(path.read_text())["records"]
        if all(r["key"][f] == k[f] for f in ("task", "scale", "task_version", "torch"))
    ]
    assert recs, f"no stored record of {ctx.key} on any CPU class"
    rec = edit({**recs[0], "key": {**recs[0]["key"], "device_class": device_class}})
    path.write_text(yaml.safe_dump({"records": [rec]}, sort_keys=False))
    return rec


def _record(ctx, match: str, cpu: float | None) -> records.Record:
    return records.Record(
        key=ctx.key,
        anchors=Anchors(0.0, 0.5, 1.0),
        validation=None,
        phi_std=0.01,
        train_wall_s=10.0,
        match=match,
        raw={},
        train_cpu_s=cpu,
    )


def test_only_smoke_on_a_cpu_asks_for_a_cap_measured_here(compose_cfg, tmp_path):
    smoke = _ctx(compose_cfg, tmp_path / "s", "dpo", "smoke")
    ci = _ctx(compose_cfg, tmp_path / "c", "dpo", "ci")
    assert "measured on" in anchors.needs_cpu_here(smoke, _record(smoke, "metered-cpu", 20.0))
    assert "no CPU time" in anchors.needs_cpu_here(smoke, _record(smoke, "exact", None))
    assert anchors.needs_cpu_here(smoke, _record(smoke, "exact", 20.0)) is None
    assert anchors.needs_cpu_here(ci, _record(ci, "metered-cpu", 20.0)) is None  # ci: plumbing, used as is
    assert anchors.needs_cpu_here(smoke, None) is None  # calibrates in full anyway


def test_ensure_at_smoke_measures_before_it_uses_another_class_record(compose_cfg, tmp_path, monkeypatch):
    ctx = _ctx(compose_cfg, tmp_path, "dpo", "smoke")
    _move_records(ctx, OTHER.format(threads=ctx.threads))
    calls = []

    def fake_measure(c, rec, workdir, why):  # the measurement itself is tested for real below
        calls.append((rec.match, why))
        raw = {**rec.raw, "key": c.key.as_dict(), "train_cpu_s": {"per_seed": [1.0], "mean": 1.0, "max": 1.0}}
        records.store(c.task.grader, raw)

    monkeypatch.setattr(anchors, "measure_cpu", fake_measure)
    rec = anchors.ensure(ctx)
    assert calls == [
        (
            "metered-cpu",
            f"its CPU time was measured on {OTHER.format(threads=ctx.threads)}, not on {ctx.key.device_class}",
        )
    ]
    assert rec.match == "exact" and rec.train_cpu_s == 1.0


@needs_bwrap
def test_a_record_of_another_cpu_gets_this_cpus_time_and_keeps_its_anchors(compose_cfg, tmp_path, shared_shipped):
    """A real shipped training (dpo at ci, seconds) measures the CPU time; the record's anchors are kept
    because the seed's metric reproduces."""
    ctx = _ctx(compose_cfg, tmp_path, "dpo", "ci")
    other = OTHER.format(threads=ctx.threads)
    theirs = _move_records(ctx, other, lambda r: {k: v for k, v in r.items() if k != "train_cpu_s"})
    rec = records.find(ctx.task.grader, ctx.key)
    assert rec.match == "metered-cpu" and rec.train_cpu_s is None
    anchors.measure_cpu(ctx, rec, tmp_path / "measure", "a test")
    mine = records.find(ctx.task.grader, ctx.key)
    assert mine.match == "exact" and mine.key.device_class == ctx.key.device_class
    assert mine.anchors == rec.anchors and mine.phi_std == rec.phi_std
    assert mine.train_cpu_s > 0 and mine.raw["train_cpu_s"]["per_seed"] == [mine.train_cpu_s]
    # with this host's probe figure beside it, not the other class's
    assert mine.raw["host_probe"]["measured"] == "with the CPU time" and mine.raw["host_probe"]["cpu_s"] > 0
    assert mine.raw["host_probe"] != theirs.get("host_probe")
    prov = mine.raw["provenance"]
    assert prov["anchors_from"]["device_class"] == other and prov["cpu_measured_on_seeds"] == [theirs["seeds"][0]]
    check = prov["anchors_from"]["check"]
    assert check["metric_there"] == theirs["baseline_per_seed"][0]
    d = abs(
        phi(check["metric_here"], ctx.task.metric.direction, ctx.task.metric.transform)
        - phi(check["metric_there"], ctx.task.metric.direction, ctx.task.metric.transform)
    )
    assert d <= 0.5 * rec.phi_std
    # the other class's record is still there, untouched
    classes = [
        r["key"]["device_class"] for r in yaml.safe_load(records.anchors_path(ctx.task.grader).read_text())["records"]
    ]
    assert sorted(classes) == sorted([other, ctx.key.device_class])
    # the cap now derives from the CPU time measured here
    b = anchors.budget(ctx.task, "ci", mine, ctx.threads)
    assert b.cpu_s == pytest.approx(round(ctx.task.scale("ci").cap_factor * mine.train_cpu_s, 1))


@needs_bwrap
def test_a_record_whose_metric_does_not_reproduce_is_calibrated_in_full(
    compose_cfg, tmp_path, monkeypatch, shared_shipped
):
    ctx = _ctx(compose_cfg, tmp_path, "dpo", "ci")

    def shift(r):  # the other class's seed gave a clearly different metric
        return {
            **r,
            "baseline_per_seed": [r["baseline_per_seed"][0] + 5 * r["phi_std"] + 0.05, *r["baseline_per_seed"][1:]],
        }

    _move_records(ctx, OTHER.format(threads=ctx.threads), shift)
    rec = records.find(ctx.task.grader, ctx.key)
    full = []
    monkeypatch.setattr(
        anchors,
        "calibrate",
        lambda c, workdir, seeds=None, trained=(): full.append((workdir, trained)) or {"full": True},
    )
    out = anchors.measure_cpu(ctx, rec, tmp_path / "measure", "a test")
    assert out == {"full": True} and [w for w, _ in full] == [tmp_path / "measure" / "calibration"]
    # the seed it trained goes to the calibration, which does not train it again
    (done,) = full[0][1]
    assert done.seed == rec.raw["seeds"][0] and done.status == "graded" and done.raw is not None
    # nothing was stored for this class from the measurement
    assert records.find(ctx.task.grader, ctx.key).match == "metered-cpu"


def test_the_dry_run_says_the_cap_will_be_measured_here(compose_cfg, tmp_path, capsys):
    from ai4ai.pipeline import describe_plan

    ctx = _ctx(compose_cfg, tmp_path, "dpo", "smoke")
    _move_records(ctx, OTHER.format(threads=ctx.threads))
    describe_plan(ctx, compose_cfg("config", ["task=dpo", "scale=smoke", "agent=baseline"]), None)
    out = capsys.readouterr().out
    assert "metered-cpu match" in out
    assert (
        "train cap   measured on this CPU first (one shipped seed), since its CPU time was measured on "
        f"{OTHER.format(threads=ctx.threads)}" in out
    )


def test_a_deterministic_task_reproduces_within_float_noise(compose_cfg, tmp_path, monkeypatch):
    """pruning's seeds all give one value (seed std 0): float noise of 1e-10 must not count as a
    different machine. The training's outcome is set here; the decision is what is tested."""
    from ai4ai.grading.seeds import SeedResult

    ctx = _ctx(compose_cfg, tmp_path, "dpo", "ci")
    theirs = _move_records(ctx, OTHER.format(threads=ctx.threads), lambda r: {**r, "phi_std": 0.0})
    rec = records.find(ctx.task.grader, ctx.key)
    here = theirs["baseline_per_seed"][0] + 3e-10
    monkeypatch.setattr(
        anchors,
        "grade_seeds",
        lambda *a, **k: [
            SeedResult(
                seed=theirs["seeds"][0], status="graded", reason=None, raw=here, train_s=5.0, timed_out=False, cpu_s=4.0
            )
        ],
    )
    monkeypatch.setattr(anchors, "calibrate", lambda *a, **k: pytest.fail("calibrated in full"))
    anchors.measure_cpu(ctx, rec, tmp_path / "m", "a test")
    mine = records.find(ctx.task.grader, ctx.key)
    assert mine.match == "exact" and mine.train_cpu_s == 4.0 and mine.anchors == rec.anchors


@needs_bwrap
def test_verify_retrains_a_seed_and_flags_a_record_that_does_not_describe_the_code(
    compose_cfg, tmp_path, shared_shipped
):
    """calibrate verify=true: one real shipped training (dpo at ci, seed 1000) reproduces the stored
    metric of its own class's record; the same record with that seed's metric moved (as a record
    re-keyed across a change that moved training would be) is flagged, and nothing is stored."""
    ctx = _ctx(compose_cfg, tmp_path, "dpo", "ci")
    rec = records.find(ctx.task.grader, ctx.key)
    assert rec is not None, "dpo/ci has no record: calibrate it"  # dpo/ci's seeds agree across CPU classes
    seed, true_value = int(rec.raw["seeds"][0]), float(rec.raw["baseline_per_seed"][0])
    moved = dict(rec.raw, baseline_per_seed=[true_value + 0.05, *rec.raw["baseline_per_seed"][1:]])
    before = records.anchors_path(ctx.task.grader).read_text()
    [row] = anchors.verify(ctx, records.Record(**{**rec.__dict__, "raw": moved}), tmp_path / "verify", [seed])
    assert row["seed"] == seed and row["stored"] == true_value + 0.05 and not row["agrees"]
    assert abs(row["here"] - true_value) <= row["tol"]  # what the record really says is reproduced
    assert records.anchors_path(ctx.task.grader).read_text() == before
    with pytest.raises(SystemExit, match="not calibration seeds"):
        anchors.verify(ctx, rec, tmp_path / "verify2", [4242])


def test_a_calibration_does_not_retrain_the_seeds_it_is_given(compose_cfg, tmp_path, monkeypatch):
    """measure_cpu's seed, trained under the same context, is one of the calibration's five."""
    from ai4ai.grading.seeds import SeedResult

    ctx = _ctx(compose_cfg, tmp_path, "dpo", "ci")
    asked = []

    def train(c, workdir, seeds, what):
        asked.append(list(seeds))
        return [
            SeedResult(
                seed=s, status="graded", reason=None, raw=(40 + s % 10) / 1000, train_s=1.0, timed_out=False, cpu_s=1.0
            )
            for s in seeds
        ]

    monkeypatch.setattr(anchors, "_train_shipped", train)
    monkeypatch.setattr(anchors, "run_worker", lambda spec, d: {"no_info": 0.0, "best": 1.0})
    given = SeedResult(seed=1000, status="graded", reason=None, raw=0.5, train_s=2.0, timed_out=False, cpu_s=2.0)
    rec = anchors.calibrate(ctx, tmp_path / "cal", trained=[given])
    assert asked == [[1001, 1002, 1003, 1004]]
    assert rec["seeds"] == [1000, 1001, 1002, 1003, 1004]
    assert rec["baseline_per_seed"] == [0.5, 0.041, 0.042, 0.043, 0.044]
    assert rec["train_cpu_s"]["per_seed"] == [2.0, 1.0, 1.0, 1.0, 1.0]
