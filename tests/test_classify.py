"""The patch classifier on hand-made patches of each class and on the shipped examples."""

import pytest

from ai4ai.analysis.classify import classify_files, classify_patch
from ai4ai.repo.submission import unified_diff

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
    patch = _edit(
        optimizer_task.repo,
        "optim.py",
        ('"""Learning rate for optimizer step', '"""The rate at step'),
        ("# best constant rate", "# the best constant rate"),
    )
    c = classify_patch(patch, optimizer_task.repo)
    assert c.label == "none", c


@pytest.mark.parametrize(
    "edits",
    [
        [("LR = 3e-3", "LR = 2e-3")],
        [("BETAS = (0.9, 0.95)", "BETAS = (0.9, 0.99)"), ("WEIGHT_DECAY = 0.1", "WEIGHT_DECAY = 0.0")],
        [("lr=LR", "lr=1e-3")],  # a module constant replaced by a literal
    ],
)
def test_literal_changes_are_hyperparameters(optimizer_task, edits):
    c = classify_patch(_edit(optimizer_task.repo, "optim.py", *edits), optimizer_task.repo)
    assert c.label == "hyperparameters", c
    assert "optim.py" in c.reason


def test_batch_size_in_the_loop_file_is_a_hyperparameter(optimizer_task):
    c = classify_patch(
        _edit(optimizer_task.repo, "train.py", ("BATCH_SIZE = 32", "BATCH_SIZE = 64")), optimizer_task.repo
    )
    assert c.label == "hyperparameters" and "BATCH_SIZE 32 -> 64" in c.reason


def test_compile_autocast_and_logging_are_engineering(optimizer_task):
    repo = optimizer_task.repo
    patch = _edit(
        repo,
        "train.py",
        (
            "model = build_model(args.scale)\n",
            "model = torch.compile(build_model(args.scale))\ntorch.set_float32_matmul_precision('high')\n",
        ),
        # the shipped autocast (bf16 at the GPU tiers only) made unconditional
        (
            "        with accelerator.autocast():",
            "        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):",
        ),
        (
            'print(f"step {done}/{total_steps} loss {loss.item():.4f} "',
            'print(f"step {done}/{total_steps} loss {loss.item():.3f} "',
        ),
    )
    c = classify_patch(patch, repo)
    assert c.label == "engineering", c
    assert "no changed statement touches a learning term" in c.reason
    assert any("torch.compile" in e for e in c.evidence), c


def test_fused_kernel_for_the_same_op_is_engineering(optimizer_task):
    patch = _edit(
        optimizer_task.repo,
        "optim.py",
        ("import torch\n", "import torch\nfrom ai4ai_kernels import FusedAdamW\n"),
        ("torch.optim.AdamW(model.parameters()", "FusedAdamW(model.parameters()"),
    )
    c = classify_patch(patch, optimizer_task.repo)
    assert c.label == "engineering" and "kernel" in c.reason, c


@pytest.mark.parametrize(
    "rel,edits,term",
    [
        (
            "optim.py",
            [
                (
                    "torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WEIGHT_DECAY)",
                    "torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)",
                )
            ],
            "momentum",
        ),
        (
            "train.py",
            [
                (
                    "loss = model(input_ids=batch, labels=batch).loss ",
                    "loss = 1.1 * model(input_ids=batch, labels=batch).loss ",
                )
            ],
            "loss",
        ),
        (
            "train.py",
            [
                (
                    "        accelerator.backward(loss)\n",
                    "        accelerator.backward(loss)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
                )
            ],
            "clip",
        ),
        (
            "train.py",
            [("perm = torch.randperm(len(split), generator=order)", "perm = torch.arange(len(split))")],
            "perm",
        ),
    ],
)
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
    assert classify_files({"run.sh": ("a\n", "b\n")}).label == "algorithm"  # unreadable code
    assert classify_files({"a.py": ("x = 1\n", "def (\n")}).label == "algorithm"  # does not parse


