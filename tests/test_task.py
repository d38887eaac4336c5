import copy

import pytest
import yaml

from ai4ai import PROJECT_ROOT
from ai4ai.analysis.task_checks import Report, contract_checks
from ai4ai.core.provenance import benchmark_version
from ai4ai.core.task import TaskError, list_tasks, load_task, parse_task

RAW = yaml.safe_load((PROJECT_ROOT / "conf" / "task" / "optimizer.yaml").read_text())


def test_tasks_are_discovered_by_file():
    assert "optimizer" in list_tasks()
    t = load_task("optimizer")
    assert t.metric.direction == "min" and t.metric.transform == "neg_log"
    assert t.is_editable("train.py") and t.is_editable("algorithm/new_rule.py")
    assert not t.is_editable("model.py") and not t.is_editable("algorithm/sub/x.py")
    assert t.deterministic is False
    d = copy.deepcopy(RAW)
    d["deterministic"] = True
    assert parse_task(d, "test").deterministic is True


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (lambda d: d.update(surprise=1), "unknown keys"),
        (lambda d: d["metric"].update(direction="up"), "direction"),
        (lambda d: d["scales"]["smoke"].update(calibration_seeds=[1, 2]), "at least 5"),
        (lambda d: d["scales"]["smoke"].update(grader_seeds=[1000]), "disjoint"),
        (lambda d: d["scales"].update(huge=d["scales"]["ci"]), "unknown scale"),
        (lambda d: d.pop("entry"), "missing keys"),
        (lambda d: d.update(model="model.build_model"), "module:function"),
        (lambda d: d.update(deterministic="yes"), "deterministic must be true or false"),
        (lambda d: (d["data"].update(grading="grading_data"), d["data"].pop("env")), "data.grading needs data.env"),
        (lambda d: (d["data"].update(grading="grading_data"), d.pop("meter")), "data.grading needs data.env"),
        # optimizer prepares nothing: instance-dependent prepared models need the prepare step that makes them
        (
            lambda d: d["data"].update(grading_artifacts=["artifacts/base_{scale}.safetensors"]),
            "data.grading_artifacts needs data.grading",
        ),
        (
            lambda d: (
                d["data"].update(
                    grading_artifacts=["a"],
                    artifacts={"command": "python prepare.py", "writes": ["a"], "scales": ["full"]},
                ),
                d["data"].pop("grading"),
            ),
            "data.grading_artifacts needs data.grading",
        ),
    ],
)
def test_bad_task_configs_are_rejected_with_a_reason(mutate, msg):
    d = copy.deepcopy(RAW)
    mutate(d)
    with pytest.raises(TaskError, match=msg):
        parse_task(d, "test")


def test_a_fresh_graded_instance_is_declared_by_data_grading():
    d = copy.deepcopy(RAW)
    d["data"].pop("grading")
    assert parse_task(d, "test").grading_data is None
    d["data"]["grading"] = "grading_data"
    assert parse_task(d, "test").grading_data == "grading_data"
    for name in ("reward_model", "optimizer", "graph_diffusion", "sft"):
        assert load_task(name).grading_data == "grading_data"
    assert load_task("pruning").grading_data is None
    # sft's base model depends on the instance (pretrained on its table): graded runs get the graded one's
    assert load_task("sft").grading_artifacts == ("artifacts/base_{scale}.safetensors",)
    # a prepared model the meter holds (a teacher): made for the graded instance, served by the meter
    assert load_task("distillation").grading_artifacts == ("artifacts/teacher_{scale}.safetensors",)
    assert load_task("optimizer").grading_artifacts == ()


def test_unknown_task_names_the_known_ones():
    with pytest.raises(TaskError, match="optimizer"):
        load_task("no_such_task")


def test_contract_checks_pass_for_optimizer():
    rep = Report(lines=[])
    contract_checks(load_task("optimizer"), rep)
    assert rep.failed == 0, [line for line in rep.lines if line[0] == "FAIL"]
    assert sum(1 for line in rep.lines if line[0] == "PASS") > 15


def test_contract_checks_catch_a_corrupted_data_file(tmp_path, monkeypatch):
    import shutil
    from dataclasses import replace

    t = load_task("optimizer")
    repo = tmp_path / "repo"
    shutil.copytree(t.repo, repo)
    (repo / "data" / "val.u8").write_bytes(b"\0" * 16)
    rep = Report(lines=[])
    contract_checks(replace(t, repo=repo, protected=t.protected + ("missing.py",)), rep)
    fails = [line[1] for line in rep.lines if line[0] == "FAIL"]
    assert "checksum of data/val.u8" in fails and "protected file missing.py exists" in fails


