"""Reachability: what the entry point can run, read from every Python file of the repo (rule 0).

Reach(sources, entry_rel) is the graph of modules and top-level definitions reachable from the
entry script; entry_script reads the script from an entry command, python_sources collects a
repo's Python files.
"""

from __future__ import annotations

import ast
import shlex
from pathlib import Path

from ai4ai.analysis.classify.syntax import COMPOUND_BODIES, dotted, header, is_docstring

# What `python train.py` can execute, read from the syntax trees of every Python file in the
# patched repo. Nodes are modules (their top-level code runs on import) and top-level
# definitions (a function's body runs only if something reachable names it; a class counts as
# a whole, every method included, since methods run through objects, not names). Wherever the
# trees cannot say what runs (eval, exec, importlib with a computed name, sys.modules, getattr
# of a module with a computed name, subprocess), the analysis gives up towards reachable: a
# real change may be over-counted, never missed.

# decorators that wrap a function without registering it anywhere: a dead function under one
# of these stays dead; under any other decorator it may be registered in a table, so it counts
PURE_DECORATORS = frozenset(
    {
        "staticmethod",
        "classmethod",
        "property",
        "setter",
        "getter",
        "deleter",
        "no_grad",
        "inference_mode",
        "enable_grad",
        "compile",
        "script",
        "jit",
        "lru_cache",
        "cache",
        "cached_property",
        "wraps",
        "dataclass",
        "contextmanager",
        "abstractmethod",
        "overload",
        "final",
        "total_ordering",
    }
)
# calls whose target the trees cannot name when the argument is computed
DYNAMIC_IMPORTS = frozenset(
    {
        "import_module",
        "run_path",
        "run_module",
        "spec_from_file_location",
        "module_from_spec",
        "exec_module",
        "load_module",
        "load_source",
        "find_spec",
        "find_module",
        "reload",
        "__import__",
    }
)
GIVE_UP_CALLS = frozenset({"eval", "exec", "compile", "__subclasses__"})
GIVE_UP_MODULES = (
    "subprocess.",
    "os.system",
    "os.popen",
    "os.exec",
    "os.spawn",
    "pty.",
    "runpy.",
    "inspect.",
    "gc.",
    "sys._getframe",
    "multiprocessing.spawn",
)
# reflection that hands out a namespace (a frame's or a function's globals): anything may be read
GIVE_UP_ATTRS = frozenset({"f_globals", "f_locals", "f_back", "tb_frame", "gi_frame", "__globals__", "__builtins__"})
SKIP_DIRS = frozenset({"__pycache__", ".git"})


def entry_script(entry: str | None) -> str | None:
    """The repo-relative Python file (or `-m` module as a path) an entry command runs, if any."""
    if not entry:
        return None
    try:
        words = shlex.split(entry)
    except ValueError:
        return None
    for i, w in enumerate(words):
        if w == "-m" and i + 1 < len(words):
            return words[i + 1].replace(".", "/") + ".py"
        if w.endswith(".py"):
            return w[2:] if w.startswith("./") else w
    return None


def python_sources(base_dir: Path) -> dict:
    """rel -> text of every .py file under base_dir (caches and hidden folders skipped)."""
    out = {}
    base = Path(base_dir)
    for p in sorted(base.rglob("*.py")):
        rel = p.relative_to(base)
        if any(part in SKIP_DIRS or part.startswith(".") for part in rel.parts[:-1]) or not p.is_file():
            continue
        try:
            out[rel.as_posix()] = p.read_text()
        except (OSError, UnicodeDecodeError):
            continue
    return out


def _modname(rel: str) -> str:
    parts = rel[:-3].split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_defs(body: list, out: dict) -> dict:
    """Top-level def/class names -> nodes, through module-level if/try/with blocks."""
    for st in body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[st.name] = st
        else:
            for f in COMPOUND_BODIES:
                for sub in getattr(st, f, None) or []:
                    _top_defs(sub.body if isinstance(sub, (ast.ExceptHandler, ast.match_case)) else [sub], out)
    return out


