"""The patch classifier on hand-made patches of each class and on the shipped examples."""
import pytest

from ai4ai.classify import classify_files, classify_patch
from ai4ai.submission import unified_diff

from .conftest import example


def _edit(repo, rel: str, *replacements: tuple[str, str]) -> str:
    """A unified diff of `rel` with each (old, new) text replaced once."""
    old = (repo / rel).read_text()
    new = old
    for a, b in replacements:
        assert a in new, a
        new = new.replace(a, b, 1)
    return unified_diff(rel, old, new)


def test_empty_patch_is_none(optimizer_task):
    assert classify_patch("", optimizer_task.repo).label == "none"


def test_comments_and_docstrings_only_are_none(optimizer_task):
    patch = _edit(optimizer_task.repo, "optim.py", ('"""Learning rate for optimizer step', '"""The rate at step'),
                  ("# best constant rate", "# the best constant rate"))
    c = classify_patch(patch, optimizer_task.repo)
    assert c.label == "none", c


@pytest.mark.parametrize("edits", [
    [("LR = 3e-3", "LR = 2e-3")],
    [("BETAS = (0.9, 0.95)", "BETAS = (0.9, 0.99)"), ("WEIGHT_DECAY = 0.1", "WEIGHT_DECAY = 0.0")],
    [("lr=LR", "lr=1e-3")],                                   # a module constant replaced by a literal
])
def test_literal_changes_are_hyperparameters(optimizer_task, edits):
    c = classify_patch(_edit(optimizer_task.repo, "optim.py", *edits), optimizer_task.repo)
    assert c.label == "hyperparameters", c
    assert "optim.py" in c.reason


def test_batch_size_in_the_loop_file_is_a_hyperparameter(optimizer_task):
    c = classify_patch(_edit(optimizer_task.repo, "train.py", ("BATCH_SIZE = 32", "BATCH_SIZE = 64")),
                       optimizer_task.repo)
    assert c.label == "hyperparameters" and "BATCH_SIZE 32 -> 64" in c.reason


def test_compile_autocast_and_logging_are_engineering(optimizer_task):
    repo = optimizer_task.repo
    patch = _edit(repo, "train.py",
                  ("model = build_model(args.scale).to(device)",
                   "model = torch.compile(build_model(args.scale).to(device))\ntorch.set_float32_matmul_precision('high')"),
                  ("    loss = model(input_ids=batch, labels=batch).loss ",
                   "    with torch.autocast(device_type=device.type, dtype=torch.bfloat16):\n"
                   "        loss = model(input_ids=batch, labels=batch).loss "),
                  ('print(f"step {done}/{total_steps} loss {loss.item():.4f} "',
                   'print(f"step {done}/{total_steps} loss {loss.item():.3f} "'))
    c = classify_patch(patch, repo)
    assert c.label == "engineering", c
    assert "no changed statement touches a learning term" in c.reason and "torch.compile" in c.reason


def test_fused_kernel_for_the_same_op_is_engineering(optimizer_task):
    patch = _edit(optimizer_task.repo, "optim.py", ("import torch\n", "import torch\nfrom ai4ai_kernels import FusedAdamW\n"),
                  ("torch.optim.AdamW(model.parameters()", "FusedAdamW(model.parameters()"))
    c = classify_patch(patch, optimizer_task.repo)
    assert c.label == "engineering" and "kernel" in c.reason, c


@pytest.mark.parametrize("rel,edits,term", [
    ("optim.py", [("torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)",
                   "torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)")], "momentum"),
    ("train.py", [("loss = model(input_ids=batch, labels=batch).loss ",
                   "loss = 1.1 * model(input_ids=batch, labels=batch).loss ")], "loss"),
    ("train.py", [("    loss.backward()\n", "    loss.backward()\n    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n")],
     "clip"),
    ("train.py", [("perm = torch.randperm(len(split), generator=order)",
                   "perm = torch.arange(len(split))")], "perm"),
])
def test_objective_update_and_sampling_changes_are_algorithm(optimizer_task, rel, edits, term):
    c = classify_patch(_edit(optimizer_task.repo, rel, *edits), optimizer_task.repo)
    assert c.label == "algorithm", c
    assert term in " ".join(c.evidence)


def test_warmup_cosine_is_algorithm_because_the_schedule_function_changed(optimizer_task):
    """A schedule is a function of the step, not a value: changing its body changes the update rule."""
    c = classify_patch(example("warmup_cosine.patch").read_text(), optimizer_task.repo)
    assert c.label == "algorithm", c
    assert "lr_at" in c.reason


def test_muon_is_algorithm(optimizer_task):
    c = classify_patch(example("muon.patch").read_text(), optimizer_task.repo)
    assert c.label == "algorithm", c
    assert any("Muon" in e for e in c.evidence)


def test_strongest_label_wins_and_other_files():
    hp = ("X = 1\n", "X = 2\n")
    assert classify_files({"a.py": hp}).label == "hyperparameters"
    assert classify_files({"a.py": hp, "conf.yaml": ("a: 1\n", "a: 2\n")}).label == "hyperparameters"
    assert classify_files({"a.py": hp, "b.py": ("f()\n", "g()\n")}).label == "engineering"
    assert classify_files({"a.py": hp, "b.py": ("f()\n", "loss = g()\n")}).label == "algorithm"
    assert classify_files({"NOTES.md": ("a\n", "b\n")}).label == "none"
    assert classify_files({"run.sh": ("a\n", "b\n")}).label == "algorithm"          # unreadable code
    assert classify_files({"a.py": ("x = 1\n", "def (\n")}).label == "algorithm"     # does not parse


def test_unreadable_patch_is_unclassified(tmp_path):
    assert classify_patch(None, tmp_path).label == "unclassified"
    bad = "--- a/missing.py\n+++ b/missing.py\n@@ -1,1 +1,1 @@\n-a\n+b\n"
    c = classify_patch(bad, tmp_path)
    assert c.label == "unclassified" and "does not apply" in c.reason
