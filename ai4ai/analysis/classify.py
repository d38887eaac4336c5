"""Did a submission change how the model learns? A patch's class, read from its syntax trees.

    classify_patch(patch_text, base_dir, entry=None, task=None) -> Classification(label, reason, evidence)

No model is asked: each changed Python file is parsed before and after the patch and the
two trees are compared, counting only code that the training entry point can run. Labels,
strongest first (a patch gets the strongest that applies):

`algorithm`        loss, objective, update rule, schedule or data weighting/ordering changed
`engineering`      code changed, but no changed statement touches a learning term: loop
                   structure, dtype / autocast / compile, kernels, data loading, logging
`hyperparameters`  the trees are equal once every literal is masked: only numbers, strings
                   and module-level constants (NAME = literal) changed, or config files
`none`             empty patch, or only comments, docstrings, documentation changed, or
                   code that nothing reachable from the entry point runs
`unclassified`     the patch could not be read (no patch text, or it does not apply)

The rules, in order:
0. Reachability. From the task's entry (`python train.py`) every Python file of the repo,
   before and after the patch, is read into a graph (Reach below): the entry module's
   top-level code, the modules it imports (editable ones like optim.py and algorithm/*.py
   included, a package's __init__ with them), and the top-level functions and classes that
   reachable code names, transitively (a call, a function passed as a value or a hook, a
   decorator; a class counts with all its methods). A statement counts only if it is
   reachable in its own version: a removed statement in the old tree, an added one in the
   new. A dead function, or a module nothing imports, changes no label; a file the patch
   leaves alone but whose live part it changes (a dead function it starts calling) is read
   as changed. Where the trees cannot tell (getattr of a module with a computed name,
   importlib with a computed name, eval / exec, sys.modules, subprocess), code counts as
   reachable; where the entry is unknown or not a Python file of the repo, everything does.
1. A file is cut into statements (a compound statement such as `def`, `for` or `with`
   counts as its header; its body is statements of its own), each remembered with its
   enclosing functions and classes. Docstrings and bare strings are dropped.
2. Literals are masked: constants, constant expressions (`-3e-3`, `(0.9, 0.95)`, `1 / 3`)
   and names bound at module level to a constant expression (`lr=LR`). Module-level
   constant assignments themselves are compared by name and value only. If the masked
   statements of every file are equal, the patch is `hyperparameters` (the reason lists the
   values that changed) or `none` (nothing but comments and docstrings changed).
3. A kernel from `ai4ai_kernels` that computes the same thing as the torch form it replaces
   is read as that form (_Canon below): FusedAdamW for torch.optim.AdamW (and for Adam
   without weight decay), cross_entropy for F.cross_entropy, fused_linear_cross_entropy on
   the model's final hidden state and lm_head weight for the HF model's own `.loss` or CE of
   its logits, token_logprobs for log_softmax + gather. If that makes the statements
   equal, the patch is `engineering` (an execution change), whatever literals changed too.
4. Otherwise the statements that differ (difflib over the statements read as in 3) are the
   evidence. A statement is a learning statement when one of its identifiers, attribute
   names, keyword names or subscript keys, or the name of a function or class around it
   (and that class's bases), contains a learning term: loss, grad, backward, lr, optimizer,
   momentum, decay, warmup, schedule, labels, logits, entropy, reward, perm / shuffle /
   sampler (how batches are drawn), ... (LEARNING_TERMS below), or when it calls or defines
   `step` as a method. Calls to print and logging never count as learning (they change no
   number). Any learning statement makes the patch `algorithm`; otherwise `engineering`.
5. Non-Python files: config files (.yaml, .json, .toml, ...) are `hyperparameters`,
   documentation (.md, .txt, .rst) is `none`, anything else is code this module cannot read
   and counts as `algorithm`, so that nothing hides behind an unreadable file.

Known limits, by design conservative towards `algorithm`: rewriting the loss with a fused
kernel in a form rule 3 does not list (a temporary used twice, a protected helper inlined
by hand) is `algorithm`; so is gradient accumulation that keeps the effective batch. A
human override file (labels.yaml, read by ai4ai.report) maps a patch's sha256 to a label.

A learning-rate schedule is part of the update rule: a patch that changes the body of the
schedule function (examples/optimizer/warmup_cosine.patch) is `algorithm`, not
`hyperparameters`, because it changes how the step size evolves, not a value in it.
"""
from __future__ import annotations