def test_unreadable_patch_is_unclassified(tmp_path):
    assert classify_patch(None, tmp_path).label == "unclassified"
    bad = "--- a/missing.py\n+++ b/missing.py\n@@ -1,1 +1,1 @@\n-a\n+b\n"
    c = classify_patch(bad, tmp_path)
    assert c.label == "unclassified" and "does not apply" in c.reason


# --------------------------------------------------------------------------- kernel swaps
# A swap of a loss or optimizer for the ai4ai_kernels op that computes the same thing is an
# execution change (`engineering`); the same swap beside an algorithmic change stays `algorithm`.

KIMPORT = ("import torch\n", "import torch\n\nfrom ai4ai_kernels import {}\n")
OPT_LOSS = "loss = model(input_ids=batch, labels=batch).loss "
FLCE = (
    "loss = fused_linear_cross_entropy(model.transformer(input_ids=batch).last_hidden_state[:, :-1], "
    "model.lm_head.weight, batch[:, 1:]) "
)


def _task(name):
    from ai4ai.core.task import load_task

    return load_task(name)


def _kimport(*names):
    return KIMPORT[0], KIMPORT[1].format(", ".join(names))


@pytest.mark.parametrize(
    "task,rel,edits",
    [
        # the HF model's own loss -> the fused linear cross-entropy on the final hidden state
        ("optimizer", "train.py", [_kimport("fused_linear_cross_entropy"), (OPT_LOSS, FLCE)]),
        # the same, README style: the hidden state in a statement of its own
        (
            "optimizer",
            "train.py",
            [
                _kimport("fused_linear_cross_entropy"),
                (
                    OPT_LOSS,
                    "h = model.transformer(batch)[0]\n            loss = fused_linear_cross_entropy("
                    "h[:, :-1], model.lm_head.weight, batch[:, 1:].reshape(-1))",
                ),
            ],
        ),
        # the model's loss -> our cross-entropy over its logits, shifted by hand
        (
            "optimizer",
            "train.py",
            [
                _kimport("cross_entropy"),
                (OPT_LOSS, "loss = cross_entropy(model(input_ids=batch).logits[..., :-1, :], batch[..., 1:]) "),
            ],
        ),
        # labels with -100 at padding: the fused loss ignores them the way the HF loss does
        (
            "sft",
            "train.py",
            [
                _kimport("fused_linear_cross_entropy"),
                (
                    "loss = model(input_ids=batch, labels=labels).loss ",
                    "loss = fused_linear_cross_entropy(model.transformer(batch).last_hidden_state[:, :-1], "
                    "model.lm_head.weight, labels[:, 1:], ignore_index=-100) ",
                ),
            ],
        ),
        # F.cross_entropy on flattened logits -> ours on the (B, T, V) logits
        (
            "distillation",
            "train.py",
            [
                _kimport("cross_entropy"),
                (
                    "loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), ignore_index=-100)",
                    "loss = cross_entropy(logits, y)",
                ),
            ],
        ),
        # the logits never materialised: the fused loss replaces both the logits and the CE lines
        (
            "distillation",
            "train.py",
            [
                _kimport("fused_linear_cross_entropy"),
                (
                    "                logits = model(input_ids=x).logits.float()             # the loss in fp32\n"
                    "                loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), ignore_index=-100)",
                    "                loss = fused_linear_cross_entropy(model.transformer(x).last_hidden_state, "
                    "model.lm_head.weight, y)",
                ),
            ],
        ),
        # a local alias of the torch function rebound to ours
        (
            "graph_diffusion",
            "train.py",
            [_kimport("cross_entropy"), ("ce = torch.nn.functional.cross_entropy", "ce = cross_entropy")],
        ),
        (
            "unlearning",
            "train.py",
            [_kimport("cross_entropy"), ("ce = torch.nn.functional.cross_entropy(", "ce = cross_entropy(")],
        ),
        # log_softmax + gather -> token_logprobs; Adam -> FusedAdamW without weight decay
        (
            "agentic_rl",
            "train.py",
            [
                _kimport("FusedAdamW", "token_logprobs"),
                (
                    "logp = torch.log_softmax(logits, -1).gather(1, act.reshape(-1, 1).to(device)).reshape(T, B)",
                    "logp = token_logprobs(logits, act.reshape(-1).to(device)).reshape(T, B)",
                ),
                (
                    "optimizer = torch.optim.Adam(model.parameters(), lr=LR)",
                    "optimizer = FusedAdamW(model.parameters(), lr=LR, weight_decay=0.0)",
                ),
            ],
        ),
        # both kernels at once, the optimizer through its module
        (
            "optimizer",
            "train.py",
            [
                ("import torch\n", "import torch\n\nimport ai4ai_kernels as K\n"),
                (OPT_LOSS, FLCE.replace("fused_linear", "K.fused_linear")),
            ],
        ),
    ],
)
def test_a_kernel_swap_is_engineering(task, rel, edits):
    t = _task(task)
    c = classify_patch(_edit(t.repo, rel, *edits), t.repo)
    assert c.label == "engineering", c
    assert "kernel" in c.reason, c


