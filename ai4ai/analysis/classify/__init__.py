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
   before and after the patch, is read into a graph (reach.Reach): the entry module's
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
   is read as that form (kernels.canonical_form): FusedAdamW for torch.optim.AdamW (and for Adam
   without weight decay), cross_entropy for F.cross_entropy, fused_linear_cross_entropy on
   the model's final hidden state and lm_head weight for the HF model's own `.loss` or CE of
   its logits, token_logprobs for log_softmax + gather. If that makes the statements
   equal, the patch is `engineering` (an execution change), whatever literals changed too.
4. Otherwise the statements that differ (difflib over the statements read as in 3) are the
   evidence. A statement is a learning statement when one of its identifiers, attribute
   names, keyword names or subscript keys, or the name of a function or class around it
   (and that class's bases), contains a learning term: loss, grad, backward, lr, optimizer,
   momentum, decay, warmup, schedule, labels, logits, entropy, reward, perm / shuffle /
   sampler (how batches are drawn), ... (statements.LEARNING_TERMS), or when it calls or defines
   `step` as a method. Calls to print and logging never count as learning (they change no
   number). Any learning statement makes the patch `algorithm`; otherwise `engineering`.
5. Non-Python files: config files (.yaml, .json, .toml, ...) are `hyperparameters`,
   documentation (.md, .txt, .rst) is `none`, anything else is code this package cannot read
   and counts as `algorithm`, so that nothing hides behind an unreadable file.

Known limits, by design conservative towards `algorithm`: rewriting the loss with a fused
kernel in a form rule 3 does not list (a temporary used twice, a protected helper inlined
by hand) is `algorithm`; so is gradient accumulation that keeps the effective batch. A
human override file (labels.yaml, read by ai4ai.report) maps a patch's sha256 to a label.

A learning-rate schedule is part of the update rule: a patch that changes the body of the
schedule function (examples/optimizer/warmup_cosine.patch) is `algorithm`, not
`hyperparameters`, because it changes how the step size evolves, not a value in it.

The package, bottom-up (each module imports only those above it):

`syntax`      the syntax-tree helpers the others share (dotted names, dumps, statement headers)
`kernels`     kernel equivalence (rule 3): canonical_form, is_kernel_import, shadows
`statements`  a file as statements with literals masked (rules 1 and 2), module_constants,
              learning_terms (rule 4)
`reach`       reachability (rule 0): Reach, entry_script, python_sources
`verdict`     classify_python (one file), classify_files and classify_patch (one patch, rule 5),
              patch_files, reachability, Classification and LABELS
"""

from ai4ai.analysis.classify.kernels import shadows
from ai4ai.analysis.classify.reach import Reach, entry_script, python_sources
from ai4ai.analysis.classify.statements import LEARNING_TERMS, learning_terms, module_constants, statements
from ai4ai.analysis.classify.verdict import (
    LABELS,
    Classification,
    classify_files,
    classify_patch,
    classify_python,
    patch_files,
    reachability,
)

__all__ = [
    "LABELS",
    "LEARNING_TERMS",
    "Classification",
    "Reach",
    "classify_files",
    "classify_patch",
    "classify_python",
    "entry_script",
    "learning_terms",
    "module_constants",
    "patch_files",
    "python_sources",
    "reachability",
    "shadows",
    "statements",
]