import ast
import copy
import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ai4ai.repo.patches import MISSING, PatchFormatError, apply_patch
from ai4ai.core.task import TaskError, list_tasks, load_task

LABELS = ("none", "hyperparameters", "engineering", "algorithm", "unclassified")
_RANK = {"none": 0, "hyperparameters": 1, "engineering": 2, "algorithm": 3}

LEARNING_TERMS = frozenset("""
    loss losses objective criterion nll entropy crossentropy kl divergence logits logprobs logprob softmax
    backward grad grads gradient gradients clip
    lr lrs learning rate optimizer optimizers optim adam adamw sgd lion muon sophia shampoo lamb
    momentum nesterov betas beta beta1 beta2 decay warmup schedule scheduler cosine anneal annealing
    label labels target targets reward rewards advantage advantages baseline penalty regularization
    smoothing temperature ema swa averaging
    perm randperm shuffle sampler sampling multinomial curriculum weighting weighted
""".split())
# identifiers that contain a learning term but change no number of the training
NOT_LEARNING = frozenset({"no_grad", "enable_grad", "inference_mode", "gradscaler", "grad_scaler", "set_to_none"})
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini")
DOC_SUFFIXES = (".md", ".txt", ".rst")
LOG_CALLS = frozenset({"print", "info", "debug", "warning", "warn", "log", "write", "flush", "set_postfix"})
MAX_EVIDENCE = 4


@dataclass(frozen=True)
class Classification:
    label: str
    reason: str
    evidence: tuple = field(default=())

    def as_dict(self) -> dict:
        return {"label": self.label, "reason": self.reason, "evidence": list(self.evidence)}


@dataclass(frozen=True)
class _Stmt:
    scope: tuple            # enclosing def/class names and class bases
    masked: str             # dump with literals masked
    exact: str              # dump with literals
    lineno: int
    text: str
    node: ast.AST
    owner: str | None = None   # the top-level def/class it belongs to (None: module-level code)


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
        elif isinstance(st, ast.AnnAssign) and st.value is not None and isinstance(st.target, ast.Name) \
                and _const_expr(st.value, frozenset()):
            out.add(st.target.id)
    return frozenset(out)


class _Mask(ast.NodeTransformer):
    """Replace literals (and module constants) by one placeholder; keep dict keys and subscripts."""

    def __init__(self, consts: frozenset):
        self.consts = consts

    def visit_Subscript(self, node):
        node.value = self.visit(node.value)
        return node                     # group["lr"] vs group["peak_lr"] is structure, not a value

    def visit_Dict(self, node):
        node.values = [self.visit(v) for v in node.values]
        return node

    def visit(self, node):
        if isinstance(node, ast.expr) and _const_expr(node, self.consts):
            return ast.Constant(value="<lit>")
        return super().visit(node)


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


# --------------------------------------------------------------------------- statements

_COMPOUND_BODIES = ("body", "orelse", "finalbody", "handlers", "cases")


def _is_docstring(st: ast.stmt) -> bool:
    return isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant) and isinstance(st.value.value, str)


