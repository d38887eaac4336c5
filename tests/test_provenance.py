"""The task version keys the anchors: it moves with what the shipped algorithm's grading depends on,
and with nothing else."""

import shutil
from dataclasses import replace

import pytest

from ai4ai.core import hidden, provenance
from ai4ai.core.task import list_tasks, load_task


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A copy of the parts of the project a task version reads, with PROJECT_ROOT pointing at it."""
    root = tmp_path / "p"
    for d in ("repos_frozen/optimizer", "grader_hidden/optimizer", "grader_hidden/common", "ai4ai_kernels"):
        shutil.copytree(provenance.PROJECT_ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "conf" / "task").mkdir(parents=True)
    shutil.copy(provenance.PROJECT_ROOT / "conf/task/optimizer.yaml", root / "conf/task/optimizer.yaml")
    monkeypatch.setattr(provenance, "PROJECT_ROOT", root)
    task = load_task("optimizer")

    class T:
        name, repo, grader = task.name, root / "repos_frozen/optimizer", root / "grader_hidden/optimizer"

    return root, T


def test_version_ignores_prose_allowances_and_unused_kernels(project):
    root, task = project
    v = provenance.task_version(task)
    cfg = root / "conf/task/optimizer.yaml"
    cfg.write_text(
        cfg.read_text()
        .replace("description: >-", "description: >-\n  Reworded.")
        .replace("n_params:", "n_params: 1 #", 1)
        + "\n# a comment\n"
    )
    (root / "ai4ai_kernels" / "README.md").write_text("rewritten")
    (root / "ai4ai_kernels" / "adamw.py").write_text("# changed\n")  # no optimizer file imports the kernels
    (root / "grader_hidden/optimizer/anchors.yaml").write_text("records: []\n")
    assert provenance.task_version(task) == v
    assert provenance.benchmark_version() != ""


@pytest.mark.parametrize("change", ["repo", "grader", "config", "kernel_used", "common"])
def test_version_moves_with_what_grading_depends_on(project, change):
    root, task = project
    v = provenance.task_version(task)
    if change == "repo":
        (root / "repos_frozen/optimizer/model.py").write_text("# changed\n")
    elif change == "grader":
        (root / "grader_hidden/optimizer/grader.py").write_text("# changed\n")
    elif change == "config":
        cfg = root / "conf/task/optimizer.yaml"
        cfg.write_text(cfg.read_text().replace("threads: 2", "threads: 1", 1))
    elif change == "common":  # the graders' shared library, which optimizer's grader imports
        (root / "grader_hidden/common/lm.py").write_text("# changed\n")
    else:
        (root / "repos_frozen/optimizer/train.py").write_text("import ai4ai_kernels\n")
        v = provenance.task_version(task)
        (root / "ai4ai_kernels" / "adamw.py").write_text("# changed\n")
    assert provenance.task_version(task) != v


def test_a_scale_block_moves_only_its_own_version(project):
    """full's wall-clock default is read by no ci or smoke grading: raising it (as a GPU measurement asked)
    must not invalidate the ci and smoke anchors, and must move full's; a top-level key moves all three."""
    root, task = project
    before = {s: provenance.task_version(task, s) for s in ("ci", "smoke", "full")}
    cfg = root / "conf/task/optimizer.yaml"
    text = cfg.read_text()
    full = text.index("\n  full:")
    cfg.write_text(text[:full] + text[full:].replace("default_cap_s:", "default_cap_s: 99999 #", 1))
    after = {s: provenance.task_version(task, s) for s in ("ci", "smoke", "full")}
    assert after["ci"] == before["ci"] and after["smoke"] == before["smoke"]
    assert after["full"] != before["full"]
    cfg.write_text(text.replace("entry: python train.py", "entry: python  train.py --x", 1))
    assert all(provenance.task_version(task, s) != before[s] for s in before)


