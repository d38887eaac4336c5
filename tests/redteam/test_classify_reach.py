"""Route 9: the patch classifier must read what training runs, not the text of the diff.

Each probe pads a small change with code that nothing reachable from the task's entry point
(`python train.py`) executes, or hides a real change behind a route a text reader would miss
(a decorator, a hook, getattr, importlib, a method). Dead code may not raise the label; code that
does run may not be ignored.
"""

import pytest

from ai4ai.analysis.classify import classify_patch
from ai4ai.repo.submission import unified_diff

LR_CHANGE = ("LR = 3e-3", "LR = 2e-3")

# a function full of learning terms: a text reader calls any patch that adds it `algorithm`
SCALE_GRADS = '''

def tidy(model, factor=0.5):
    """Shrink every gradient before the optimizer step."""
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(factor)
'''

FOO = '''"""A second optimizer step rule."""
import torch


def sign_descent(model, lr):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad.sign(), alpha=-lr)
'''


def _patch(repo, edits: dict) -> str:
    """A patch of the repo: rel -> list of (old, new) replacements, or the text of a new file."""
    out = []
    for rel, what in edits.items():
        if isinstance(what, str):
            out.append(unified_diff(rel, None, what))
            continue
        old = (repo / rel).read_text()
        new = old
        for a, b in what:
            assert a in new, a
            new = new.replace(a, b, 1)
        out.append(unified_diff(rel, old, new))
    return "".join(out)


def _label(task, edits) -> tuple[str, object]:
    c = classify_patch(_patch(task.repo, edits), task.repo)
    return c.label, c


def test_dead_function_beside_a_literal_change_is_hyperparameters(task):
    label, c = _label(task, {"optim.py": [LR_CHANGE, ("    return LR\n", "    return LR\n" + SCALE_GRADS)]})
    assert label == "hyperparameters", c
    assert "LR 0.003 -> 0.002" in c.reason


def test_dead_function_in_the_entry_module_is_ignored(task):
    label, c = _label(
        task, {"optim.py": [LR_CHANGE], "train.py": [("N_SAVES = 8 ", SCALE_GRADS.strip() + "\n\n\nN_SAVES = 8 ")]}
    )
    assert label == "hyperparameters", c


def test_dead_chain_stays_dead(task):
    """A dead function that calls another new function does not make that one live."""
    chain = SCALE_GRADS + "\n\ndef never_called(model):\n    tidy(model, 0.1)\n"
    label, c = _label(task, {"optim.py": [LR_CHANGE, ("    return LR\n", "    return LR\n" + chain)]})
    assert label == "hyperparameters", c


def test_the_same_function_called_from_the_loop_is_algorithm(task):
    """The call says nothing of learning (`tidy(model)`): the function's body, now live, does."""
    label, c = _label(
        task,
        {
            "optim.py": [LR_CHANGE, ("    return LR\n", "    return LR\n" + SCALE_GRADS)],
            "train.py": [
                ("from optim import build_optimizer, lr_at", "from optim import build_optimizer, lr_at, tidy"),
                ("        accelerator.backward(loss)\n", "        accelerator.backward(loss)\n        tidy(model)\n"),
            ],
        },
    )
    assert label == "algorithm", c
    assert "grad" in " ".join(c.evidence)


def test_an_existing_dead_function_that_becomes_called_counts(tmp_path, task):
    """Code that nothing ran and that a patch starts calling is a change of what runs, even in a
    file the patch leaves alone (here: only the import and the call change, neither says "grad")."""
    import shutil

    base = tmp_path / "repo"
    shutil.copytree(task.repo, base, ignore=shutil.ignore_patterns("__pycache__"))
    (base / "algorithm" / "tools.py").write_text('"""Helpers."""' + SCALE_GRADS)
    patch = _patch(
        base,
        {
            "train.py": [
                ("import torch\n", "import torch\n\nfrom algorithm.tools import tidy\n"),
                ("        accelerator.backward(loss)\n", "        accelerator.backward(loss)\n        tidy(model)\n"),
            ]
        },
    )
    c = classify_patch(patch, base, entry="python train.py")
    assert c.label == "algorithm", c
    assert any("algorithm/tools.py" in e and "p.grad.mul_" in e for e in c.evidence), c
    assert classify_patch(patch, base, entry="bash run.sh").label == "engineering"  # the text alone


