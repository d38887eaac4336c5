"""Kernel equivalence: ai4ai_kernels calls read as the torch forms they compute (rule 3).

canonical_form(tree) rewrites each loss or optimizer that a kernel computes the same way as the
torch op it replaces into one `op:` form (_Canon), after folding the temporaries a loss reads
(_inline), so that a swap compares equal; is_kernel_import spots the kernels' imports, and
shadows says when a repo file could stand in for torch or the kernels (then no swap is trusted).
"""

from __future__ import annotations

import ast
import copy
from pathlib import Path

from ai4ai.analysis.classify.syntax import dotted, dump

# The canonical form of a file reads each loss or optimizer that ai4ai_kernels computes the same
# way as the torch form it replaces, so that a swap compares equal and only what else changed is
# evidence. Every rewrite below is an identity of the two computations (same math, same
# defaults); a form not listed keeps its text and so stays a change.

TORCH_OPS = {
    "torch.nn.functional.cross_entropy": "cross_entropy",
    "torch.optim.AdamW": "AdamW",
    "torch.optim.adamw.AdamW": "AdamW",
    "torch.optim.Adam": "Adam",
    "torch.optim.adam.Adam": "Adam",
    "torch.log_softmax": "log_softmax",
    "torch.nn.functional.log_softmax": "log_softmax",
    "torch.special.log_softmax": "log_softmax",
}
# kernel name in ai4ai_kernels -> the op it is read as (Muon and newton_schulz have no torch form
# with the same math and defaults, so a swap to them stays a change of the update rule)
KERNEL_OPS = {
    "cross_entropy": "cross_entropy",
    "fused_linear_cross_entropy": "linear_cross_entropy",
    "token_logprobs": "token_logprobs",
    "FusedAdamW": "AdamW",
}
# keyword defaults shared by the torch op and the kernel: spelling one out changes nothing
CE_DEFAULTS = {
    "ignore_index": -100,
    "label_smoothing": 0.0,
    "reduction": "mean",
    "z_loss_weight": 0.0,
    "weight": None,
    "bias": None,
}
ADAMW_ARGS = ("lr", "betas", "eps", "weight_decay")
ADAMW_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
# arguments that choose how the step is executed, not what it computes
EXECUTION_KWARGS = {"foreach", "fused", "capturable", "differentiable", "master_weights", "chunk_rows"}
SHAPE_METHODS = {"reshape", "view", "flatten", "contiguous"}
# a target's device and integer dtype do not change which class it names
TARGET_METHODS = SHAPE_METHODS | {"to", "long", "int"}
# names a module could be shadowed by: a repo file of that name voids the kernel equivalences
SHADOWABLE = frozenset({"torch", "ai4ai_kernels"})


def is_kernel_import(st: ast.stmt) -> bool:
    return isinstance(st, (ast.Import, ast.ImportFrom)) and (
        (getattr(st, "module", None) or "").startswith("ai4ai_kernels")
        or any(a.name.startswith("ai4ai_kernels") for a in st.names)
    )


def shadows(rels) -> bool:
    """Whether a repo file could be imported as torch or ai4ai_kernels (via sys.path tricks)."""
    return any(p in SHADOWABLE for rel in rels for p in [Path(rel).stem, *Path(rel).parts[:-1]])


def canonical_form(tree: ast.Module) -> ast.Module:
    """The tree with every kernel read as its torch twin (canonical forms first, so that a temporary
    holding a kernel's output is seen as a loss input on both sides, then temporaries folded, then
    the folded forms read again)."""
    tree = _Canon(tree).visit(tree)
    return _Canon(tree).visit(_inline(tree))


def _lit(node: ast.AST):
    """The value of a literal (numbers with a sign, tuples of them, None), else a sentinel."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOLIT


_NOLIT = object()


def _op(name: str, *args: ast.expr, keywords=()) -> ast.Call:
    return ast.Call(func=ast.Name(id="op:" + name, ctx=ast.Load()), args=list(args), keywords=list(keywords))


def _op_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id.startswith("op:"):
        return node.func.id[3:]
    return None


def _method(node: ast.AST, names) -> ast.expr | None:
    """x for a call x.m(...) with m in names."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in names:
        return node.func.value
    return None


def _peel(node: ast.expr, names) -> ast.expr:
    while (inner := _method(node, names)) is not None:
        node = inner
    return node


def _same(a: ast.AST, b: ast.AST) -> bool:
    return dump(a) == dump(b)