@pytest.mark.parametrize("tier", ["full", "quick"])
def test_preparing_a_gpu_tiers_artifacts_leaves_the_other_scales_versions(tmp_path, tier):
    """`python -m ai4ai.prepare scale=full` (or quick) writes its prepared model and a checksum line into
    the repo: that tier's version moves with them (its anchors depend on that model), the CPU scales'
    and the other GPU tier's do not."""
    from dataclasses import replace

    scales = ("ci", "smoke", "quick", "full")
    task = load_task("sft")
    repo = tmp_path / "sft"
    shutil.copytree(task.repo, repo, ignore=shutil.ignore_patterns("__pycache__"))
    t = replace(task, repo=repo)
    before = {s: provenance.task_version(t, s) for s in scales}
    assert before["ci"] == provenance.task_version(task, "ci")  # the copy hashes as the original
    (art,) = task.artifacts.files(tier)
    (repo / art).write_bytes(f"a prepared {tier} model".encode())
    sums = repo / art.rsplit("/", 1)[0] / "SHA256SUMS"
    sums.write_text(sums.read_text() + f"{'0' * 64}  {art.rsplit('/', 1)[1]}\n")
    after = {s: provenance.task_version(t, s) for s in scales}
    assert {s: after[s] == before[s] for s in scales} == {s: s != tier for s in scales}
    (repo / "train.py").write_text((repo / "train.py").read_text() + "\n# an edit\n")
    assert provenance.task_version(t, "ci") != before["ci"]  # anything else still moves it


@pytest.fixture
def graders(tmp_path, monkeypatch):
    """Every task pointed at a copy of grader_hidden/ (the shared library included) and conf/task/, with
    PROJECT_ROOT at the copy: (root, {task name: task})."""
    root = tmp_path / "p"
    for d in ("grader_hidden", "conf/task", "ai4ai_kernels"):
        shutil.copytree(provenance.PROJECT_ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "PROJECT_ROOT", root)
    return root, {n: replace(load_task(n), grader=root / "grader_hidden" / n) for n in list_tasks()}


def _versions(tasks: dict) -> dict:
    return {(n, s): provenance.task_version(t, s) for n, t in tasks.items() for s in t.scales}


def test_the_shared_grader_library_moves_exactly_the_versions_of_the_tasks_that_import_it(graders):
    """grader_hidden/common/ is versioned with the graders that import it: an edit to one of its files, or
    a new file in it, moves every version (every scale) of the tasks whose grader imports it, and no
    version of the others, whose anchors stay current."""
    root, tasks = graders
    users = {n for n, t in tasks.items() if hidden.uses_common(t.grader)}
    assert users == {"optimizer", "pruning"}  # the HMM source and the LM likelihood
    assert "common" not in tasks
    lib = root / "grader_hidden" / "common"
    for edit in (
        lambda: (lib / "hmm.py").write_text((lib / "hmm.py").read_text() + "\n# an edit\n"),
        lambda: (lib / "extra.py").write_text("X = 1\n"),
    ):
        before = _versions(tasks)
        edit()
        after = _versions(tasks)
        moved = {k for k in before if before[k] != after[k]}
        assert moved == {k for k in before if k[0] in users}, sorted(moved)


def test_a_grader_that_starts_importing_the_library_takes_its_hash(graders):
    """The rule reads the grader's imports: sft's grader does not import the library (an edit to it leaves
    sft's versions), and once a module of sft's grader imports it, sft's versions move, and move again
    with the library."""
    root, tasks = graders
    sft = tasks["sft"]
    lib = root / "grader_hidden" / "common" / "lm.py"
    v0 = _versions({"sft": sft})
    lib.write_text(lib.read_text() + "\n# an edit\n")
    assert _versions({"sft": sft}) == v0
    (sft.grader / "shared.py").write_text('"""Uses the common library."""\nfrom ..common import lm  # noqa: F401\n')
    v1 = _versions({"sft": sft})
    assert all(v1[k] != v0[k] for k in v0)
    lib.write_text(lib.read_text() + "\n# another edit\n")
    v2 = _versions({"sft": sft})
    assert all(v2[k] != v1[k] for k in v1)


def test_a_grader_that_imports_a_missing_library_has_no_version(graders):
    root, tasks = graders
    shutil.rmtree(root / "grader_hidden" / "common")
    with pytest.raises(FileNotFoundError, match="shared library"):
        provenance.task_version(tasks["optimizer"], "ci")
    assert provenance.task_version(tasks["sft"], "ci")  # a task that does not import it is unaffected
