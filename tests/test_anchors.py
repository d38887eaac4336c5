"""records.store: under concurrent writers (calibrations of different scales or device classes for one
task may finish at the same moment, and none of their records may be lost), and the records that stay
current (a store removes the records, detail files and registry entries no current version can use)."""

import json
import multiprocessing

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ai4ai.grading import records
from ai4ai.repo import registry

WRITERS, ROUNDS = 4, 15


def _key(writer: int, round_: int, version: str = "v1") -> dict:
    """Records of one task version (what a store keeps), on a device class per writer and round."""
    return {
        "task": "optimizer",
        "scale": "ci",
        "task_version": version,
        "device_class": f"cpu:test {round_:03d}:{writer}",
        "torch": "2.13",
    }


def _writer(grader_dir, writer, start):
    start.wait()
    for r in range(ROUNDS):
        records.store(grader_dir, {"key": _key(writer, r), "anchors": {"no_info": 0.0, "baseline": 0.5, "best": 1.0}})


def test_concurrent_writers_lose_no_record(tmp_path):
    # fork: the writers start at once and the race window stays as narrow as it is in production
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_writer, args=(tmp_path, w, start)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=120)
    stored = {tuple(r["key"].values()) for r in records._records(records.anchors_path(tmp_path))}
    expected = {tuple(_key(w, r).values()) for w in range(WRITERS) for r in range(ROUNDS)}
    exits = [p.exitcode for p in procs]
    # two writers inside the lock at once show as lost records, or as one writer's temp file
    # renamed away under the other (a crash)
    assert (len(expected - stored), exits) == (0, [0] * WRITERS), (
        f"{len(expected - stored)} of {len(expected)} records lost"
    )
    assert stored == expected


def test_store_replaces_the_record_with_the_same_key(tmp_path):
    records.store(tmp_path, {"key": _key(0, 0), "anchors": {"no_info": 0.0, "baseline": 0.5, "best": 1.0}})
    records.store(tmp_path, {"key": _key(0, 0), "anchors": {"no_info": 0.0, "baseline": 0.6, "best": 1.0}})
    recs = records._records(records.anchors_path(tmp_path))
    assert [r["anchors"]["baseline"] for r in recs] == [0.6]


def test_another_class_record_of_the_same_cpu_model_comes_first(tmp_path):
    """With no record of this host's class (model, instruction set, threads), the one of the same
    CPU model (another instruction set, or a label from before it was part of the class) is used
    at ci/smoke, not another model's, wherever the files list them."""
    from ai4ai.grading.context import Key

    base = {"task": "optimizer", "scale": "smoke", "task_version": "v1", "torch": "2.13"}
    for cls, baseline in (("cpu:AMD EPYC:1", 0.61), ("cpu:Intel(R) Xeon(R) Processor:1", 0.62), ("cpu:Zeta:1", 0.63)):
        records.store(
            tmp_path,
            {
                "key": {**base, "device_class": cls},
                "anchors": {"no_info": 0.0, "baseline": baseline, "best": 1.0},
                "phi_std": 0.01,
                "train_wall_s": {"max": 1.0},
            },
        )
    rec = records.find(tmp_path, Key(**base, device_class="cpu:AMD EPYC:AVX512:1"))
    assert rec.match == "metered-cpu" and rec.key.device_class == "cpu:AMD EPYC:1" and rec.anchors.baseline == 0.61
    other = records.find(tmp_path, Key(**base, device_class="cpu:Other:AVX2:1"))
    assert other.match == "metered-cpu"
    intel = records.find(tmp_path, Key(**base, device_class="cpu:Intel(R) Xeon(R) Processor:AVX512:1"))
    assert intel.key.device_class == "cpu:Intel(R) Xeon(R) Processor:1" and intel.anchors.baseline == 0.62
    assert records.find(tmp_path, Key(**base, device_class="cpu:AMD EPYC:AVX512:2")) is None  # threads differ


# --------------------------------------------------------------------------- records that stay current

ANCHORS = {"no_info": 0.0, "baseline": 0.5, "best": 1.0}


def _rec(task="optimizer", scale="ci", version="v1", device="cpu:A:1", torch="2.13", base=None, at="t0", host="h"):
    """A record; `base`: a brought model's, carrying the version of its task without the model."""
    prov = {"calibrated_at": at, "host": host, **({"base_version": base} if base else {})}
    return {
        "key": {"task": task, "scale": scale, "task_version": version, "device_class": device, "torch": torch},
        "anchors": ANCHORS,
        "provenance": prov,
    }


