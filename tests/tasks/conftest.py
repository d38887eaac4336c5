"""Every frozen repo has top-level modules of the same names (config, model, data, ...).

A test module that imports one repo's modules must never see another's, so each test module
starts with none of them loaded and with sys.path as the previous module found it. (A hook, not
a module-scoped fixture: it runs before the new module's own fixtures set anything up.)
"""

import sys

from ai4ai import PROJECT_ROOT

REPOS = str(PROJECT_ROOT / "repos_frozen") + "/"
_state = {"module": None, "path": None}


def _drop_repo_modules() -> None:
    """Top-level modules loaded from a frozen repo (config, model, data...)."""
    for name, mod in list(sys.modules.items()):
        if "." not in name and (getattr(mod, "__file__", None) or "").startswith(REPOS):
            del sys.modules[name]


def pytest_runtest_setup(item):
    module = getattr(getattr(item, "module", None), "__name__", None)
    if module == _state["module"]:
        return
    if _state["path"] is not None:
        sys.path[:] = _state["path"]
    _drop_repo_modules()
    _state.update(module=module, path=list(sys.path))