def _header(st: ast.stmt) -> ast.stmt:
    h = copy.copy(st)
    for f in _COMPOUND_BODIES:
        if hasattr(h, f):
            setattr(h, f, [])
    if isinstance(h, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        h.decorator_list = list(st.decorator_list)
    return h


def _dump(node: ast.AST) -> str:
    return ast.dump(node, annotate_fields=False, include_attributes=False)


def _is_kernel_import(st: ast.stmt) -> bool:
    return isinstance(st, (ast.Import, ast.ImportFrom)) and (
        (getattr(st, "module", None) or "").startswith("ai4ai_kernels")
        or any(a.name.startswith("ai4ai_kernels") for a in st.names))


def statements(source: str, keep=None, canonical: bool = False) -> tuple[list[_Stmt], dict]:
    """The file's statements (see the module docstring) and its module-level constants' values.

    keep(owner) says whether code owned by a top-level definition (None: module code) runs;
    canonical reads kernels as the torch form they replace (rule 3) and drops their imports.
    """
    tree = ast.parse(source)
    consts = module_constants(tree)
    if canonical:
        # canonical forms first (so a temporary holding a kernel's output is seen as a loss
        # input on both sides), then fold temporaries, then read the folded forms again
        tree = _Canon(tree).visit(tree)
        tree = _Canon(tree).visit(_inline(tree))
    keep = keep or (lambda owner: True)
    lines = source.splitlines()
    values, out = {}, []

    def walk(body: list, scope: tuple, top: bool, owner: str | None) -> None:
        for st in body:
            if _is_docstring(st):
                continue
            if top and isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None \
                    and _const_expr(st.value, frozenset()):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                if keep(None):
                    for t in targets:
                        if isinstance(t, ast.Name):
                            values[t.id] = (ast.unparse(st.value), st.lineno)
                continue
            is_def = isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            mine = owner if owner is not None or not is_def else st.name
            head = _header(st)
            if keep(mine) and not (canonical and _is_kernel_import(st)):
                masked = _dump(_Mask(consts).visit(copy.deepcopy(head)))
                text = lines[st.lineno - 1].strip() if 0 < st.lineno <= len(lines) else ast.unparse(head)[:120]
                out.append(_Stmt(scope, masked, _dump(head), st.lineno, text, head, mine))
            inner = scope
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = scope + (st.name,)
            elif isinstance(st, ast.ClassDef):
                bases = ", ".join((_dotted(b) or "?").replace("op:", "") for b in st.bases)
                inner = scope + (f"{st.name}({bases})" if bases else st.name,)
            for f in _COMPOUND_BODIES:
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
        name = _dotted(node.value.func) or ""
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
            names |= {_dotted(b) or "" for b in n.bases}
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


# --------------------------------------------------------------------------- kernel equivalence
#
# The canonical form of a file reads each loss or optimizer that ai4ai_kernels computes the same
# way as the torch form it replaces, so that a swap compares equal and only what else changed is
# evidence. Every rewrite below is an identity of the two computations (same math, same
# defaults); a form not listed keeps its text and so stays a change.

TORCH_OPS = {"torch.nn.functional.cross_entropy": "cross_entropy", "torch.optim.AdamW": "AdamW",
             "torch.optim.adamw.AdamW": "AdamW", "torch.optim.Adam": "Adam", "torch.optim.adam.Adam": "Adam",
             "torch.log_softmax": "log_softmax", "torch.nn.functional.log_softmax": "log_softmax",
             "torch.special.log_softmax": "log_softmax"}
# kernel name in ai4ai_kernels -> the op it is read as (Muon and newton_schulz have no torch form
# with the same math and defaults, so a swap to them stays a change of the update rule)
KERNEL_OPS = {"cross_entropy": "cross_entropy", "fused_linear_cross_entropy": "linear_cross_entropy",
              "token_logprobs": "token_logprobs", "FusedAdamW": "AdamW"}
# keyword defaults shared by the torch op and the kernel: spelling one out changes nothing
CE_DEFAULTS = {"ignore_index": -100, "label_smoothing": 0.0, "reduction": "mean", "z_loss_weight": 0.0,
               "weight": None, "bias": None}
ADAMW_ARGS = ("lr", "betas", "eps", "weight_decay")
ADAMW_DEFAULTS = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 1e-2}
# arguments that choose how the step is executed, not what it computes
EXECUTION_KWARGS = {"foreach", "fused", "capturable", "differentiable", "master_weights", "chunk_rows"}
SHAPE_METHODS = {"reshape", "view", "flatten", "contiguous"}
# a target's device and integer dtype do not change which class it names
TARGET_METHODS = SHAPE_METHODS | {"to", "long", "int"}


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
    return _dump(a) == _dump(b)


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
        return isinstance(e, ast.Slice) and e.lower is None and e.upper is not None and _lit(e.upper) == -1 \
            and e.step is None
    def from_one(e):
        return isinstance(e, ast.Slice) and e.lower is not None and _lit(e.lower) == 1 and e.upper is None \
            and e.step is None
    el = s.elts
    if len(el) in (2, 3) and lead(el[0]) and upto_last(el[1]) and (len(el) == 2 and full(el[0]) or len(el) == 3 and full(el[2])):
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
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Tuple) and node.slice.elts \
            and _lit(node.slice.elts[-1]) is None and isinstance(node.slice.elts[-1], ast.Constant):
        lead = node.slice.elts[:-1]
        ok = all(isinstance(e, ast.Slice) and e.lower is e.upper is e.step is None
                 or isinstance(e, ast.Constant) and e.value is Ellipsis for e in lead)
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
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                    and stores.get(n.targets[0].id) == 1 and n.targets[0].id not in self.imports:
                op = self._ref_op(n.value)
                if op:
                    self.aliases[n.targets[0].id] = op

    def _ref_op(self, node: ast.AST) -> str | None:
        name = _dotted(node)
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
        if None in kw:                                      # **kwargs: nothing can be said
            return node
        if op in ("cross_entropy", "linear_cross_entropy", "token_logprobs"):
            kept = [k for k in node.keywords if k.arg not in EXECUTION_KWARGS
                    and not (k.arg in CE_DEFAULTS and _lit(k.value) == CE_DEFAULTS[k.arg])
                    and not (op == "token_logprobs" and k.arg == "temperature" and _lit(k.value) == 1)]
            args = list(node.args)
            if op == "linear_cross_entropy" and len(args) == 4 and _lit(args[3]) is None:
                args = args[:3]
            if op in ("cross_entropy", "token_logprobs") and len(args) == 2:
                args = [_peel(args[0], SHAPE_METHODS | {"float"}), _peel(args[1], TARGET_METHODS)]
            if op == "linear_cross_entropy" and len(args) == 3:
                logits = self._head(_peel(args[0], SHAPE_METHODS | {"float"}), args[1])
                if logits is not None:
                    return _op("cross_entropy", logits, _peel(args[2], TARGET_METHODS), keywords=sorted(
                        kept, key=lambda k: k.arg))
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
        ok = isinstance(w, ast.Attribute) and w.attr == "weight" and (
            isinstance(w.value, ast.Attribute) and w.value.attr == "lm_head" and _same(w.value.value, model)
            or _method(w.value, {"get_output_embeddings"}) is not None and _same(w.value.func.value, model))
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
            if k in EXECUTION_KWARGS or (k in ("amsgrad", "maximize", "decoupled_weight_decay") and _lit(vals[k]) is False):
                del vals[k]
        if set(vals) - set(ADAMW_ARGS):
            return node                                     # amsgrad, maximize, ...: no kernel twin
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
            node.func.value = inner.args[0]                  # (N, 1) and (N,) reshape alike
        return node


