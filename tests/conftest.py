import shutil
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from ai4ai import PROJECT_ROOT
from ai4ai.sandbox import bwrap_available

CONF = str(PROJECT_ROOT / "conf")


@pytest.fixture
def compose_cfg(tmp_path):
    """Compose a real config (run, grade, ...) with outputs redirected to tmp_path."""
    def _compose(name: str, overrides: list[str]):
        with initialize_config_dir(config_dir=CONF, version_base="1.3"):
            return compose(config_name=name, overrides=[f"outputs={tmp_path}", "progress=false", *overrides])
    return _compose


needs_bwrap = pytest.mark.skipif(not bwrap_available(), reason="bubblewrap is not installed or cannot run here")


@pytest.fixture
def optimizer_task():
    from ai4ai.task import load_task
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