def test_benchmark_version_ignores_anchor_records_but_not_the_grader(tmp_path, monkeypatch):
    import ai4ai.core.provenance as prov

    v = benchmark_version()
    assert v == benchmark_version()
    fake_root = tmp_path / "root"
    import shutil

    for d in ("repos_frozen", "grader_hidden", "conf/task", "ai4ai_kernels"):
        shutil.copytree(PROJECT_ROOT / d, fake_root / d, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(prov, "PROJECT_ROOT", fake_root)
    base = prov.benchmark_version()
    (fake_root / "grader_hidden" / "optimizer" / "anchors.yaml").write_text("records: []\n")
    assert prov.benchmark_version() == base
    (fake_root / "grader_hidden" / "optimizer" / "grader.py").write_text("# changed\n")
    assert prov.benchmark_version() != base


def test_task_version_ignores_other_tasks(tmp_path, monkeypatch):
    """Anchors are keyed by the task version: adding another task leaves it unchanged."""
    import shutil
    from dataclasses import replace

    import ai4ai.core.provenance as prov

    fake_root = tmp_path / "root"
    for d in ("repos_frozen", "grader_hidden", "conf/task", "ai4ai_kernels"):
        shutil.copytree(PROJECT_ROOT / d, fake_root / d, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(prov, "PROJECT_ROOT", fake_root)
    t = load_task("optimizer")
    t = replace(t, repo=fake_root / "repos_frozen" / "optimizer", grader=fake_root / "grader_hidden" / "optimizer")
    tv, bv = prov.task_version(t), prov.benchmark_version()
    (fake_root / "repos_frozen" / "eleventh").mkdir()
    (fake_root / "repos_frozen" / "eleventh" / "train.py").write_text("print(1)\n")
    assert prov.benchmark_version() != bv and prov.task_version(t) == tv
    (t.repo / "optim.py").write_text("# changed\n")
    assert prov.task_version(t) != tv


def test_the_shipped_check_fails_a_correct_record_at_its_stated_rate():
    """check_task's "shipped lands at 0.1": both the grader seeds' mean and 0.1 (the calibration seeds'
    mean) are noisy; a record that describes the code must fail 3 standard errors of their difference
    (0.27%) of the time, not the ~1.8% that counting only the grader seeds' share gives (5 vs 3 seeds)."""
    import numpy as np

    from ai4ai.analysis.task_checks import shipped_tolerance

    rng = np.random.default_rng(0)
    draws = 400_000
    for n_graded, n_cal in ((3, 5), (3, 10), (1, 5)):
        gap = rng.normal(size=(draws, n_graded)).mean(1) - rng.normal(size=(draws, n_cal)).mean(1)
        rate = float(np.mean(np.abs(gap) > shipped_tolerance(1.0, n_graded, n_cal)))
        assert 0.0018 < rate < 0.0037, (n_graded, n_cal, rate)
    assert shipped_tolerance(0.02, 3, 5) > 3 * 0.02 / np.sqrt(3)


@pytest.mark.parametrize("name", list_tasks())
def test_every_example_names_its_method_family(name):
    from ai4ai.analysis.task_checks import example_families

    patches = {p.name for p in (PROJECT_ROOT / "examples" / name).glob("*.patch")}
    assert set(example_families(name)) == patches


@pytest.mark.parametrize(
    "text, fails",
    [
        ("a.patch: schedule\nb.patch: averaging\n", None),
        ("a.patch: schedule\n", "without a family: ['b.patch']"),
        ("a.patch: schedule\nb.patch: averaging\nc.patch: masking\n", "not an example: ['c.patch']"),
        ("a.patch: schedule\nb.patch: ''\n", "must map each example's file name"),
        ("- a.patch\n- b.patch\n", "must map each example's file name"),
        ("a.patch: [1, 2]\nb.patch: x\n", "must map each example's file name"),
        ("a.patch: {x\n", "while parsing"),
    ],
)
def test_a_families_file_that_does_not_match_the_examples_fails_with_a_reason(tmp_path, monkeypatch, text, fails):
    from ai4ai.analysis import task_checks

    t = load_task("optimizer")
    ex = tmp_path / "examples" / t.name
    ex.mkdir(parents=True)
    for n in ("a.patch", "b.patch"):
        (ex / n).write_text((PROJECT_ROOT / "examples" / t.name / "muon.patch").read_text())
    (ex / "families.yaml").write_text(text)
    monkeypatch.setattr(task_checks, "PROJECT_ROOT", tmp_path)
    rep = Report(lines=[])
    contract_checks(t, rep)
    bad = [line for line in rep.lines if line[0] == "FAIL"]
    if fails is None:
        assert bad == []
    else:
        assert len(bad) == 1 and "families.yaml" in bad[0][1] and fails in bad[0][2], bad


def test_two_examples_of_one_family_count_once_and_an_unnamed_one_not_at_all():
    from ai4ai.analysis.task_checks import families_that_pay

    fam = {"dpop.patch": "anchored", "rpo.patch": "anchored", "pft.patch": "supervised"}
    assert families_that_pay(["dpop.patch", "rpo.patch"], fam) == ["anchored"]
    assert families_that_pay(["dpop.patch", "pft.patch", "new.patch"], fam) == ["anchored", "supervised"]
    assert families_that_pay([], fam) == []