def _slice_kind(node: ast.Subscript) -> str | None:
    """drop_last for x[:, :-1] / x[:, :-1, :] / x[..., :-1, :]; drop_first for x[:, 1:] / x[..., 1:]."""
    s = node.slice
    if not isinstance(s, ast.Tuple):
        return None

    def full(e):
        return isinstance(e, ast.Slice) and e.lower is None and e.upper is None and e.step is None

    def lead(e):
        return full(e) or (isinstance(e, ast.Constant) and e.value is Ellipsis)

    def upto_last(e):
        return (
            isinstance(e, ast.Slice)
            and e.lower is None
            and e.upper is not None
            and _lit(e.upper) == -1
            and e.step is None
        )

    def from_one(e):
        return (
            isinstance(e, ast.Slice)
            and e.lower is not None
            and _lit(e.lower) == 1
            and e.upper is None
            and e.step is None
        )

    el = s.elts
    if (
        len(el) in (2, 3)
        and lead(el[0])
        and upto_last(el[1])
        and (len(el) == 2 and full(el[0]) or len(el) == 3 and full(el[2]))
    ):
        return "drop_last"
    if len(el) == 2 and lead(el[0]) and from_one(el[1]):
        return "drop_first"
    return None


def _model_call(node: ast.AST, **extra) -> tuple | None:
    """(model, input) for model(x) / model(input_ids=x), with exactly the keywords in `extra` besides."""
    if not isinstance(node, ast.Call) or _op_name(node) or any(k.arg is None for k in node.keywords):
        return None
    kw = {k.arg: k.value for k in node.keywords}
    want = set(extra)
    if set(kw) - {"input_ids"} != want:
        return None
    if len(node.args) == 1 and "input_ids" not in kw:
        x = node.args[0]
    elif not node.args and "input_ids" in kw:
        x = kw["input_ids"]
    else:
        return None
    return (node.func, x) + tuple(kw[k] for k in extra)


def _unsqueezed_last(node: ast.expr, dim: int) -> ast.expr | None:
    """t for an index t[..., None] / t.unsqueeze(-1) / t.reshape(-1, 1) that gather(dim, .) reads as t."""
    node = _peel(node, {"to", "long", "int"})
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.slice, ast.Tuple)
        and node.slice.elts
        and _lit(node.slice.elts[-1]) is None
        and isinstance(node.slice.elts[-1], ast.Constant)
    ):
        lead = node.slice.elts[:-1]
        ok = all(
            isinstance(e, ast.Slice)
            and e.lower is e.upper is e.step is None
            or isinstance(e, ast.Constant)
            and e.value is Ellipsis
            for e in lead
        )
        if ok and (dim == -1 or (len(lead) == 1 and isinstance(lead[0], ast.Slice))):
            return node.value
    inner = _method(node, {"unsqueeze"})
    if inner is not None and len(node.args) == 1 and _lit(node.args[0]) in ((-1, 1) if dim == 1 else (-1,)):
        return inner
    inner = _method(node, {"reshape", "view"})
    if inner is not None and [_lit(a) for a in node.args] == [-1, 1]:
        return inner
    return None


