"""The package reads as its data flow: folders are layers, and every module imports only below it.

FOLDERS lists ai4ai's layers bottom-up, each a folder of ai4ai/ with its modules in order
(docs/architecture.md says the same in prose); a subpackage's modules are listed in its folder as
`sub/module`, together, with `sub/__init__` (the package itself) where it falls in the order. A
module may import a module of a lower folder, or one listed before it in its own folder; `if TYPE_CHECKING:` imports count (a type-only import still
ties two modules in a circle); imports inside functions are not allowed (they exist to dodge a
cycle); and no module imports a command. The top folder, `ai4ai` itself, holds `pipeline` (the run's
steps) and the commands (`python -m ai4ai.X`): argument mapping only, imported by nothing. A new
module has to be placed here, which is the point.
"""

import ast
from pathlib import Path

from ai4ai import PROJECT_ROOT

PACKAGE = PROJECT_ROOT / "ai4ai"

FOLDERS = [
    # the package's own constants: PROJECT_ROOT, CONF_DIR, SCHEMA
    ("", ["__init__"]),
    # the types and files of a run: no harness logic; leaves, or only each other
    (
        "core",
        [
            "__init__",
            "console",
            "layout",
            "hidden",
            "trajectory",
            "task",
            "scoring",
            "result",
            "record",
            "provenance",
            "hostspeed",
        ],
    ),
    # the sandbox and what is copied into it (launcher, proxy_client, meter_wire: no ai4ai imports)
    (
        "sandbox",
        ["__init__", "launcher", "proxy_client", "meter_wire", "package_data", "walk", "cgroup", "tree", "box"],
    ),
    # the frozen repo and the agent's submission against it
    ("repo", ["__init__", "workspace", "registry", "models", "preparing", "meter", "patches", "leaks", "submission"]),
    # grading one submission: context -> train a seed -> evaluate -> grade seeds -> anchors
    ("grading", ["__init__", "plan", "context", "records", "devices", "evaluation", "training", "seeds", "anchors"]),
    # the agent's window: what it reads, the API gateway its CLI talks to, the proxy it calls
    ("window", ["__init__", "instructions", "usage", "gateway", "proxy"]),
    # agent kinds (found by module name), on what they share
    ("agents", ["base", "__init__", "cli", "baseline", "command", "patch", "claude", "codex"]),
    # reading runs and tasks: classification, reports, audits, task checks and tuning
    # (classify: a package, its syntax helpers -> kernel equivalence -> statements -> reachability ->
    # verdicts, then the package that re-exports them)
    (
        "analysis",
        [
            "__init__",
            "classify/syntax",
            "classify/kernels",
            "classify/statements",
            "classify/reach",
            "classify/verdict",
            "classify/__init__",
            "runs",
            "runpage",
            "reporting",
            "auditing",
            "task_checks",
            "tuning",
        ],
    ),
    # the run's steps, then the commands
    (
        "",
        ["pipeline", "entry", "run", "grade", "calibrate", "check_task", "audit", "report", "list", "prepare", "view"],
    ),
]
COMMANDS = {
    f"ai4ai.{m}" for m in ("run", "grade", "calibrate", "check_task", "audit", "report", "list", "prepare", "view")
}


def _name(folder: str, mod: str) -> str:
    """The dotted name of a module listed in FOLDERS (`sub/__init__` is the package `sub`)."""
    parts = "/".join(p for p in (folder, mod) if p).split("/")
    return ".".join(["ai4ai"] + (parts[:-1] if parts[-1] == "__init__" else parts))


LAYERS = [_name(f, m) for f, mods in FOLDERS for m in mods]
FOLDER_RANK = {}
for _i, (_f, _mods) in enumerate(FOLDERS):
    for _m in _mods:
        FOLDER_RANK[_name(_f, _m)] = _i


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
        base = base[: len(base) - node.level + 1]
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
    mods = set(_modules())
    missing = sorted(mods - set(LAYERS))
    assert not missing, f"place these modules in FOLDERS (tests/test_layering.py) and docs/architecture.md: {missing}"
    stale = sorted(set(LAYERS) - mods)
    assert not stale, f"FOLDERS lists modules that do not exist: {stale}"


def _violations(mods: dict, rank: dict) -> list[str]:
    bad = []
    for m, path in mods.items():
        top, inner = _imports(m, path, mods)
        bad += [f"{m} imports {t} inside a function (line {ln})" for t, ln in inner]
        for t, ln in top:
            if t == "ai4ai" or rank.get(t, -1) < rank.get(m, len(rank)):
                continue
            where = (
                "a higher folder"
                if FOLDER_RANK.get(t, -1) > FOLDER_RANK.get(m, -1)
                else "its own folder, listed after it"
            )
            bad.append(f"{m} imports {t}, which is not below it: {where} (line {ln})")
        bad += [f"{m} imports the command {t} (line {ln})" for t, ln in top + inner if t in COMMANDS]
    return bad


