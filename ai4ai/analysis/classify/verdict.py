"""One file's verdict and one patch's Classification, the strongest verdict of its files.

classify_python compares a file's statements before and after (rules 1-4), classify_files reads
every file of a patch (rule 5 for non-Python files), classify_patch applies a patch and reads it
with the reachability of the task's entry point.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from pathlib import Path

from ai4ai.analysis.classify.kernels import is_kernel_import, shadows
from ai4ai.analysis.classify.reach import Reach, entry_script, python_sources
from ai4ai.analysis.classify.statements import learning_terms, statements
from ai4ai.core.task import TaskError, list_tasks, load_task
from ai4ai.repo.patches import MISSING, PatchFormatError, apply_patch

LABELS = ("none", "hyperparameters", "engineering", "algorithm", "unclassified")
_RANK = {"none": 0, "hyperparameters": 1, "engineering": 2, "algorithm": 3}

CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml", ".cfg", ".ini")
DOC_SUFFIXES = (".md", ".txt", ".rst")
MAX_EVIDENCE = 4


@dataclass(frozen=True)
class Classification:
    label: str
    reason: str
    evidence: tuple = field(default=())

    def as_dict(self) -> dict:
        return {"label": self.label, "reason": self.reason, "evidence": list(self.evidence)}


@dataclass
class _FileVerdict:
    label: str
    notes: list


def _kernel_note(old: str | None, new: str | None) -> str:
    uses = any(
        is_kernel_import(st)
        for text in (old, new)
        if text
        for st in ast.walk(ast.parse(text))
        if isinstance(st, ast.stmt)
    )
    return (
        "a kernel from ai4ai_kernels replaces the torch op it computes"
        if uses
        else "rewritten into an equal form of the same computation"
    )


def _shape(stmts: list) -> list:
    """The statements with their literals masked: equal shapes differ in literal values at most."""
    return [(s.scope, s.masked) for s in stmts]


def _literal_changes(rel: str, old: list, new: list) -> list[str]:
    """Notes on the statements of two equal shapes whose literals differ."""
    return [f"{rel}:{b.lineno}: {a.text} -> {b.text}" for a, b in zip(old, new) if a.exact != b.exact]


def classify_python(
    rel: str, old: str | None, new: str | None, keep_old=None, keep_new=None, kernels: bool = True
) -> _FileVerdict:
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
        return _FileVerdict(
            "none",
            [f"{rel}: only comments or docstrings changed, or code that nothing reachable from the entry point runs"],
        )
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
        notes = [
            f"{rel}:{s.lineno} {op} `{s.text[:70]}` ({', '.join(sorted(t)[:3])})"
            + (f" in {'.'.join(x for x in s.scope if x)}" if s.scope else "")
            for op, s, t in learning[:MAX_EVIDENCE]
        ]
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
            verdicts.append(
                classify_python(
                    rel,
                    old,
                    new,
                    lambda o, rel=rel, r_old=r_old: r_old.keeps(rel, o),
                    lambda o, rel=rel, r_new=r_new: r_new.keeps(rel, o),
                    kernels,
                )
            )
        elif rel.endswith(CONFIG_SUFFIXES):
            verdicts.append(_FileVerdict("hyperparameters", [f"{rel}: config file changed"]))
        elif rel.endswith(DOC_SUFFIXES):
            verdicts.append(_FileVerdict("none", [f"{rel}: documentation only"]))
        else:
            verdicts.append(
                _FileVerdict("algorithm", [f"{rel}: not Python; code this classifier cannot read counts as algorithm"])
            )
    label = max((v.label for v in verdicts), key=_RANK.__getitem__)
    evidence = tuple(n for v in verdicts if v.label == label for n in v.notes)
    why = {
        "algorithm": "changes a learning statement",
        "engineering": "changes code, but no changed statement touches a learning term",
        "hyperparameters": "only literals or config values changed",
        "none": "no change to code that training runs",
    }[label]
    return Classification(label, f"{why}: {evidence[0]}" if evidence else why, evidence)


def patch_files(patch_text: str, base_dir: Path) -> dict:
    """rel -> (old, new) texts of every file the patch touches, applied to base_dir's files."""
    out = {}
    for change in apply_patch(patch_text, base_dir):
        if change.problem:
            raise PatchFormatError(f"{change.path}: not in {base_dir}" if change.problem == MISSING else change.problem)
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
        return None  # not a file of the repo: count everything
    return Reach(old_src, script), Reach(new_src, script)


def classify_patch(
    patch_text: str | None, base_dir: Path, entry: str | None = None, task: str | None = None
) -> Classification:
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
