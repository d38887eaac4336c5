"""The syntax-tree helpers the classifier's modules share: dotted names, dumps, statement headers.

A compound statement (`def`, `for`, `with`, ...) is read as its header, its body being statements
of its own; docstrings and bare strings name nothing and change nothing.
"""

from __future__ import annotations

import ast
import copy

COMPOUND_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def is_docstring(st: ast.stmt) -> bool:
    return isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str)


def header(st: ast.stmt) -> ast.stmt:
    h = copy.copy(st)
    for f in COMPOUND_BODIES:
        if hasattr(h, f):
            setattr(h, f, [])
    if isinstance(h, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        h.decorator_list = list(st.decorator_list)
    return h


def dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)
