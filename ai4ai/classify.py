"""Did a submission change how the model learns? A patch's class, read from its syntax trees.

    classify_patch(patch_text, base_dir) -> Classification(label, reason, evidence)

No model is asked: each changed Python file is parsed before and after the patch and the
two trees are compared. Labels, strongest first (a patch gets the strongest that applies):

`algorithm`        loss, objective, update rule, schedule or data weighting/ordering changed
`engineering`      code changed, but no changed statement touches a learning term: loop
                   structure, dtype / autocast / compile, kernels, data loading, logging
`hyperparameters`  the trees are equal once every literal is masked: only numbers, strings
                   and module-level constants (NAME = literal) changed, or config files
`none`             empty patch, or only comments, docstrings and documentation changed
`unclassified`     the patch could not be read (no patch text, or it does not apply)

The rules, in order:
1. A file is cut into statements (a compound statement such as `def`, `for` or `with`
   counts as its header; its body is statements of its own), each remembered with its
   enclosing functions and classes. Docstrings and bare strings are dropped.
2. Literals are masked: constants, constant expressions (`-3e-3`, `(0.9, 0.95)`, `1 / 3`)
   and names bound at module level to a constant expression (`lr=LR`). Module-level
   constant assignments themselves are compared by name and value only. If the masked
   statements of every file are equal, the patch is `hyperparameters` (the reason lists the
   values that changed) or `none` (nothing but comments and docstrings changed).
3. A kernel from `ai4ai_kernels` that computes the same thing as the torch op it replaces
   (FusedAdamW for AdamW, cross_entropy for F.cross_entropy, newton_schulz-based Muon for
   Muon) is read as that op; if that makes the statements equal, the patch is
   `engineering` (a kernel substitution).
4. Otherwise the statements that differ (difflib over the masked statements) are the
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
kernel by hand (not a one-for-one call substitution) is `algorithm`; so is gradient
accumulation that keeps the effective batch. A human override file (labels.yaml, read by
ai4ai.report) maps a patch's sha256 to a label for such cases.

A learning-rate schedule is part of the update rule: a patch that changes the body of the
schedule function (examples/optimizer/warmup_cosine.patch) is `algorithm`, not
`hyperparameters`, because it changes how the step size evolves, not a value in it.
"""
from __future__ import annotations

import ast
import copy
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path

from .submission import PatchFormatError, apply_hunks, parse_patch

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
# kernel name in ai4ai_kernels -> the torch op it computes identically
KERNEL_SAME_AS = {"FusedAdamW": "AdamW", "cross_entropy": "cross_entropy", "Muon": "Muon"}
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
    canonical: str          # masked, kernels read as the torch op they replace
    exact: str              # dump with literals
    lineno: int
    text: str
    node: ast.AST


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

    def __init__(self, consts: frozenset, kernels: dict | None = None):
        self.consts, self.kernels = consts, kernels

    def visit_Subscript(self, node):
        node.value = self.visit(node.value)
        return node                     # group["lr"] vs group["peak_lr"] is structure, not a value

    def visit_Dict(self, node):
        node.values = [self.visit(v) for v in node.values]
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        if self.kernels is not None:
            name = _dotted(node.func)
            if name is not None:
                last = name.rsplit(".", 1)[-1]
                if name in self.kernels:
                    node.func = ast.Name(id="op:" + self.kernels[name], ctx=ast.Load())
                elif last in KERNEL_SAME_AS.values() and last not in self.kernels:
                    node.func = ast.Name(id="op:" + last, ctx=ast.Load())
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


