import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ai4ai import PROJECT_ROOT
from tests.requirements import available, mark_slow, missing, required, requires

CONF = str(PROJECT_ROOT / "conf")


def compose_in(outputs: Path, name: str, overrides: list[str]):
    """A real config (run, grade, ...) with its outputs in `outputs`."""
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose(config_name=name, overrides=[f"outputs={outputs}", "progress=false", *overrides])


@pytest.fixture
def compose_cfg(tmp_path):
    """Compose a real config (run, grade, ...) with outputs redirected to tmp_path."""
    return lambda name, overrides: compose_in(tmp_path, name, overrides)


@pytest.fixture(scope="session")
def baseline_ci_run(tmp_path_factory):
    """One real baseline run (agent=baseline, the shipped algorithm) of the optimizer task at ci,
    through `pipeline.run` with outputs in a fresh folder: (cfg, run_dir, result). A minute or so of
    training and grading, shared by the tests that read such a run (end to end, audit)."""
    import json

    from ai4ai import pipeline

    tmp = tmp_path_factory.mktemp("baseline_ci")
    cfg = compose_in(tmp, "config", ["task=optimizer", "scale=ci", "agent=baseline"])
    run_dir = tmp / "run_baseline"
    pipeline.run(cfg, run_dir)
    return cfg, run_dir, json.loads((run_dir / "result.json").read_text())


# Two edits of optim.py, a proxy call after each, then an edit of a protected file (dropped from the
# submission) and a look at the sandbox's network and the project's absence, and the submission marked.
EDIT_AND_PROXY = (
    "sed -i 's/^LR = 3e-3/LR = 2e-3/' optim.py && ai4ai-proxy; "
    "sed -i 's/^LR = 2e-3/LR = 4e-3/' optim.py && ai4ai-proxy; "
    "echo '# hacked' >> model.py && ls /sys/class/net && test ! -e /work; ai4ai-proxy --submit"
)


@pytest.fixture(scope="session")
def command_ci_run(tmp_path_factory):
    """One real ci run of the optimizer task by a command agent (EDIT_AND_PROXY) through
    `pipeline.run`: (run_dir, result). A few minutes, shared by the tests that read such a run (the
    run page in test_view, the command agent in test_end_to_end)."""
    import json

    from ai4ai import pipeline

    tmp = tmp_path_factory.mktemp("command_ci")
    # a roomy CPU cap: the page's curve needs a run that got past a few log lines on a slow CI host
    cfg = compose_in(
        tmp,
        "config",
        ["task=optimizer", "scale=ci", "agent=command", "agent.command=true", "task.scales.ci.cap_factor=4"],
    )
    cfg.agent.command = EDIT_AND_PROXY  # set after composing: no override grammar to quote for
    run_dir = tmp / "run"
    pipeline.run(cfg, run_dir)
    return run_dir, json.loads((run_dir / "result.json").read_text())


needs_bwrap = requires("sandbox")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "requires(group): needs bubblewrap, chromium or the CLIs (tests/requirements.py)"
    )
    required()  # an unknown group in AI4AI_REQUIRE stops the run before anything is collected


def pytest_collection_modifyitems(config, items):
    mark_slow(items)


def pytest_runtest_setup(item):
    for mark in item.iter_markers("requires"):
        ok, reason = available(mark.args[0])
        if not ok:
            missing(mark.args[0], reason)


@pytest.fixture
def optimizer_task():
    from ai4ai.core.task import load_task

    return load_task("optimizer")


@pytest.fixture
def repo_copy(tmp_path, optimizer_task):
    dest = tmp_path / "ws"
    shutil.copytree(optimizer_task.repo, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


@pytest.fixture
def fake_api():
    """make(mode, key): a started fake model API (tests/fake_api.py), stopped after the test."""
    from tests.fake_api import FakeAPI

    apis = []

    def make(mode: str, key: str) -> FakeAPI:
        api = FakeAPI(mode, key).start()
        apis.append(api)
        return api

    yield make
    for a in apis:
        a.stop()


def example(name: str) -> Path:
    return PROJECT_ROOT / "examples" / "optimizer" / name


def graded_context(compose_cfg, tmp_path: Path, task: str, scale: str):
    """A real grading context whose task reads its anchors from a copy of its grader folder in
    tmp_path (so a test may rewrite the records)."""
    from dataclasses import replace

    from ai4ai.grading.context import context

    ctx = context(compose_cfg("grade", [f"task={task}", f"scale={scale}"]), tmp_path / "run")
    grader = tmp_path / "grader"
    shutil.copytree(ctx.task.grader, grader, ignore=shutil.ignore_patterns("__pycache__", "calibration"))
    return replace(ctx, task=replace(ctx.task, grader=grader))
