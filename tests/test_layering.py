"""The package reads as its data flow: every module imports only modules below it.

LAYERS lists ai4ai's modules bottom-up, in data-flow order (docs/architecture.md says the same
in prose). A module may import only modules listed before it, `if TYPE_CHECKING:` imports included
(a type-only import still ties the two modules in a circle); imports inside functions are not
allowed (they exist to dodge a cycle); and no module imports a command. A new module has to be placed here, which is the point.
"""
import ast
from pathlib import Path

from ai4ai import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "ai4ai"

LAYERS = [
    # leaves: no ai4ai imports, or only each other
    "ai4ai", "ai4ai.console", "ai4ai.layout", "ai4ai.hidden", "ai4ai.package_data", "ai4ai.gateway",
    "ai4ai.launcher", "ai4ai.proxy_client", "ai4ai.meter_wire", "ai4ai.trajectory", "ai4ai.hostspeed",
    # the task and the things it is made of
    "ai4ai.task", "ai4ai.scoring", "ai4ai.provenance", "ai4ai.sandbox", "ai4ai.workspace", "ai4ai.models", "ai4ai.preparing", "ai4ai.meter", "ai4ai.plan",
    "ai4ai.patches", "ai4ai.submission",
    "ai4ai.evaluation", "ai4ai.record", "ai4ai.result", "ai4ai.instructions", "ai4ai.classify",
    # agents
    "ai4ai.agents.base", "ai4ai.agents", "ai4ai.agents.cli", "ai4ai.agents.baseline", "ai4ai.agents.command",
    "ai4ai.agents.patch", "ai4ai.agents.claude", "ai4ai.agents.codex",
    # a run: context -> train one seed -> grade seeds -> anchors (calibrate) -> proxy -> pipeline
    "ai4ai.context", "ai4ai.training", "ai4ai.grading", "ai4ai.anchors", "ai4ai.proxy",
    "ai4ai.task_checks", "ai4ai.tuning", "ai4ai.reporting", "ai4ai.auditing", "ai4ai.pipeline",
    # commands: argument mapping only; nothing imports them
    "ai4ai.entry", "ai4ai.run", "ai4ai.grade", "ai4ai.calibrate", "ai4ai.check_task", "ai4ai.audit",
    "ai4ai.report", "ai4ai.list", "ai4ai.prepare",
]
COMMANDS = {"ai4ai.run", "ai4ai.grade", "ai4ai.calibrate", "ai4ai.check_task", "ai4ai.audit", "ai4ai.report",
            "ai4ai.list", "ai4ai.prepare"}


def _modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PACKAGE.rglob("*.py")):
        parts = f.relative_to(PROJECT_ROOT).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def _resolve(mod: str, is_pkg: bool, node, known) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name in known]
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    if node.level:
        base = base[:len(base) - node.level + 1]
        target = ".".join(base + ([node.module] if node.module else []))
    else:
        target = node.module or ""
    out = []
    for a in node.names:
        full = f"{target}.{a.name}"
        out.append(full if full in known else target)
    return [t for t in out if t in known]


def _imports(mod: str, path: Path, known) -> tuple[list, list]:
    """(top-level ai4ai imports, ai4ai imports inside a function or class body) of a module."""
    tree = ast.parse(path.read_text())
    top, inner = [], []
    # module level: the body, and the body of a module-level `if TYPE_CHECKING:` (checked like any import)
    top_ids = {id(n) for n in tree.body}
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            top_ids |= {id(n) for n in node.body}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            targets = [t for t in _resolve(mod, path.name == "__init__.py", node, known) if t != mod]
            (top if id(node) in top_ids else inner).extend((t, node.lineno) for t in targets)
    return top, inner


def test_every_module_is_placed_in_a_layer():
    missing = sorted(set(_modules()) - set(LAYERS))
    assert not missing, f"place these modules in LAYERS (tests/test_layering.py) and docs/architecture.md: {missing}"


def test_modules_import_only_modules_below_them():
    mods = _modules()
    rank = {m: i for i, m in enumerate(LAYERS)}
    bad = []
    for m, path in mods.items():
        top, inner = _imports(m, path, mods)
        bad += [f"{m} imports {t} inside a function (line {ln})" for t, ln in inner]
        bad += [f"{m} imports {t}, which is not below it (line {ln})" for t, ln in top
                if t != "ai4ai" and rank.get(t, -1) >= rank.get(m, len(LAYERS))]
        bad += [f"{m} imports the command {t} (line {ln})" for t, ln in top + inner if t in COMMANDS]
    assert not bad, "\n".join(bad)


def test_the_checker_sees_a_cycle(tmp_path):
    """The check can fail: a module importing one above it, and one importing inside a function."""
    pkg = tmp_path / "ai4ai"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "console.py").write_text("from .pipeline import run\n")
    (pkg / "pipeline.py").write_text("def f():\n    from .console import say\n")
    known = {"ai4ai", "ai4ai.console", "ai4ai.pipeline"}
    top, _ = _imports("ai4ai.console", pkg / "console.py", known)
    _, inner = _imports("ai4ai.pipeline", pkg / "pipeline.py", known)
    assert top == [("ai4ai.pipeline", 1)] and inner == [("ai4ai.console", 2)]
    rank = {m: i for i, m in enumerate(LAYERS)}
    assert rank["ai4ai.pipeline"] > rank["ai4ai.console"]