def test_kernel_swaps_in_two_files_and_a_literal_are_engineering(optimizer_task):
    repo = optimizer_task.repo
    patch = _edit(
        repo,
        "optim.py",
        _kimport("FusedAdamW"),
        ("torch.optim.AdamW(model.parameters()", "FusedAdamW(model.parameters()"),
        ("LR = 3e-3", "LR = 2e-3"),
    ) + _edit(repo, "train.py", _kimport("fused_linear_cross_entropy"), (OPT_LOSS, FLCE))
    c = classify_patch(patch, repo)
    assert c.label == "engineering", c
    assert any("LR 0.003 -> 0.002" in e for e in c.evidence), c


@pytest.mark.parametrize(
    "task,rel,edits,term",
    [
        # the swap plus label smoothing: a new objective
        (
            "optimizer",
            "train.py",
            [
                _kimport("fused_linear_cross_entropy"),
                (OPT_LOSS, FLCE.replace("batch[:, 1:])", "batch[:, 1:], label_smoothing=0.1)")),
            ],
            "entropy",
        ),
        # the swap plus a z-loss the torch loss never had
        (
            "optimizer",
            "train.py",
            [
                _kimport("cross_entropy"),
                (
                    OPT_LOSS,
                    "loss = cross_entropy(model(input_ids=batch).logits[:, :-1], batch[:, 1:], z_loss_weight=1e-4) ",
                ),
            ],
            "loss",
        ),
        # the loss over every position, unshifted: not the model's next-token loss
        (
            "optimizer",
            "train.py",
            [
                _kimport("fused_linear_cross_entropy"),
                (
                    OPT_LOSS,
                    "loss = fused_linear_cross_entropy(model.transformer(batch).last_hidden_state, "
                    "model.lm_head.weight, batch) ",
                ),
            ],
            "loss",
        ),
        # the fused optimizer plus a changed schedule body
        (
            "optimizer",
            "optim.py",
            [
                _kimport("FusedAdamW"),
                ("torch.optim.AdamW(model.parameters()", "FusedAdamW(model.parameters()"),
                ("    return LR\n", "    return LR * min(1.0, (step + 1) / 100)\n"),
            ],
            "lr",
        ),
        # torch Adam has no weight decay; FusedAdamW's default adds one: a different update rule
        (
            "agentic_rl",
            "train.py",
            [
                _kimport("FusedAdamW"),
                (
                    "optimizer = torch.optim.Adam(model.parameters(), lr=LR)",
                    "optimizer = FusedAdamW(model.parameters(), lr=LR)",
                ),
            ],
            "optimizer",
        ),
        # a hand-written "AdamW" of the submission's own is not the torch op
        (
            "optimizer",
            "optim.py",
            [
                ("import torch\n", "import torch\n\n\nclass AdamW(torch.optim.SGD):\n    pass\n"),
                ("torch.optim.AdamW(model.parameters()", "AdamW(model.parameters()"),
            ],
            "adamw",
        ),
    ],
)
def test_a_kernel_swap_with_an_algorithmic_change_is_algorithm(task, rel, edits, term):
    t = _task(task)
    c = classify_patch(_edit(t.repo, rel, *edits), t.repo)
    assert c.label == "algorithm", c
    assert term in " ".join(c.evidence).lower(), c