def _seed(grader, recs, details=()):
    """Write `recs` as anchors.yaml and one detail file per record of `details` (indices), by hand."""
    grader.mkdir(parents=True, exist_ok=True)
    records.anchors_path(grader).write_text(yaml.safe_dump({"records": recs}, sort_keys=False))
    for i in details:
        p = records.detail_path(grader, recs[i]["key"])
        p.parent.mkdir(exist_ok=True)
        p.write_text(json.dumps({**recs[i], "per_seed": []}))


def _keys(grader) -> list:
    return [r["key"] for r in records._records(records.anchors_path(grader))]


def test_a_store_removes_the_stale_records_of_its_task_and_scale_and_leaves_the_rest(tmp_path):
    g = tmp_path / "g"
    recs = [
        _rec(version="v0", device="cpu:A:1", at="t1"),  # 0 stale: same task, scale
        _rec(version="v0", device="cuda:H100", torch="2.11", at="t2"),  # 1 stale: another class and torch
        _rec(version="v1", device="cpu:B:1", at="t3"),  # 2 current, another class
        _rec(scale="smoke", version="v0", at="t4"),  # 3 another scale: left
        _rec(task="pruning", version="v0", at="t5"),  # 4 another task in the file: left
        _rec(version="m1", base="v1", at="t6"),  # 5 a brought model on the current base
        _rec(version="m0", base="v0", at="t7"),  # 6 a brought model on a stale base
        _rec(version="v-1", device="cpu:C:1", at="t8"),
    ]  # 7 stale, its record re-keyed since:
    rekeyed = _rec(version="v1", device="cpu:C:1", at="t8")  # 8 (the same calibration)
    _seed(g, recs + [rekeyed], details=range(9))
    stray = g / "calibration" / "notes.json"
    stray.write_text("[1, 2]")  # no detail file: left
    new = _rec(version="v1", device="cpu:A:1", at="t9")
    records.store(g, new, detail={"per_seed": [1]})
    kept = _keys(g)
    assert kept == [
        r["key"]
        for r in sorted(
            [recs[i] for i in (2, 3, 4, 5)] + [rekeyed, new],
            key=lambda r: (r["key"]["scale"], r["key"]["device_class"], r["key"]["task_version"]),
        )
    ]
    files = sorted(f.name for f in (g / "calibration").iterdir())
    want = sorted(
        [records.detail_path(g, recs[i]["key"]).name for i in (2, 3, 4, 5, 7)]
        + [records.detail_path(g, rekeyed["key"]).name, records.detail_path(g, new["key"]).name, "notes.json"]
    )
    assert files == want
    assert json.loads(records.detail_path(g, new["key"]).read_text())["per_seed"] == [1]


def test_a_brought_models_record_defines_the_current_base_too(tmp_path):
    """Storing a brought model's record (base v2) removes the repo's own records of v1 and another model's
    record on base v1, and keeps another model's record on base v2."""
    g = tmp_path / "g"
    _seed(
        g,
        [
            _rec(version="v1"),
            _rec(version="mA", base="v1", device="cpu:B:1"),
            _rec(version="mB", base="v2", device="cpu:C:1"),
        ],
    )
    records.store(g, _rec(version="mC", base="v2"))
    assert sorted(k["task_version"] for k in _keys(g)) == ["mB", "mC"]


def test_store_without_pruning_and_a_record_of_an_unknown_model(tmp_path):
    """prune=False (the re-keying scripts) stores only. A registry entry from before base versions stays
    (nothing says which of its versions is current), and while it does, a record without a base version
    that is not of the current version may be its model's: it stays; once the entry is gone, it goes."""
    g = tmp_path / "g"
    _seed(g, [_rec(version="v0"), _rec(version="old-model", device="cpu:B:1")])
    records.store(g, _rec(version="v1", device="cpu:C:1"), prune=False)
    assert len(_keys(g)) == 3
    (g / registry.REGISTRY).write_text(yaml.safe_dump({"models": [{"task_version": "x", "frozen_repo": "f"}]}))
    records.store(g, _rec(version="v1", device="cpu:D:1"))
    assert len(_keys(g)) == 4 and len(registry.entries(g)) == 1
    res = records.prune(g, "optimizer", {"ci": "v1"}, frozen="another repo")  # the tool knows the repo
    assert res.models == [{"task_version": "x", "frozen_repo": "f"}]
    assert sorted(k["task_version"] for k in _keys(g)) == ["v1", "v1"] and registry.entries(g) == []