def _loss_input(value: ast.expr) -> bool:
    """Whether a temporary holds what a loss reads (logits, hidden states, log-probabilities)."""
    return any(isinstance(n, ast.Attribute) and n.attr in LOSS_INPUTS
               or isinstance(n, ast.Name) and n.id.startswith("op:") for n in ast.walk(value))


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
                if not isinstance(body, list) or (holder is not scope and isinstance(
                        holder, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))):
                    continue
                i = 0
                while i + 1 < len(body):
                    a, b = body[i], body[i + 1]
                    if isinstance(a, ast.Assign) and len(a.targets) == 1 and isinstance(a.targets[0], ast.Name) \
                            and counts.get(a.targets[0].id) == 2 and _loss_input(a.value) \
                            and isinstance(b, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr, ast.Return)):
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


# --------------------------------------------------------------------------- reachability
#
# What `python train.py` can execute, read from the syntax trees of every Python file in the
# patched repo. Nodes are modules (their top-level code runs on import) and top-level
# definitions (a function's body runs only if something reachable names it; a class counts as
# a whole, every method included, since methods run through objects, not names). Wherever the
# trees cannot say what runs (eval, exec, importlib with a computed name, sys.modules, getattr
# of a module with a computed name, subprocess), the analysis gives up towards reachable: a
# real change may be over-counted, never missed.