def test_example_labels_are_unchanged():
    """Every shipped example keeps its class: reading what runs changed none of them."""
    from ai4ai import PROJECT_ROOT

    expected = {
        "agentic_rl/ppo_gae": "algorithm",
        "diffusion_rl/advantage_norm": "algorithm",
        "diffusion_rl/ddpo_is_ppo": "algorithm",
        "diffusion_rl/dpok": "algorithm",
        "diffusion_rl/rwr": "algorithm",
        "distillation/augmented_transfer_set": "engineering",
        "distillation/ema": "algorithm",
        "distillation/word_level_kd": "algorithm",
        "dpo/dpop": "algorithm",
        "dpo/preferred_ft": "algorithm",
        "dpo/rpo": "algorithm",
        "graph_diffusion/ema": "algorithm",
        "graph_diffusion/marginal_linear": "hyperparameters",
        "graph_diffusion/marginal_noise": "hyperparameters",
        "graph_diffusion/marginal_noise_cosine_lr": "algorithm",
        "graph_diffusion/warmup_cosine": "algorithm",
        "optimizer/ema": "algorithm",
        "optimizer/muon": "algorithm",
        "optimizer/warmup_cosine": "algorithm",
        "pruning/sensitivity_sparsity": "algorithm",
        "pruning/obd_fisher": "algorithm",
        "pruning/wanda": "algorithm",
        "reward_model/conservative_bt_ema": "algorithm",
        "reward_model/rater_noise_model": "algorithm",
        "sft/warmup_cosine": "algorithm",
        "sft/ema": "algorithm",
        "sft/muon": "algorithm",
        "unlearning/gradient_difference": "algorithm",
        "unlearning/npo_retain": "algorithm",
        "unlearning/unlikelihood_retain": "algorithm",
    }
    found = {}
    for p in sorted((PROJECT_ROOT / "examples").glob("*/*.patch")):
        key = f"{p.parent.name}/{p.stem}"
        found[key] = classify_patch(p.read_text(), _task(p.parent.name).repo).label
    assert set(expected) <= set(found), set(expected) - set(found)
    assert {k: found[k] for k in expected} == expected
    # an example added since is held to being readable; its class goes in `expected` when known
    assert all(found[k] != "unclassified" for k in set(found) - set(expected)), found


def test_the_entry_comes_from_the_task_for_a_copy_of_its_repo(tmp_path, optimizer_task):
    """A pristine copy in a run dir (what ai4ai.report reads) is no task's frozen repo: the task's
    name gives the entry; with neither, no code is taken for dead."""
    import shutil

    repo = shutil.copytree(optimizer_task.repo, tmp_path / "pristine", ignore=shutil.ignore_patterns("__pycache__"))
    patch = _edit(
        repo,
        "optim.py",
        ("LR = 3e-3", "LR = 2e-3"),
        (
            "    return LR\n",
            "    return LR\n\n\ndef unused(model):\n    for p in model.parameters():\n        p.grad.zero_()\n",
        ),
    )
    assert classify_patch(patch, repo, task="optimizer").label == "hyperparameters"
    assert classify_patch(patch, optimizer_task.repo).label == "hyperparameters"  # found by its path
    assert classify_patch(patch, repo).label == "algorithm"
