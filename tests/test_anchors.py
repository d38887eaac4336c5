"""anchors.store under concurrent writers: calibrations of different scales or device classes
for one task may finish at the same moment, and none of their records may be lost."""
import multiprocessing

from ai4ai.grading import anchors

WRITERS, ROUNDS = 4, 15


def _key(writer: int, round_: int) -> dict:
    return {"task": "optimizer", "scale": "ci", "task_version": f"v{writer}-{round_:03d}",
            "device_class": f"cpu:test:{writer}", "torch": "2.13"}


def _writer(grader_dir, writer, start):
    start.wait()
    for r in range(ROUNDS):
        anchors.store(grader_dir, {"key": _key(writer, r), "anchors": {"no_info": 0.0, "baseline": 0.5, "best": 1.0}})


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
    stored = {tuple(r["key"].values()) for r in anchors._records(anchors.anchors_path(tmp_path))}
    expected = {tuple(_key(w, r).values()) for w in range(WRITERS) for r in range(ROUNDS)}
    exits = [p.exitcode for p in procs]
    # two writers inside the lock at once show as lost records, or as one writer's temp file
    # renamed away under the other (a crash)
    assert (len(expected - stored), exits) == (0, [0] * WRITERS), f"{len(expected - stored)} of {len(expected)} records lost"
    assert stored == expected


def test_store_replaces_the_record_with_the_same_key(tmp_path):
    anchors.store(tmp_path, {"key": _key(0, 0), "anchors": {"no_info": 0.0, "baseline": 0.5, "best": 1.0}})
    anchors.store(tmp_path, {"key": _key(0, 0), "anchors": {"no_info": 0.0, "baseline": 0.6, "best": 1.0}})
    recs = anchors._records(anchors.anchors_path(tmp_path))
    assert [r["anchors"]["baseline"] for r in recs] == [0.6]


def test_another_class_record_of_the_same_cpu_model_comes_first(tmp_path):
    """With no record of this host's class (model, instruction set, threads), the one of the same
    CPU model (another instruction set, or a label from before it was part of the class) is used
    at ci/smoke, not another model's, wherever the files list them."""
    from ai4ai.grading.context import Key
    base = {"task": "optimizer", "scale": "smoke", "task_version": "v1", "torch": "2.13"}
    for cls, baseline in (("cpu:AMD EPYC:1", 0.61), ("cpu:Intel(R) Xeon(R) Processor:1", 0.62), ("cpu:Zeta:1", 0.63)):
        anchors.store(tmp_path, {"key": {**base, "device_class": cls}, "anchors": {"no_info": 0.0, "baseline": baseline, "best": 1.0},
                                 "phi_std": 0.01, "train_wall_s": {"max": 1.0}})
    rec = anchors.find(tmp_path, Key(**base, device_class="cpu:AMD EPYC:AVX512:1"))
    assert rec.match == "metered-cpu" and rec.key.device_class == "cpu:AMD EPYC:1" and rec.anchors.baseline == 0.61
    other = anchors.find(tmp_path, Key(**base, device_class="cpu:Other:AVX2:1"))
    assert other.match == "metered-cpu"
    intel = anchors.find(tmp_path, Key(**base, device_class="cpu:Intel(R) Xeon(R) Processor:AVX512:1"))
    assert intel.key.device_class == "cpu:Intel(R) Xeon(R) Processor:1" and intel.anchors.baseline == 0.62
    assert anchors.find(tmp_path, Key(**base, device_class="cpu:AMD EPYC:AVX512:2")) is None     # threads differ