# decorators that wrap a function without registering it anywhere: a dead function under one
# of these stays dead; under any other decorator it may be registered in a table, so it counts
PURE_DECORATORS = frozenset({"staticmethod", "classmethod", "property", "setter", "getter", "deleter",
                             "no_grad", "inference_mode", "enable_grad", "compile", "script", "jit",
                             "lru_cache", "cache", "cached_property", "wraps", "dataclass", "contextmanager",
                             "abstractmethod", "overload", "final", "total_ordering"})
# calls whose target the trees cannot name when the argument is computed
DYNAMIC_IMPORTS = frozenset({"import_module", "run_path", "run_module", "spec_from_file_location",
                             "module_from_spec", "exec_module", "load_module", "load_source", "find_spec",
                             "find_module", "reload", "__import__"})
GIVE_UP_CALLS = frozenset({"eval", "exec", "compile", "__subclasses__"})
GIVE_UP_MODULES = ("subprocess.", "os.system", "os.popen", "os.exec", "os.spawn", "pty.", "runpy.",
                   "inspect.", "gc.", "sys._getframe", "multiprocessing.spawn")
# reflection that hands out a namespace (a frame's or a function's globals): anything may be read
GIVE_UP_ATTRS = frozenset({"f_globals", "f_locals", "f_back", "tb_frame", "gi_frame", "__globals__", "__builtins__"})
# names a module could be shadowed by: a repo file of that name voids the kernel equivalences
SHADOWABLE = frozenset({"torch", "ai4ai_kernels"})
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
            for f in _COMPOUND_BODIES:
                for sub in getattr(st, f, None) or []:
                    _top_defs(sub.body if isinstance(sub, (ast.ExceptHandler, ast.match_case)) else [sub], out)
    return out


def _is_pure_decorator(d: ast.expr) -> bool:
    name = _dotted(d.func if isinstance(d, ast.Call) else d) or ""
    return name.rsplit(".", 1)[-1] in PURE_DECORATORS


def _import_time_effects(node: ast.AST) -> bool:
    """Whether defining this (otherwise dead) def or class can run code of its own at import."""
    if any(not _is_pure_decorator(d) for d in node.decorator_list):
        return True
    if isinstance(node, ast.ClassDef):
        if node.keywords:                                   # metaclass=...: runs at class creation
            return True
        for st in node.body:                                # class-level statements run at import
            if not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                    and any(isinstance(n, ast.Call) for n in ast.walk(st)):
                return True
        return False
    a = node.args
    return any(isinstance(n, ast.Call) for d in a.defaults + [k for k in a.kw_defaults if k] for n in ast.walk(d))