def test_a_module_nothing_imports_is_ignored(task):
    label, c = _label(task, {"algorithm/foo.py": FOO})
    assert label == "none", c
    assert "algorithm/foo.py" in c.reason
    label, c = _label(task, {"algorithm/foo.py": FOO, "optim.py": [LR_CHANGE]})
    assert label == "hyperparameters", c


def test_a_module_imported_and_used_counts(task):
    label, c = _label(
        task,
        {
            "algorithm/foo.py": FOO,
            "train.py": [
                (
                    "from optim import build_optimizer, lr_at",
                    "from optim import build_optimizer, lr_at\nfrom algorithm.foo import sign_descent",
                ),
                ("        optimizer.step()\n", "        sign_descent(model, 1e-3)\n"),
            ],
        },
    )
    assert label == "algorithm", c
    assert any("algorithm/foo.py" in e for e in c.evidence) or "algorithm/foo.py" in c.reason, c


def test_a_module_imported_through_the_package_counts(task):
    """`import algorithm.foo as f` and an attribute call: resolved through the alias."""
    label, c = _label(
        task,
        {
            "algorithm/foo.py": FOO,
            "train.py": [
                ("import torch\n", "import torch\n\nimport algorithm.foo as f\n"),
                ("        optimizer.step()\n", "        f.sign_descent(model, 1e-3)\n"),
            ],
        },
    )
    assert label == "algorithm", c


# ----------------------------------------------------------------------------- routes a text
# reader would miss must not hide a change: each of these runs, so each counts


@pytest.mark.parametrize("how", ["decorator", "hook", "getattr", "importlib", "method", "package_init"])
def test_code_reached_indirectly_counts(task, how):
    new_fn = SCALE_GRADS
    edits = {"optim.py": [LR_CHANGE]}
    if how == "decorator":
        # the decorator registers the function in a table the loop reads: it runs though never named
        edits["optim.py"].append(
            (
                "    return LR\n",
                "    return LR\n\n\nHOOKS = []\n\n\ndef register(fn):\n"
                "    HOOKS.append(fn)\n    return fn\n\n\n@register" + new_fn,
            )
        )
        edits["train.py"] = [
            ("from optim import build_optimizer, lr_at", "from optim import HOOKS, build_optimizer, lr_at"),
            (
                "        accelerator.backward(loss)\n",
                "        accelerator.backward(loss)\n        for h in HOOKS:\n            h(model)\n",
            ),
        ]
    elif how == "hook":
        # passed as a value to a hook the model calls: no statement that names it says "grad"
        edits["optim.py"].append(("    return LR\n", "    return LR\n" + new_fn))
        edits["train.py"] = [
            ("from optim import build_optimizer, lr_at", "from optim import build_optimizer, lr_at, tidy"),
            (
                "model = build_model(args.scale)\n",
                "model = build_model(args.scale)\nmodel.register_forward_pre_hook(lambda m, a: tidy(m))\n",
            ),
        ]
    elif how == "getattr":
        edits["optim.py"].append(("    return LR\n", "    return LR\n" + new_fn))
        edits["train.py"] = [
            ("import torch\n", "import torch\n\nimport optim\n"),
            (
                "        accelerator.backward(loss)\n",
                "        accelerator.backward(loss)\n        getattr(optim, 'scale_' + 'grads')(model)\n",
            ),
        ]
    elif how == "importlib":
        edits["algorithm/foo.py"] = FOO
        edits["train.py"] = [
            ("import torch\n", "import importlib\n\nimport torch\n"),
            (
                "        optimizer.step()\n",
                "        importlib.import_module('algorithm.foo').sign_descent(model, 1e-3)\n",
            ),
        ]
    elif how == "method":
        # a new method on a class the loop builds runs through the object, not through a name
        edits["optim.py"] += [
            (
                "import torch\n",
                "import torch\n\n\nclass Opt(torch.optim.AdamW):\n"
                "    def step(self, closure=None):\n"
                "        for g in self.param_groups:\n"
                "            for p in g['params']:\n"
                "                p.grad.mul_(0.5)\n"
                "        return super().step(closure)\n",
            ),
            ("    return torch.optim.AdamW(", "    return Opt("),
        ]
    elif how == "package_init":
        # algorithm/__init__.py runs on any import of algorithm.*: module-level code there counts
        edits["algorithm/foo.py"] = FOO
        init = (task.repo / "algorithm" / "__init__.py").read_text()
        edits["algorithm/__init__.py"] = [
            (
                init,
                init + "import torch\n\n_step = torch.optim.AdamW.step\n"
                "torch.optim.AdamW.step = lambda self, closure=None: _step(self, closure)\n",
            )
        ]
        edits["train.py"] = [("import torch\n", "import torch\n\nimport algorithm.foo\n")]
    label, c = _label(task, edits)
    assert label == "algorithm", (how, c)