def _kernel_names(tree: ast.Module) -> dict:
    """Local names bound to ai4ai_kernels callables that have a torch twin -> that twin."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ai4ai_kernels"):
            for a in node.names:
                if a.name in KERNEL_SAME_AS:
                    out[a.asname or a.name] = KERNEL_SAME_AS[a.name]
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.startswith("ai4ai_kernels"):
                    for k, v in KERNEL_SAME_AS.items():
                        out[f"{a.asname or a.name}.{k}"] = v
    return out


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


def statements(source: str) -> tuple[list[_Stmt], dict]:
    """The file's statements (see the module docstring) and its module-level constants' values."""
    tree = ast.parse(source)
    consts = module_constants(tree)
    kernels = _kernel_names(tree)
    lines = source.splitlines()
    values, out = {}, []

    def walk(body: list, scope: tuple, top: bool) -> None:
        for st in body:
            if _is_docstring(st):
                continue
            if top and isinstance(st, (ast.Assign, ast.AnnAssign)) and st.value is not None \
                    and _const_expr(st.value, frozenset()):
                targets = st.targets if isinstance(st, ast.Assign) else [st.target]
                for t in targets:
                    if isinstance(t, ast.Name):
                        values[t.id] = (ast.unparse(st.value), st.lineno)
                continue
            head = _header(st)
            is_import = isinstance(st, (ast.Import, ast.ImportFrom))
            kernel_import = is_import and ((getattr(st, "module", None) or "").startswith("ai4ai_kernels")
                                           or any(a.name.startswith("ai4ai_kernels") for a in st.names))
            masked = _dump(_Mask(consts).visit(copy.deepcopy(head)))
            canonical = "" if kernel_import else _dump(_Mask(consts, kernels).visit(copy.deepcopy(head)))
            text = lines[st.lineno - 1].strip() if st.lineno - 1 < len(lines) else ast.unparse(head)[:120]
            out.append(_Stmt(scope, masked, canonical, _dump(head), st.lineno, text, head))
            inner = scope
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner = scope + (st.name,)
            elif isinstance(st, ast.ClassDef):
                bases = ", ".join(_dotted(b) or "?" for b in st.bases)
                inner = scope + (f"{st.name}({bases})" if bases else st.name,)
            for f in _COMPOUND_BODIES:
                sub = getattr(st, f, None)
                if sub:
                    if f == "handlers" or f == "cases":
                        for h in sub:
                            walk(h.body, inner, False)
                    else:
                        walk(sub, inner, False)

    walk(tree.body, (), True)
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


# --------------------------------------------------------------------------- one file, one patch

@dataclass
class _FileVerdict:
    label: str
    notes: list


def classify_python(rel: str, old: str | None, new: str | None) -> _FileVerdict:
    try:
        old_st, old_vals = statements(old) if old is not None else ([], {})
        new_st, new_vals = statements(new) if new is not None else ([], {})
    except SyntaxError as e:
        return _FileVerdict("algorithm", [f"{rel}: does not parse ({e.msg}, line {e.lineno}); counted as algorithm"])
    literal_notes = []
    for name in sorted(set(old_vals) | set(new_vals)):
        a, b = old_vals.get(name), new_vals.get(name)
        if (a and a[0]) != (b and b[0]):
            literal_notes.append(f"{rel}: {name} {a[0] if a else '(new)'} -> {b[0] if b else '(removed)'}")
    masked_old = [(s.scope, s.masked) for s in old_st]
    masked_new = [(s.scope, s.masked) for s in new_st]
    if masked_old == masked_new:
        for a, b in zip(old_st, new_st):
            if a.exact != b.exact:
                literal_notes.append(f"{rel}:{b.lineno}: {a.text} -> {b.text}")
        if literal_notes:
            return _FileVerdict("hyperparameters", literal_notes)
        return _FileVerdict("none", [f"{rel}: only comments or docstrings changed"])
    canon_old = [(s.scope, s.canonical) for s in old_st if s.canonical]
    canon_new = [(s.scope, s.canonical) for s in new_st if s.canonical]
    if canon_old == canon_new:
        return _FileVerdict("engineering", [f"{rel}: a kernel from ai4ai_kernels replaces the torch op it computes"])
    changed = []
    sm = difflib.SequenceMatcher(None, masked_old, masked_new, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag != "equal":
            changed += [("-", s) for s in old_st[i1:i2]] + [("+", s) for s in new_st[j1:j2]]
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


def classify_files(files: dict) -> Classification:
    """files: rel path -> (old text or None, new text or None)."""
    if not files:
        return Classification("none", "empty patch")
    verdicts = []
    for rel in sorted(files):
        old, new = files[rel]
        if rel.endswith(".py"):
            verdicts.append(classify_python(rel, old, new))
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
           "none": "no change to code"}[label]
    return Classification(label, f"{why}: {evidence[0]}" if evidence else why, evidence)


def patch_files(patch_text: str, base_dir: Path) -> dict:
    """rel -> (old, new) texts of every file the patch touches, applied to base_dir's files."""
    out = {}
    for old_rel, new_rel, hunks in parse_patch(patch_text):
        rel = new_rel if new_rel is not None else old_rel
        base = Path(base_dir) / rel
        old = base.read_text() if old_rel is not None and base.is_file() else None
        if old_rel is not None and old is None:
            raise PatchFormatError(f"{rel}: not in {base_dir}")
        new = None if new_rel is None else apply_hunks(old or "", hunks)
        out[rel] = (old, new)
    return out


def classify_patch(patch_text: str | None, base_dir: Path) -> Classification:
    if patch_text is None:
        return Classification("unclassified", "no submission.patch to read")
    if not patch_text.strip():
        return Classification("none", "empty patch")
    try:
        files = patch_files(patch_text, base_dir)
    except (PatchFormatError, OSError, UnicodeDecodeError) as e:
        return Classification("unclassified", f"patch does not apply to {base_dir}: {e}")
    return classify_files(files)