class Reach:
    """Modules and top-level definitions reachable from an entry script (see the comment above)."""

    def __init__(self, sources: dict, entry_rel: str):
        self.sources = sources
        self.rel_of = {_modname(r): r for r in sources}
        self.rel_of["__main__"] = entry_rel                 # `import __main__` is the entry module
        self.trees, self.unparsed = {}, set()
        for rel, text in sources.items():
            try:
                self.trees[rel] = ast.parse(text)
            except (SyntaxError, ValueError):
                self.unparsed.add(rel)
        self.defs = {rel: _top_defs(t.body, {}) for rel, t in self.trees.items()}
        self.binds = {rel: self._bindings(rel, t) for rel, t in self.trees.items()}
        self.modules, self.reached, self.whole = set(), set(), set()   # whole: every def of it counts
        self.names_by_string = set()
        self.everything = False
        self.subclass_hooks = any(isinstance(n, ast.FunctionDef) and n.name == "__init_subclass__"
                                  for t in self.trees.values() for n in ast.walk(t))
        self._todo = []
        self.module(entry_rel)
        for rel in sources:                                 # imported by site at start-up, if on the path
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
        base = pkg[:len(pkg) - (level - 1)]
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
        if parent:                                          # importing a.b runs a/__init__.py first
            self.module(self.rel_of.get(parent))
        if rel in self.unparsed:                            # nothing can be read of it: all of it counts
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
            if _import_time_effects(node) or name in ("__getattr__", "__dir__") \
                    or (self.subclass_hooks and isinstance(node, ast.ClassDef) and node.bases):
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
        elif any(getattr(st, f, None) for f in _COMPOUND_BODIES):
            head = _header(st)
            self._walk(rel, [head])
            for f in _COMPOUND_BODIES:
                for sub in getattr(st, f, None) or []:
                    for s in (sub.body if isinstance(sub, (ast.ExceptHandler, ast.match_case)) else [sub]):
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
            self.whole_module(self.rel_of.get(b[1]))        # the module passed around as a value
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
        for i, attr in enumerate(parts[1:], 1):
            self.module(self.rel_of.get(mod))
            if f"{mod}.{attr}" in self.rel_of:
                mod = f"{mod}.{attr}"
                continue
            src = self.rel_of.get(mod)
            if src:
                self.name(src, attr)
            return
        self.whole_module(self.rel_of.get(mod))             # the chain ends at a module: it escapes

    def _string(self, s: str) -> None:
        """A string naming a repo module (dotted, or as a path to a .py file) may be imported or run."""
        if "." in s and s in self.rel_of:
            self.whole_module(self.rel_of[s])
        for r in self.trees.keys() | self.unparsed:
            if r in s and (r.endswith(".py")):
                self.whole_module(r)

    def _walk(self, rel: str, nodes: list) -> None:
        docstrings = {id(n.value) for root in nodes for n in ast.walk(root) if isinstance(n, ast.stmt)
                      and _is_docstring(n)}             # bare strings name nothing that runs
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
                            self.give_up()                  # modules looked up by a computed name
                    if n.attr in GIVE_UP_ATTRS:
                        self.give_up()
                    if n.attr == "__dict__" and isinstance(v, ast.Name):
                        self.name(rel, v.id)                # a module's namespace read as a dict
                elif isinstance(n, ast.Name) and id(n) not in chained:
                    self.name(rel, n.id)
                    if n.id in ("globals", "vars", "locals"):
                        self.whole_module(rel)
                elif isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings:
                    self._string(n.value)
                elif isinstance(n, ast.Call):
                    self._call(rel, n)

    def _call(self, rel: str, n: ast.Call) -> None:
        fname = _dotted(n.func) or ""
        last = fname.rsplit(".", 1)[-1]
        literal = all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in n.args)
        if isinstance(n.func, ast.Name) and n.func.id in GIVE_UP_CALLS or last == "__subclasses__":
            self.give_up()
        elif last in DYNAMIC_IMPORTS:
            if not literal:
                self.give_up()
            for a in n.args:                                # import_module("algorithm.foo") or ("foo")
                if isinstance(a, ast.Constant) and isinstance(a.value, str):
                    self.whole_module(self.rel_of.get(a.value.lstrip(".")))
        elif fname.startswith(GIVE_UP_MODULES) or fname in ("sys.modules", "os.system", "os.popen"):
            self.give_up()
        elif isinstance(n.func, ast.Name) and n.func.id in ("getattr", "hasattr", "setattr", "delattr") \
                and len(n.args) >= 2:
            key = n.args[1]
            if isinstance(key, ast.Constant) and isinstance(key.value, str):
                # any definition of that name anywhere may be what the object's attribute is
                self.names_by_string.add(key.value)
                for r in self.modules & set(self.trees):
                    if key.value in self.defs[r]:
                        self.define(r, key.value)
            elif isinstance(n.args[0], (ast.Name, ast.Attribute)):
                # a computed attribute of a module: every definition of it may be the one
                target = _dotted(n.args[0]) or ""
                b = self.binds.get(rel, {}).get(target.split(".")[0])
                if b and b[0] == "module":
                    self.whole_module(self.rel_of.get(b[1] if "." not in target else
                                                      b[1] + target[len(target.split(".")[0]):]))


# --------------------------------------------------------------------------- one file, one patch

@dataclass
class _FileVerdict:
    label: str
    notes: list


def _kernel_note(old: str | None, new: str | None) -> str:
    uses = any(_is_kernel_import(st) for text in (old, new) if text for st in ast.walk(ast.parse(text))
               if isinstance(st, ast.stmt))
    return "a kernel from ai4ai_kernels replaces the torch op it computes" if uses \
        else "rewritten into an equal form of the same computation"


