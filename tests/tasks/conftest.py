"""Every frozen repo has top-level modules of the same names (config, model, data, ...).

A test module that imports one repo's modules must never see another's, so each test module
starts and ends with none of them loaded and sys.path as it was.
"""
import sys
import tempfile

import pytest

from ai4ai import PROJECT_ROOT

REPO_ROOTS = (str(PROJECT_ROOT / "repos_frozen"), tempfile.gettempdir())


def _drop_repo_modules() -> None:
    for name, mod in list(sys.modules.items()):
        if (getattr(mod, "__file__", None) or "").startswith(REPO_ROOTS) and not name.startswith("ai4ai"):
            del sys.modules[name]


@pytest.fixture(autouse=True, scope="module")
def isolated_repo_imports():
    path = list(sys.path)
    _drop_repo_modules()
    yield
    sys.path[:] = path
    _drop_repo_modules()