LONG = 520  # "no module over ~500 lines without a reason written at its top" (docs/architecture.md)


def _unexplained_long(mods: dict[str, Path]) -> list[str]:
    """The modules over LONG lines whose docstring does not say why (the words "over 500 lines")."""
    out = []
    for name, f in mods.items():
        text = f.read_text()
        n = text.count("\n")
        doc = ast.get_docstring(ast.parse(text)) or ""
        if n > LONG and "over 500 lines" not in " ".join(doc.split()):
            out.append(f"{name}: {n} lines")
    return out


def test_a_long_module_says_why_at_its_top(tmp_path):
    bad = _unexplained_long(_modules())
    assert not bad, f"split these, or say at the top why each is one module of over 500 lines: {bad}"
    # the check can fail: a long module without the reason, and with it
    f = tmp_path / "long.py"
    f.write_text('"""A module."""\n' + "x = 1\n" * (LONG + 1))
    assert _unexplained_long({"long": f}) == [f"long: {LONG + 2} lines"]
    f.write_text('"""A module, one file of over\n500 lines because..."""\n' + "x = 1\n" * (LONG + 1))
    assert _unexplained_long({"long": f}) == []


def test_modules_import_only_modules_below_them():
    rank = {m: i for i, m in enumerate(LAYERS)}
    assert len(rank) == len(LAYERS), "a module is listed twice in FOLDERS"
    bad = _violations(_modules(), rank)
    assert not bad, "\n".join(bad)


def test_folders_are_contiguous_layers():
    """A folder is one band of the order: its modules are listed together, never split by another folder's."""
    seen, last = set(), None
    for f, _mods in FOLDERS:
        assert f == last or f not in seen or f == "", f"folder {f!r} appears twice in FOLDERS"
        seen.add(f)
        last = f
    for f, mods in FOLDERS:
        for m in mods:
            path = PACKAGE / f / f"{m}.py"
            assert path.exists(), f"{_name(f, m)} is listed in folder {f or 'ai4ai'!r} but {path} does not exist"
        # a subpackage is one band of its folder: its modules are listed together
        subs = [m.split("/")[0] if "/" in m else None for m in mods]
        runs = [s for i, s in enumerate(subs) if s and (i == 0 or s != subs[i - 1])]
        assert len(runs) == len(set(runs)), f"a subpackage of {f!r} is split in FOLDERS: {mods}"


def test_the_checker_sees_a_cycle(tmp_path):
    """The check can fail: an import of a higher folder, of a later module of the same folder (also
    within a subpackage), and one inside a function."""
    pkg = tmp_path / "ai4ai"
    (pkg / "core").mkdir(parents=True)
    (pkg / "grading").mkdir()
    (pkg / "analysis" / "classify").mkdir(parents=True)
    for d in (pkg, pkg / "core", pkg / "grading", pkg / "analysis", pkg / "analysis" / "classify"):
        (d / "__init__.py").write_text("")
    (pkg / "analysis" / "classify" / "syntax.py").write_text("from ai4ai.analysis.classify.verdict import x\n")
    (pkg / "analysis" / "classify" / "verdict.py").write_text("")
    (pkg / "core" / "console.py").write_text("from ..grading.seeds import grade_seeds\n")
    (pkg / "core" / "layout.py").write_text("from ai4ai.core import task\n")
    (pkg / "core" / "task.py").write_text("")
    (pkg / "grading" / "seeds.py").write_text("def f():\n    from ai4ai.core.console import say\n")
    mods = {
        "ai4ai": pkg / "__init__.py",
        "ai4ai.core": pkg / "core" / "__init__.py",
        "ai4ai.grading": pkg / "grading" / "__init__.py",
        "ai4ai.core.console": pkg / "core" / "console.py",
        "ai4ai.core.layout": pkg / "core" / "layout.py",
        "ai4ai.core.task": pkg / "core" / "task.py",
        "ai4ai.grading.seeds": pkg / "grading" / "seeds.py",
        "ai4ai.analysis": pkg / "analysis" / "__init__.py",
        "ai4ai.analysis.classify": pkg / "analysis" / "classify" / "__init__.py",
        "ai4ai.analysis.classify.syntax": pkg / "analysis" / "classify" / "syntax.py",
        "ai4ai.analysis.classify.verdict": pkg / "analysis" / "classify" / "verdict.py",
    }
    rank = {m: i for i, m in enumerate(LAYERS)}
    bad = _violations(mods, rank)
    assert any("ai4ai.core.console imports ai4ai.grading.seeds" in b and "higher folder" in b for b in bad), bad
    assert any("ai4ai.core.layout imports ai4ai.core.task" in b and "own folder" in b for b in bad), bad
    assert any("ai4ai.grading.seeds imports ai4ai.core.console inside a function" in b for b in bad), bad
    assert any(
        "ai4ai.analysis.classify.syntax imports ai4ai.analysis.classify.verdict" in b and "own folder" in b for b in bad
    ), bad
    assert len(bad) == 4, bad