class _Canon(ast.NodeTransformer):
    """Rewrite torch losses/optimizers and their ai4ai_kernels twins into one op:... form."""

    def __init__(self, tree: ast.Module):
        self.imports = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                for a in n.names:
                    self.imports[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(n, ast.ImportFrom) and n.module and not n.level:
                for a in n.names:
                    self.imports[a.asname or a.name] = f"{n.module}.{a.name}"
        # a name bound once to an op (ce = torch.nn.functional.cross_entropy) is that op
        stores = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                stores[n.id] = stores.get(n.id, 0) + 1
        self.aliases = {}
        for n in ast.walk(tree):
            if (
                isinstance(n, ast.Assign)
                and len(n.targets) == 1
                and isinstance(n.targets[0], ast.Name)
                and stores.get(n.targets[0].id) == 1
                and n.targets[0].id not in self.imports
            ):
                op = self._ref_op(n.value)
                if op:
                    self.aliases[n.targets[0].id] = op

    def _ref_op(self, node: ast.AST) -> str | None:
        name = dotted(node)
        if name is None:
            return None
        head, _, rest = name.partition(".")
        if head in self.aliases and not rest:
            return self.aliases[head]
        if head not in self.imports:
            return None
        full = self.imports[head] + ("." + rest if rest else "")
        if full.startswith("ai4ai_kernels."):
            return KERNEL_OPS.get(full.rsplit(".", 1)[-1])
        return TORCH_OPS.get(full)

    def visit_Name(self, node):
        op = self._ref_op(node) if isinstance(node.ctx, ast.Load) else None
        return ast.Name(id="op:" + op, ctx=ast.Load()) if op else node

    def visit_Attribute(self, node):
        op = self._ref_op(node) if isinstance(node.ctx, ast.Load) else None
        if op:
            return ast.Name(id="op:" + op, ctx=ast.Load())
        self.generic_visit(node)
        if node.attr == "logits" and (m := _model_call(node.value)):
            return _op("logits", *m)
        if node.attr == "last_hidden_state":
            return self._hidden(node.value) or node
        if node.attr == "loss" and (m := _model_call(node.value, labels=None)):
            # a causal LM's own loss: CE of its logits at t against the labels at t + 1
            model, x, labels = m
            return _op("cross_entropy", _op("drop_last", _op("logits", model, x)), _op("drop_first", labels))
        return node

    def _hidden(self, call: ast.AST) -> ast.Call | None:
        """op:hidden(model, x) for model.transformer(x): the final hidden state the head reads."""
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr == "transformer":
            m = _model_call(ast.Call(func=ast.Name(id="_", ctx=ast.Load()), args=call.args, keywords=call.keywords))
            if m:
                return _op("hidden", call.func.value, m[1])
        return None

    def visit_Subscript(self, node):
        self.generic_visit(node)
        if isinstance(node.slice, ast.Constant) and node.slice.value == 0 and (h := self._hidden(node.value)):
            return h
        kind = _slice_kind(node)
        return _op(kind, node.value) if kind else node

    def visit_Call(self, node):
        self.generic_visit(node)
        op = _op_name(node)
        if op is None:
            return self._method_forms(node)
        kw = {k.arg: k.value for k in node.keywords}
        if None in kw:  # **kwargs: nothing can be said
            return node
        if op in ("cross_entropy", "linear_cross_entropy", "token_logprobs"):
            kept = [
                k
                for k in node.keywords
                if k.arg not in EXECUTION_KWARGS
                and not (k.arg in CE_DEFAULTS and _lit(k.value) == CE_DEFAULTS[k.arg])
                and not (op == "token_logprobs" and k.arg == "temperature" and _lit(k.value) == 1)
            ]
            args = list(node.args)
            if op == "linear_cross_entropy" and len(args) == 4 and _lit(args[3]) is None:
                args = args[:3]
            if op in ("cross_entropy", "token_logprobs") and len(args) == 2:
                args = [_peel(args[0], SHAPE_METHODS | {"float"}), _peel(args[1], TARGET_METHODS)]
            if op == "linear_cross_entropy" and len(args) == 3:
                logits = self._head(_peel(args[0], SHAPE_METHODS | {"float"}), args[1])
                if logits is not None:
                    return _op(
                        "cross_entropy",
                        logits,
                        _peel(args[2], TARGET_METHODS),
                        keywords=sorted(kept, key=lambda k: k.arg),
                    )
            return _op(op, *args, keywords=sorted(kept, key=lambda k: k.arg))
        if op in ("AdamW", "Adam"):
            return self._adam(node, op, kw)
        if op == "log_softmax":
            dim = kw.get("dim", node.args[1] if len(node.args) > 1 else None)
            if len(node.args) >= 1 and dim is not None and _lit(dim) == -1 and len(node.args) + len(kw) == 2:
                return _op("log_softmax_last", node.args[0])
        return node

    def _head(self, h: ast.expr, weight: ast.expr) -> ast.expr | None:
        """The logits op for a fused head over `h` with `weight` when it is the model's own lm_head."""
        wrap = None
        if _op_name(h) in ("drop_last",):
            wrap, h = "drop_last", h.args[0]
        if _op_name(h) != "hidden":
            return None
        model = h.args[0]
        w = weight
        ok = (
            isinstance(w, ast.Attribute)
            and w.attr == "weight"
            and (
                isinstance(w.value, ast.Attribute)
                and w.value.attr == "lm_head"
                and _same(w.value.value, model)
                or _method(w.value, {"get_output_embeddings"}) is not None
                and _same(w.value.func.value, model)
            )
        )
        if not ok:
            return None
        logits = _op("logits", model, h.args[1])
        return _op(wrap, logits) if wrap else logits

    def _adam(self, node: ast.Call, op: str, kw: dict) -> ast.Call:
        if not node.args or len(node.args) > 1 + len(ADAMW_ARGS):
            return node
        vals = dict(zip(ADAMW_ARGS, node.args[1:]))
        if set(vals) & set(kw):
            return node
        vals.update(kw)
        for k in list(vals):
            if k in EXECUTION_KWARGS or (
                k in ("amsgrad", "maximize", "decoupled_weight_decay") and _lit(vals[k]) is False
            ):
                del vals[k]
        if set(vals) - set(ADAMW_ARGS):
            return node  # amsgrad, maximize, ...: no kernel twin
        if op == "Adam":
            # Adam without weight decay is AdamW without weight decay; with one it is L2, not AdamW
            if "weight_decay" in vals and _lit(vals["weight_decay"]) != 0:
                return node
            vals["weight_decay"] = ast.Constant(value=0)
        for k, v in ADAMW_DEFAULTS.items():
            vals.setdefault(k, ast.parse(repr(v), mode="eval").body)
        if _lit(vals["weight_decay"]) == 0:
            # no decay at all is a different update from a small one: kept out of literal masking
            vals["weight_decay"] = ast.Name(id="op:no_decay", ctx=ast.Load())
        return _op("AdamW", node.args[0], keywords=[ast.keyword(arg=k, value=vals[k]) for k in sorted(vals)])

    def _method_forms(self, node: ast.Call) -> ast.expr:
        """Tensor methods: x.log_softmax(-1), .gather(-1, t[..., None]) and the squeeze after it."""
        inner = _method(node, {"log_softmax"})
        if inner is not None:
            kw = {k.arg: k.value for k in node.keywords}
            dim = kw.get("dim", node.args[0] if node.args else None)
            if dim is not None and _lit(dim) == -1 and len(node.args) + len(kw) == 1:
                return _op("log_softmax_last", inner)
            return node
        inner = _method(node, {"gather"})
        if inner is not None and _op_name(inner) == "log_softmax_last" and len(node.args) == 2 and not node.keywords:
            dim = _lit(node.args[0])
            t = _unsqueezed_last(node.args[1], dim) if dim in (-1, 1) else None
            if t is not None:
                return _op("unsqueezed", _op("token_logprobs", inner.args[0], _peel(t, TARGET_METHODS)))
            return node
        inner = _method(node, {"squeeze"})
        if inner is not None and _op_name(inner) == "unsqueezed" and (not node.args or _lit(node.args[0]) in (-1, 1)):
            return inner.args[0]
        inner = _method(node, {"reshape", "view", "flatten"})
        if inner is not None and _op_name(inner) == "unsqueezed":
            node.func.value = inner.args[0]  # (N, 1) and (N,) reshape alike
        return node


def _loss_input(value: ast.expr) -> bool:
    """Whether a temporary holds what a loss reads (logits, hidden states, log-probabilities)."""
    return any(
        isinstance(n, ast.Attribute) and n.attr in LOSS_INPUTS or isinstance(n, ast.Name) and n.id.startswith("op:")
        for n in ast.walk(value)
    )


LOSS_INPUTS = {"logits", "last_hidden_state", "transformer", "log_softmax"}


def _inline(tree: ast.AST) -> ast.AST:
    """Fold `v = e` into the next statement when that is v's only use (h = ...; loss = f(h)).

    Only temporaries a loss reads are folded: folding others would move unrelated statements
    and make the difflib evidence of rule 4 noisier than the text."""
    for scope in [tree] + [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        counts = {}
        for n in ast.walk(scope):
            if isinstance(n, ast.Name):
                counts[n.id] = counts.get(n.id, 0) + 1
        for holder in ast.walk(scope):
            for f in ("body", "orelse", "finalbody"):
                body = getattr(holder, f, None)
                if not isinstance(body, list) or (
                    holder is not scope
                    and isinstance(holder, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
                ):
                    continue
                i = 0
                while i + 1 < len(body):
                    a, b = body[i], body[i + 1]
                    if (
                        isinstance(a, ast.Assign)
                        and len(a.targets) == 1
                        and isinstance(a.targets[0], ast.Name)
                        and counts.get(a.targets[0].id) == 2
                        and _loss_input(a.value)
                        and isinstance(b, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return))
                    ):
                        v = a.targets[0].id
                        uses = [n for n in ast.walk(b) if isinstance(n, ast.Name) and n.id == v]
                        if len(uses) == 1 and isinstance(uses[0].ctx, ast.Load):
                            _Replace(v, a.value).visit(b)
                            del body[i]
                            continue
                    i += 1
    return tree


class _Replace(ast.NodeTransformer):
    def __init__(self, name, value):
        self.name, self.value = name, value

    def visit_Name(self, node):
        return copy.deepcopy(self.value) if node.id == self.name else node