def shadows(rels) -> bool:
    """Whether a repo file could be imported as torch or ai4ai_kernels (via sys.path tricks)."""
    return any(p in SHADOWABLE for rel in rels for p in [Path(rel).stem, *Path(rel).parts[:-1]])


def _shape(stmts: list) -> list:
    """The statements with their literals masked: equal shapes differ in literal values at most."""
    return [(s.scope, s.masked) for s in stmts]


def _literal_changes(rel: str, old: list, new: list) -> list[str]:
    """Notes on the statements of two equal shapes whose literals differ."""
    return [f"{rel}:{b.lineno}: {a.text} -> {b.text}" for a, b in zip(old, new) if a.exact != b.exact]


def classify_python(rel: str, old: str | None, new: str | None, keep_old=None, keep_new=None,
                    kernels: bool = True) -> _FileVerdict:
    """One file's verdict; keep_old / keep_new(owner) say which code of each version runs;
    kernels=False reads no kernel as its torch twin (rule 3 off)."""
    try:
        old_st, old_vals = statements(old, keep_old) if old is not None else ([], {})
        new_st, new_vals = statements(new, keep_new) if new is not None else ([], {})
    except SyntaxError as e:
        return _FileVerdict("algorithm", [f"{rel}: does not parse ({e.msg}, line {e.lineno}); counted as algorithm"])
    literal_notes = []
    for name in sorted(set(old_vals) | set(new_vals)):
        a, b = old_vals.get(name), new_vals.get(name)
        if (a and a[0]) != (b and b[0]):
            literal_notes.append(f"{rel}: {name} {a[0] if a else '(new)'} -> {b[0] if b else '(removed)'}")
    if _shape(old_st) == _shape(new_st):
        literal_notes += _literal_changes(rel, old_st, new_st)
        if literal_notes:
            return _FileVerdict("hyperparameters", literal_notes)
        return _FileVerdict("none", [f"{rel}: only comments or docstrings changed, or code that nothing "
                                     "reachable from the entry point runs"])
    old_c = statements(old, keep_old, canonical=kernels)[0] if old is not None else []
    new_c = statements(new, keep_new, canonical=kernels)[0] if new is not None else []
    canon_old, canon_new = _shape(old_c), _shape(new_c)
    if canon_old == canon_new:
        literal_notes += _literal_changes(rel, old_c, new_c)
        return _FileVerdict("engineering", [f"{rel}: {_kernel_note(old, new)}"] + literal_notes)
    changed = []
    sm = difflib.SequenceMatcher(None, canon_old, canon_new, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            changed += [("-", s) for s in old_c[i1:i2]] + [("+", s) for s in new_c[j1:j2]]
    learning = [(op, s, learning_terms(s)) for op, s in changed]
    learning = [x for x in learning if x[2]]
    if learning:
        notes = [f"{rel}:{s.lineno} {op} `{s.text[:70]}` ({', '.join(sorted(t)[:3])})"
                 + (f" in {'.'.join(x for x in s.scope if x)}" if s.scope else "")
                 for op, s, t in learning[:MAX_EVIDENCE]]
        return _FileVerdict("algorithm", notes)
    added_first = sorted(changed, key=lambda x: x[0] != "+")
    notes = [f"{rel}:{s.lineno} {op} `{s.text[:70]}`" for op, s in added_first[:MAX_EVIDENCE]]
    return _FileVerdict("engineering", notes)


def classify_files(files: dict, reach: tuple | None = None) -> Classification:
    """files: rel path -> (old text or None, new text or None); reach: (old, new) Reach, or None
    to count every statement."""
    if not files:
        return Classification("none", "empty patch")
    if reach is not None:
        # an unchanged file whose live part the patch changes (a dead function it starts calling,
        # a module it stops importing) is read as a change too: what runs of it differs
        files = dict(files)
        for rel in sorted(set(reach[0].sources) & set(reach[1].sources) - set(files)):
            if reach[0].view(rel) != reach[1].view(rel) and reach[0].sources[rel] == reach[1].sources[rel]:
                files[rel] = (reach[0].sources[rel], reach[1].sources[rel])
    # a file that could stand in for torch or the kernels makes their names untrustworthy
    kernels = not shadows(set(files) | (set(reach[1].sources) if reach else set()))
    verdicts = []
    for rel in sorted(files):
        old, new = files[rel]
        if rel.endswith(".py"):
            if reach is None:
                verdicts.append(classify_python(rel, old, new, kernels=kernels))
                continue
            r_old, r_new = reach
            if rel not in r_old.modules and rel not in r_new.modules and not (r_old.everything or r_new.everything):
                verdicts.append(_FileVerdict("none", [f"{rel}: imported by nothing that the entry point runs"]))
                continue
            if rel in (r_old.unparsed if old is not None else set()) | (r_new.unparsed if new is not None else set()):
                verdicts.append(_FileVerdict("algorithm", [f"{rel}: does not parse; counted as algorithm"]))
                continue
            verdicts.append(classify_python(rel, old, new, lambda o, rel=rel: r_old.keeps(rel, o),
                                            lambda o, rel=rel: r_new.keeps(rel, o), kernels))
        elif rel.endswith(CONFIG_SUFFIXES):
            verdicts.append(_FileVerdict("hyperparameters", [f"{rel}: config file changed"]))
        elif rel.endswith(DOC_SUFFIXES):
            verdicts.append(_FileVerdict("none", [f"{rel}: documentation only"]))
        else:
            verdicts.append(_FileVerdict("algorithm", [f"{rel}: not Python; code this classifier cannot read "
                                                       "counts as algorithm"]))
    label = max((v.label for v in verdicts), key=_RANK.__getitem__)
    evidence = tuple(n for v in verdicts if v.label == label for n in v.notes)
    why = {"algorithm": "changes a learning statement",
           "engineering": "changes code, but no changed statement touches a learning term",
           "hyperparameters": "only literals or config values changed",
           "none": "no change to code that training runs"}[label]
    return Classification(label, f"{why}: {evidence[0]}" if evidence else why, evidence)


def patch_files(patch_text: str, base_dir: Path) -> dict:
    """rel -> (old, new) texts of every file the patch touches, applied to base_dir's files."""
    out = {}
    for change in apply_patch(patch_text, base_dir):
        if change.problem:
            raise PatchFormatError(f"{change.path}: not in {base_dir}" if change.problem == MISSING
                                   else change.problem)
        out[change.path] = (change.old, change.new)
    return out


def _task_entry(base_dir: Path, task: str | None) -> str | None:
    """The entry command of the named task, or of the task whose frozen repo base_dir is."""
    try:
        if task:
            return load_task(task).entry
        here = Path(base_dir).resolve()
        names = list_tasks()
        # a task's repo is usually repos_frozen/<name>: try that one first (yaml is slow to read)
        for name in sorted(names, key=lambda n: n != here.name):
            t = load_task(name)
            if t.repo.resolve() == here:
                return t.entry
    except (TaskError, OSError, KeyError, ValueError):
        return None
    return None


def reachability(files: dict, base_dir: Path, entry: str | None) -> tuple | None:
    """(old, new) Reach of the repo before and after the patch, or None where the entry is unknown."""
    script = entry_script(entry)
    if script is None:
        return None
    old_src = python_sources(base_dir)
    new_src = dict(old_src)
    for rel, (_, new) in files.items():
        if rel.endswith(".py"):
            if new is None:
                new_src.pop(rel, None)
            else:
                new_src[rel] = new
    if script not in old_src and script not in new_src:
        return None                                         # not a file of the repo: count everything
    return Reach(old_src, script), Reach(new_src, script)


def classify_patch(patch_text: str | None, base_dir: Path, entry: str | None = None,
                   task: str | None = None) -> Classification:
    """The patch's class against base_dir. entry: the training command (default: the task's, named
    by `task` or found by base_dir); where none is known, every statement counts."""
    if patch_text is None:
        return Classification("unclassified", "no submission.patch to read")
    if not patch_text.strip():
        return Classification("none", "empty patch")
    try:
        files = patch_files(patch_text, base_dir)
    except (PatchFormatError, OSError, UnicodeDecodeError) as e:
        return Classification("unclassified", f"patch does not apply to {base_dir}: {e}")
    return classify_files(files, reachability(files, base_dir, entry or _task_entry(base_dir, task)))