def test_a_store_prunes_the_registry_entries_it_shows_stale(tmp_path):
    g = tmp_path / "g"
    _seed(g, [])
    entries = [
        {"task_version": "a", "base_version": "w0", "base_versions": {"ci": "v0", "smoke": "s0"}},
        {"task_version": "b", "base_version": "w1", "base_versions": {"ci": "v1", "smoke": "s0"}},
        {"task_version": "c", "frozen_repo": "f"},
    ]
    (g / registry.REGISTRY).write_text(yaml.safe_dump({"models": entries}))
    records.store(g, _rec(version="v1"))
    assert [e["task_version"] for e in registry.entries(g)] == ["b", "c"]
    # the tool, which knows the scale-less version and the repo: only what is current for it stays
    res = records.prune(g, "optimizer", {"ci": "v1", "smoke": "s1"}, whole="w2", frozen="f", dry_run=True)
    assert [e["task_version"] for e in res.models] == ["b"] and len(registry.entries(g)) == 2  # dry: kept


def test_prune_drops_a_scale_the_task_no_longer_has_and_dry_run_changes_nothing(tmp_path):
    g = tmp_path / "g"
    _seed(
        g,
        [
            _rec(scale="tiny", version="t0", at="t1"),
            _rec(version="v1", at="t2"),
            _rec(version="v0", device="cpu:B:1", at="t3"),
        ],
        details=[0, 1, 2],
    )
    before = {p: p.read_bytes() for p in g.rglob("*") if p.is_file()}
    res = records.prune(g, "optimizer", {"ci": "v1", "tiny": None}, dry_run=True)
    assert sorted(k["task_version"] for k in res.records) == ["t0", "v0"] and len(res.details) == 2
    assert {p: p.read_bytes() for p in g.rglob("*") if p.is_file() and p.suffix != ".lock"} == before
    records.prune(g, "optimizer", {"ci": "v1", "tiny": None})
    assert [k["task_version"] for k in _keys(g)] == ["v1"]
    assert [f.name for f in (g / "calibration").iterdir()] == [records.detail_path(g, _rec()["key"]).name]
    # a detail file of a stale version whose calibration a kept record has (re-keyed since) stays
    _seed(g, [_rec(version="v2", at="t2")], details=[0])
    records.prune(g, "optimizer", {"ci": "v2"})
    assert len(list((g / "calibration").iterdir())) == 2


def _current_writer(grader_dir, writer, start):
    start.wait()
    for r in range(ROUNDS):
        records.store(grader_dir, {"key": _key(writer, r, "v2"), "anchors": ANCHORS})


def test_concurrent_stores_prune_inside_the_lock(tmp_path):
    """Writers of the current version at once, over a file of stale records: every current record stays
    (a prune outside the lock would write back a file read before another writer's record), every stale
    one goes."""
    stale = [{"key": _key(w, r, "v1"), "anchors": ANCHORS} for w in range(WRITERS) for r in range(3)]
    _seed(tmp_path, stale)
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_current_writer, args=(tmp_path, w, start)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    start.set()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * WRITERS
    stored = {tuple(k.values()) for k in _keys(tmp_path)}
    assert stored == {tuple(_key(w, r, "v2").values()) for w in range(WRITERS) for r in range(ROUNDS)}


RECORDS = st.builds(
    lambda task, scale, version, device, base: _rec(task, scale, version, device, base=base),
    st.sampled_from(["optimizer", "pruning"]),
    st.sampled_from(["ci", "smoke", "full"]),
    st.sampled_from(["v0", "v1", "v2", "m0", "m1"]),
    st.sampled_from(["cpu:A:1", "cpu:B:2", "cuda:X"]),
    st.sampled_from([None, None, "v0", "v1", "v2"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(existing=st.lists(RECORDS, max_size=12), new=RECORDS)
def test_after_a_store_every_record_is_current_or_of_another_scale_or_task(tmp_path_factory, existing, new):
    g = tmp_path_factory.mktemp("g")
    _seed(g, existing)
    records.store(g, new)
    key, task, scale, now = new["key"], new["key"]["task"], new["key"]["scale"], records.record_base(new)
    after = records._records(records.anchors_path(g))
    assert new in after
    for r in after:  # nothing of the new record's task and scale with another base version stays
        k = r["key"]
        assert k["task"] != task or k["scale"] != scale or records.record_base(r) == now, r
    for r in existing:  # no current record was lost (but one of the new record's key, replaced)
        k = r["key"]
        if k != key and (k["task"] != task or k["scale"] != scale or records.record_base(r) == now):
            assert r in after, r