def test_unknown_entry_counts_everything(task):
    """Where the entry point cannot be read, nothing is ignored (the text rules apply)."""
    patch = _patch(task.repo, {"optim.py": [LR_CHANGE, ("    return LR\n", "    return LR\n" + SCALE_GRADS)]})
    assert classify_patch(patch, task.repo, entry="bash run.sh").label == "algorithm"


@pytest.mark.parametrize(
    "call",
    [
        "globals()['ti' + 'dy'](model)",  # the module's namespace read by a computed key
        "exec('ti' + 'dy(model)')",  # code the trees cannot read
        "sys.modules['op' + 'tim'].tidy(model)",  # a module looked up by a computed name
        "getattr(__import__('op' + 'tim'), 'ti' + 'dy')(model)",  # an import by a computed name
        "subprocess.run([sys.executable, 'algorithm/foo.py'])",  # another script of the repo, run
        "getattr(__import__('__main__'), 'ti' + 'dy')(model)",  # the entry module under its runtime name
        "sys._getframe().f_globals['ti' + 'dy'](model)",  # a frame's namespace
    ],
)
def test_routes_the_trees_cannot_follow_count_as_reachable(task, call):
    """Where static analysis cannot tell what runs, it gives up towards counting, never ignoring."""
    edits = {
        "optim.py": [LR_CHANGE],
        "train.py": [
            ("import torch\n", "import subprocess\nimport sys\n\nimport torch\n"),
            ("        accelerator.backward(loss)\n", f"        accelerator.backward(loss)\n        {call}\n"),
        ],
    }
    if call.startswith(("globals", "exec", "sys._getframe")) or "__main__" in call:  # tidy in train.py
        edits["train.py"].append(("N_SAVES = 8 ", SCALE_GRADS.strip() + "\n\n\nN_SAVES = 8 "))
    elif "foo.py" in call:
        edits["algorithm/foo.py"] = FOO.replace("import torch\n", "import torch\n\nsign_descent(None, 0.1)\n")
    else:
        edits["optim.py"].append(("    return LR\n", "    return LR\n" + SCALE_GRADS))
    label, c = _label(task, edits)
    assert label == "algorithm", (call, c)
    assert any("grad" in e for e in c.evidence), (call, c)


def test_a_shadowed_kernel_package_is_not_trusted(task):
    """A repo file that `import ai4ai_kernels` can pick up (through sys.path) is not our kernels:
    a 'swap' to its cross_entropy is a change of the loss, not an execution change."""
    fake = (
        "import torch\n\n\ndef cross_entropy(logits, target):\n"
        "    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten(), label_smoothing=0.2)\n"
    )
    edits = {
        "algorithm/ai4ai_kernels.py": fake,
        "train.py": [
            (
                "import torch\n",
                "import sys\n\nimport torch\n\nsys.path.insert(0, 'algorithm')\n"
                "from ai4ai_kernels import cross_entropy  # noqa: E402\n",
            ),
            (
                "loss = model(input_ids=batch, labels=batch).loss ",
                "loss = cross_entropy(model(input_ids=batch).logits[:, :-1], batch[:, 1:]) ",
            ),
        ],
    }
    label, c = _label(task, edits)
    assert label == "algorithm", c
    # the same swap with the real package is an execution change
    del edits["algorithm/ai4ai_kernels.py"]
    edits["train.py"][0] = ("import torch\n", "import torch\n\nfrom ai4ai_kernels import cross_entropy\n")
    label, c = _label(task, edits)
    assert label == "engineering", c
