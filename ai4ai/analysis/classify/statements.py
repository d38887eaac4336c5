"""A file as statements: literals masked, module constants, and the learning terms each touches.

statements(source) cuts a file into its statements (rule 1), each with its enclosing scope, its
dump with and without literals (rule 2, _Mask) and the top-level definition it belongs to (for
reachability); canonical=True reads kernels as their torch twins first (kernels.canonical_form).
learning_terms(stmt) names the learning terms a statement touches (rule 4, LEARNING_TERMS).
"""

from __future__ import annotations

import ast
import copy
import re
from dataclasses import dataclass

from ai4ai.analysis.classify.kernels import canonical_form, is_kernel_import
from ai4ai.analysis.classify.syntax import COMPOUND_BODIES, dotted, dump, header, is_docstring

LEARNING_TERMS = frozenset(
    """
    loss losses objective criterion nll entropy crossentropy kl divergence logits logprobs logprob softmax
    backward grad grads gradient gradients clip
    lr lrs learning rate optimizer optimizers optim adam adamw sgd lion muon sophia shampoo lamb
    momentum nesterov betas beta beta1 beta2 decay warmup schedule scheduler cosine anneal annealing
    label labels target targets reward rewards advantage advantages baseline penalty regularization
    smoothing temperature ema swa averaging
    perm randperm shuffle sampler sampling multinomial curriculum weighting weighted
""".split()
)
# identifiers that contain a learning term but change no number of the training
NOT_LEARNING = frozenset({"no_grad", "enable_grad", "inference_mode", "gradscaler", "grad_scaler", "set_to_none"})
LOG_CALLS = frozenset({"print", "info", "debug", "warning", "warn", "log", "write", "flush", "set_postfix"})


@dataclass(frozen=True)
class _Stmt:
    scope: tuple  # enclosing def/class names and class bases
    masked: str  # dump with literals masked
    exact: str  # dump with literals
    lineno: int
    text: str
    node: ast.AST
    owner: str | None = None  # the top-level def/class it belongs to (None: module-level code)


# --------------------------------------------------------------------------- literals


def _const_expr(node: ast.AST, consts: frozenset) -> bool:
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.Name):
        return node.id in consts
    if isinstance(node, ast.UnaryOp):
        return _const_expr(node.operand, consts)
    if isinstance(node, ast.BinOp):
        return _const_expr(node.left, consts) and _const_expr(node.right, consts)
    if isinstance(node, (ast.Tuple, ast.List)):
        return all(_const_expr(e, consts) for e in node.elts)
    return False


def module_constants(tree: ast.Module) -> frozenset:
    """Names bound at module level to a constant expression (NAME = 3e-3, BETAS = (0.9, 0.95))."""
    out = set()
    for st in tree.body:
        if isinstance(st, ast.Assign) and _const_expr(st.value, frozenset()):
            out |= {t.id for t in st.targets if isinstance(t, ast.Name)}
        elif (
            isinstance(st, ast.AnnAssign)
            and st.value is not None
            and isinstance(st.target, ast.Name)
            and _const_expr(st.value, frozenset())
        ):
            out.add(st.target.id)
    return frozenset(out)


class _Mask(ast.NodeTransformer):
    """Replace literals (and module constants) by one placeholder; keep dict keys and subscripts."""

    def __init__(self, consts: frozenset):
        self.consts = consts

    def visit_Subscript(self, node):
        node.value = self.visit(node.value)
        return node  # group["lr"] vs group["peak_lr"] is structure, not a value

    def visit_Dict(self, node):
        node.values = [self.visit(v) for v in node.values]
        return node

    def visit(self, node):
        if isinstance(node, ast.expr) and _const_expr(node, self.consts):
            return ast.Constant(value="<lit>")
        return super().visit(node)


# --------------------------------------------------------------------------- statements


def statements(source: str, keep=None, canonical: bool = False) -> tuple[list[_Stmt], dict]:
    """The file's statements (rule 1 of the package docstring) and its module-level constants' values.

    keep(owner) says whether code owned by a top-level definition (None: module code) runs;
    canonical reads kernels as the torch form they replace (rule 3) and drops their imports.
    """
    tree = ast.parse(source)
    consts = module_constants(tree)
    if canonical:
        tree = canonical_form(tree)
    keep = keep or (lambda owner: True)
    lines = source.splitlines()
    values, out = {}, []

    def walk(body: list, scope: tuple, top: bool, owner: str | None) -> None:
        for st in body:
            if is_docstring(st):
                continue
            if (
                top
                and isinstance(st, (ast.Assign, ast.AnnAssign))
                and st.value is not None
                and _const_expr(st.value, frozenset())
            ):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if keep(None):
                    for t in targets:
                        if isinstance(t, ast.Name):
                            values[t.id] = (ast.unparse(st.value), st.lineno)
                continue
            is_def = isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            mine = owner if owner is not None or not is_def else st.name
            head = header(st)
            if keep(mine) and not (canonical and is_kernel_import(st)):
                masked = dump(_Mask(consts).visit(copy.deepcopy(head)))
                text = lines[st.lineno - 1].strip() if 0 < st.lineno <= len(lines) else ast.unparse(head)[:120]
                out.append(_Stmt(scope, masked, dump(head), st.lineno, text, head, mine))
            inner = scope
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = scope + (st.name,)
            elif isinstance(st, ast.ClassDef):
                bases = ", ".join((dotted(b) or "?").replace("op:", "") for b in st.bases)
                inner = scope + (f"{st.name}({bases})" if bases else st.name,)
            for f in COMPOUND_BODIES:
                sub = getattr(st, f, None)
                if sub:
                    if f == "handlers" or f == "cases":
                        for h in sub:
                            walk(h.body, inner, False, mine)
                    else:
                        walk(sub, inner, False, mine)

    walk(tree.body, (), True, None)
    return out, values


# --------------------------------------------------------------------------- terms


def _tokens(name: str) -> set[str]:
    parts = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
    return {t for t in re.split(r"[^a-z]+", parts) if t} | {name.lower()}


def _is_log_call(node: ast.AST) -> bool:
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        name = dotted(node.value.func) or ""
        return name.rsplit(".", 1)[-1] in LOG_CALLS
    return False


def learning_terms(stmt: _Stmt) -> set[str]:
    """The learning terms a statement touches (empty for logging and for engineering code)."""
    node = stmt.node
    if _is_log_call(node):
        return set()
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            names.add(n.id)
        elif isinstance(n, ast.Attribute):
            names.add(n.attr)
            if n.attr == "step":
                names.add("<step>")
        elif isinstance(n, ast.keyword) and n.arg:
            names.add(n.arg)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(n.name)
            names |= {a.arg for a in n.args.args + n.args.kwonlyargs}
            if n.name == "step":
                names.add("<step>")
        elif isinstance(n, ast.ClassDef):
            names.add(n.name)
            names |= {dotted(b) or "" for b in n.bases}
        elif isinstance(n, ast.alias):
            names |= {n.name, n.asname or ""}
        elif isinstance(n, ast.ImportFrom) and n.module:
            names.add(n.module)
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and isinstance(n.slice.value, str):
            names.add(n.slice.value)
    names |= set(stmt.scope)
    if any(x == "step" for x in stmt.scope):
        names.add("<step>")
    hits = set()
    for name in filter(None, names):
        if name == "<step>":
            hits.add("step()")
            continue
        for part in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", name):
            if part.lower() not in NOT_LEARNING:
                hits |= _tokens(part) & LEARNING_TERMS
    return hits