def _is_pure_decorator(d: ast.expr) -> bool:
    name = dotted(d.func if isinstance(d, ast.Call) else d) or ""
    return name.rsplit(".", 1)[-1] in PURE_DECORATORS


def _import_time_effects(node: ast.AST) -> bool:
    """Whether defining this (otherwise dead) def or class can run code of its own at import."""
    if any(not _is_pure_decorator(d) for d in node.decorator_list):
        return True
    if isinstance(node, ast.ClassDef):
        if node.keywords:  # metaclass=...: runs at class creation
            return True
        for st in node.body:  # class-level statements run at import
            if not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and any(
                isinstance(n, ast.Call) for n in ast.walk(st)
            ):
                return True
        return False
    a = node.args
    return any(isinstance(n, ast.Call) for d in a.defaults + [k for k in a.kw_defaults if k] for n in ast.walk(d))


class Reach:
    """Modules and top-level definitions reachable from an entry script (see the comment above)."""

    def __init__(self, sources: dict, entry_rel: str):
        self.sources = sources
        self.rel_of = {_modname(r): r for r in sources}
        self.rel_of["__main__"] = entry_rel  # `import __main__` is the entry module
        self.trees, self.unparsed = {}, set()
        for rel, text in sources.items():
            try:
                self.trees[rel] = ast.parse(text)
            except (SyntaxError, ValueError):
                self.unparsed.add(rel)
        self.defs = {rel: _top_defs(t.body, {}) for rel, t in self.trees.items()}
        self.binds = {rel: self._bindings(rel, t) for rel, t in self.trees.items()}
        self.modules, self.reached, self.whole = set(), set(), set()  # whole: every def of it counts
        self.names_by_string = set()
        self.everything = False
        self.subclass_hooks = any(
            isinstance(n, ast.FunctionDef) and n.name == "__init_subclass__"
            for t in self.trees.values()
            for n in ast.walk(t)
        )
        self._todo = []
        self.module(entry_rel)
        for rel in sources:  # imported by site at start-up, if on the path
            if rel.rsplit("/", 1)[-1] in ("sitecustomize.py", "usercustomize.py"):
                self.whole_module(rel)
        while self._todo:
            self._todo.pop()()

    # ---- queries
    def keeps(self, rel: str, owner: str | None) -> bool:
        """Whether a statement of `rel` owned by top-level definition `owner` (None: module code) runs."""
        if self.everything:
            return True
        if rel not in self.modules:
            return False
        return owner is None or rel in self.whole or (rel, owner) in self.reached

    def view(self, rel: str) -> tuple:
        """What of `rel` runs, comparable across two Reach: (module reached, whole, reached defs)."""
        if self.everything:
            return (True, True, ())
        return (rel in self.modules, rel in self.whole, tuple(sorted(n for r, n in self.reached if r == rel)))

    # ---- graph
    def _resolve_module(self, rel: str, level: int, module: str | None) -> str | None:
        if level == 0:
            return module
        pkg = _modname(rel).split(".") if rel.endswith("__init__.py") else _modname(rel).split(".")[:-1]
        if level - 1 > len(pkg):
            return None
        base = pkg[: len(pkg) - (level - 1)]
        return ".".join(base + ([module] if module else [])) or None

    def _bindings(self, rel: str, tree: ast.Module) -> dict:
        """Local name -> ("module", dotted) or ("from", dotted, name), from every import in the file."""
        out = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                for a in n.names:
                    out[a.asname or a.name.split(".")[0]] = ("module", a.name if a.asname else a.name.split(".")[0])
            elif isinstance(n, ast.ImportFrom):
                mod = self._resolve_module(rel, n.level, n.module)
                if mod is None:
                    continue
                for a in n.names:
                    if a.name != "*":
                        sub = f"{mod}.{a.name}"
                        out[a.asname or a.name] = ("module", sub) if sub in self.rel_of else ("from", mod, a.name)
        return out

    def module(self, rel: str | None) -> None:
        if rel is None or rel in self.modules or (rel not in self.trees and rel not in self.unparsed):
            return
        self.modules.add(rel)
        name = _modname(rel)
        parent = name.rsplit(".", 1)[0] if "." in name else None
        if parent:  # importing a.b runs a/__init__.py first
            self.module(self.rel_of.get(parent))
        if rel in self.unparsed:  # nothing can be read of it: all of it counts
            self.whole.add(rel)
            return
        self._todo.append(lambda: self._module_code(rel))

    def _module_code(self, rel: str) -> None:
        tree = self.trees[rel]
        for name in self.names_by_string:
            if name in self.defs[rel]:
                self.define(rel, name)
        for name, node in self.defs[rel].items():
            # a module's __getattr__ / __dir__ run on attribute access without being named
            if (
                _import_time_effects(node)
                or name in ("__getattr__", "__dir__")
                or (self.subclass_hooks and isinstance(node, ast.ClassDef) and node.bases)
            ):
                self.define(rel, name)
        for st in tree.body:
            self._walk_import_time(rel, st)

    def _walk_import_time(self, rel: str, st: ast.stmt) -> None:
        """Module-level code: everything but function bodies (and methods) runs on import."""
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = st.args
            self._walk(rel, st.decorator_list + a.defaults + [k for k in a.kw_defaults if k])
        elif isinstance(st, ast.ClassDef):
            self._walk(rel, st.decorator_list + st.bases + [k.value for k in st.keywords])
            for sub in st.body:
                if not isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self._walk(rel, [sub])
        elif any(getattr(st, f, None) for f in COMPOUND_BODIES):
            head = header(st)
            self._walk(rel, [head])
            for f in COMPOUND_BODIES:
                for sub in getattr(st, f, None) or []:
                    for s in sub.body if isinstance(sub, (ast.ExceptHandler, ast.match_case)) else [sub]:
                        self._walk_import_time(rel, s)
        else:
            self._walk(rel, [st])

    def define(self, rel: str, name: str) -> None:
        if (rel, name) in self.reached or name not in self.defs.get(rel, {}):
            return
        self.reached.add((rel, name))
        self.module(rel)
        self._todo.append(lambda: self._walk(rel, [self.defs[rel][name]]))

    def whole_module(self, rel: str | None) -> None:
        if rel is None or rel in self.whole:
            return
        self.module(rel)
        self.whole.add(rel)
        for name in self.defs.get(rel, {}):
            self.define(rel, name)

    def give_up(self) -> None:
        self.everything = True

    def name(self, rel: str, name: str, seen=None) -> None:
        """A bare name used in `rel`: its definition, its import, or a module that escapes as a value."""
        seen = seen or set()
        if (rel, name) in seen:
            return
        seen.add((rel, name))
        if name in self.defs.get(rel, {}):
            self.define(rel, name)
        b = self.binds.get(rel, {}).get(name)
        if b and b[0] == "module":
            self.whole_module(self.rel_of.get(b[1]))  # the module passed around as a value
        elif b:
            src = self.rel_of.get(b[1])
            if src:
                self.name(src, b[2], seen)

    def chain(self, rel: str, parts: list) -> None:
        """a.b.c used in `rel`: resolved through module aliases as far as the trees allow."""
        b = self.binds.get(rel, {}).get(parts[0])
        if parts[0] in self.defs.get(rel, {}) or not b or b[0] != "module":
            self.name(rel, parts[0])
            return
        mod = b[1]
        for attr in parts[1:]:
            self.module(self.rel_of.get(mod))
            if f"{mod}.{attr}" in self.rel_of:
                mod = f"{mod}.{attr}"
                continue
            src = self.rel_of.get(mod)
            if src:
                self.name(src, attr)
            return
        self.whole_module(self.rel_of.get(mod))  # the chain ends at a module: it escapes

    def _string(self, s: str) -> None:
        """A string naming a repo module (dotted, or as a path to a .py file) may be imported or run."""
        if "." in s and s in self.rel_of:
            self.whole_module(self.rel_of[s])
        for r in self.trees.keys() | self.unparsed:
            if r in s and (r.endswith(".py")):
                self.whole_module(r)

    def _walk(self, rel: str, nodes: list) -> None:
        docstrings = {
            id(n.value) for root in nodes for n in ast.walk(root) if isinstance(n, ast.stmt) and is_docstring(n)
        }  # bare strings name nothing that runs
        chained = set()
        for root in nodes:
            for n in ast.walk(root):
                if isinstance(n, ast.Import):
                    for a in n.names:
                        parts = a.name.split(".")
                        for i in range(1, len(parts) + 1):
                            self.module(self.rel_of.get(".".join(parts[:i])))
                elif isinstance(n, ast.ImportFrom):
                    mod = self._resolve_module(rel, n.level, n.module)
                    if mod:
                        self.module(self.rel_of.get(mod))
                        for a in n.names:
                            if a.name == "*":
                                self.whole_module(self.rel_of.get(mod))
                            elif f"{mod}.{a.name}" in self.rel_of:
                                self.module(self.rel_of[f"{mod}.{a.name}"])
                elif isinstance(n, ast.Attribute) and id(n) not in chained:
                    parts, v = [n.attr], n.value
                    while isinstance(v, ast.Attribute):
                        chained.add(id(v))
                        parts.append(v.attr)
                        v = v.value
                    if isinstance(v, ast.Name):
                        chained.add(id(v))
                        self.chain(rel, [v.id] + parts[::-1])
                        if [v.id] + parts[::-1][:1] == ["sys", "modules"]:
                            self.give_up()  # modules looked up by a computed name
                    if n.attr in GIVE_UP_ATTRS:
                        self.give_up()
                    if n.attr == "__dict__" and isinstance(v, ast.Name):
                        self.name(rel, v.id)  # a module's namespace read as a dict
                elif isinstance(n, ast.Name) and id(n) not in chained:
                    self.name(rel, n.id)
                    if n.id in ("globals", "vars", "locals"):
                        self.whole_module(rel)
                elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
                    self._string(n.value)
                elif isinstance(n, ast.Call):
                    self._call(rel, n)

    def _call(self, rel: str, n: ast.Call) -> None:
        fname = dotted(n.func) or ""
        last = fname.rsplit(".", 1)[-1]
        literal = all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in n.args)
        if isinstance(n.func, ast.Name) and n.func.id in GIVE_UP_CALLS or last == "__subclasses__":
            self.give_up()
        elif last in DYNAMIC_IMPORTS:
            if not literal:
                self.give_up()
            for a in n.args:  # import_module("algorithm.foo") or ("foo")
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    self.whole_module(self.rel_of.get(a.value.lstrip(".")))
        elif fname.startswith(GIVE_UP_MODULES) or fname in ("sys.modules", "os.system", "os.popen"):
            self.give_up()
        elif (
            isinstance(n.func, ast.Name)
            and n.func.id in ("getattr", "hasattr", "setattr", "delattr")
            and len(n.args) >= 2
        ):
            key = n.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                # any definition of that name anywhere may be what the object's attribute is
                self.names_by_string.add(key.value)
                for r in self.modules & set(self.trees):
                    if key.value in self.defs[r]:
                        self.define(r, key.value)
            elif isinstance(n.args[0], (ast.Name, ast.Attribute)):
                # a computed attribute of a module: every definition of it may be the one
                target = dotted(n.args[0]) or ""
                b = self.binds.get(rel, {}).get(target.split(".")[0])
                if b and b[0] == "module":
                    self.whole_module(
                        self.rel_of.get(b[1] if "." not in target else b[1] + target[len(target.split(".")[0]) :])
                    )
