"""Knowledge of the visible instance, written into the patch: sft is graded on a fresh operator table.

sft's problems chain operators that are fixed permutations of 36 values: 936 facts in all, read off
the worked solutions an agent is given. Spelt as letters they are 26 strings of 36 characters, which
pass the information check, and a training run can then make as many worked problems as its CPU cap
allows without drawing one budgeted example. The probe below does that: it carries the visible table,
makes problems from it (operators Zipf-distributed with exponent 1, so the rare ones come up more
often than in the split), and trains on batches of 8 for 896 steps: 1.75 x the shipped run's
examples in about 1.2 x its CPU time, under the 1.5 x cap; no budgeted example is drawn. Graded on
the table it was taken from (checkout of 302ebbb, real `python -m ai4ai.grade`), it scored 0.231 at
ci: exact match 0.265 against the shipped 0.140, about 12 x the seed noise. Now a graded run is given
the graded table's problems (grader.grading_data, from the secret `instance` seed) and starts from a
base that the repo's own prepare.py pretrained on that table's corpus (preparing.graded_artifacts);
the test problems are that table's, so the facts in the patch are wrong facts (the visible table
answers 2.8% of the graded test problems right).
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.core.provenance import python_executable

from .conftest import assert_gains_nothing, grade_train_py, grader_modules, information_rejections, needs_bwrap

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"  # the 36 values as letters: no digit runs

TABLE_IN_THE_PATCH = '''
# The operator table, as read off the worked solutions in the window: row o is operator o's
# permutation; letter x of it is the value that x goes to (the 36 values as letters).
TABLE = {rows!r}
ALPH = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"
VALUES = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
WEIGHTS = 1.0 / torch.arange(1, 27, dtype=torch.float64)     # operators Zipf 1: rare ones more often


def problems_of_the_table(n, gen):
    """n worked 6-operator problems in the split's format, made from the table."""
    from config import BOS, EOS, SEQ_LEN, STOI
    rows = torch.full((n, SEQ_LEN), PAD, dtype=torch.long)
    for i in range(n):
        x = int(torch.randint(36, (1,), generator=gen))
        ops = torch.multinomial(WEIGHTS, 6, replacement=True, generator=gen).tolist()
        text = VALUES[x] + "".join(chr(97 + o) for o in ops) + ":"
        for o in ops:
            y = ALPH.index(TABLE[o][x])
            text += VALUES[x] + chr(97 + o) + "=" + VALUES[y] + ";"
            x = y
        ids = [BOS] + [STOI[c] for c in text + ">" + VALUES[x]] + [EOS]
        rows[i, :len(ids)] = torch.tensor(ids)
    return rows


pool = problems_of_the_table(total_steps * BATCH_SIZE, order)

# ----------------------------------------------------------------------------- loop'''

EDITS = (  # (shipped text, the probe's)
    (
        "total_steps = split.budget // BATCH_SIZE\n",
        "BATCH_SIZE = 8                                           # problems of the table cost no budget\n"
        "total_steps = split.budget * 7 // 32\n",
    ),
    (
        "    batch = split.get(idx).to(device)                                  # [B, T]\n",
        "    batch = pool[step * BATCH_SIZE:(step + 1) * BATCH_SIZE].to(device)\n",
    ),
)


def spelt(table) -> list:
    return ["".join(LETTERS[int(v)] for v in row) for row in table]


def table_in_the_patch(train_py: str, table) -> str:
    marker = "\n# ----------------------------------------------------------------------------- loop"
    assert train_py.count(marker) == 1
    new = train_py.replace(marker, TABLE_IN_THE_PATCH.format(rows=spelt(table)), 1)
    for old, probe in EDITS:
        assert new.count(old) == 1, old
        new = new.replace(old, probe)
    return new


def _grader():
    """The task, its hidden grader module and the problem generator."""
    return grader_modules("sft", "grader", "problems")


def test_the_graded_table_is_not_the_visible_one():
    task, g, P = _grader()
    visible, graded = g._table("visible"), g._table("graded")
    assert visible.shape == graded.shape == (26, 36)
    assert (visible != graded).mean() > 0.9  # ~35/36 of the facts differ
    sel, val = g.split("selection"), g.split("validation")
    # the agent's validation split (committed as data/val.u8) is the visible table's ...
    committed = np.frombuffer((task.repo / "data" / "val.u8").read_bytes(), np.uint8).reshape(-1, P.SEQ_LEN)
    assert np.array_equal(committed, val.rows)

    def answers(table, split):
        out = []
        for row, n in zip(split.rows, split.prompt_len):
            prompt = P.decode(row[1 : n - 1])
            x = P.VALUES.index(prompt[0])
            for op in prompt[1:]:
                x = int(table[P.OPERATORS.index(op), x])
            out.append(P.VALUES[x])
        return np.array(out)

    assert (answers(visible, val) == np.array(val.answers)).all()
    # ... and the hidden problems are the graded table's, which the visible table gets right by chance
    assert (answers(graded, sel) == np.array(sel.answers)).all()
    assert (answers(visible, sel) == np.array(sel.answers)).mean() < 0.1


SHRUNK_DRIVER = r"""
import json, subprocess, sys
from pathlib import Path
from ai4ai.repo.preparing import graded_artifacts, grading_mounts, read_sums
from ai4ai.repo.submission import Submission
from ai4ai.core.task import load_task
from ai4ai.grading.training import build_training_copy
root = Path(sys.argv[1])
task = load_task("sft")
graded = graded_artifacts(task, "full", "cpu", cache_root=root / "cache")
again = graded_artifacts(task, "full", "cpu", cache_root=root / "cache")
empty = Submission(files={}, rejected={}, patch="", lines_added=0, lines_removed=0)
copy = build_training_copy(task, empty, root / "graded_copy", graded)
proxy = build_training_copy(task, empty, root / "proxy_copy")
data = grading_mounts(task, "full", root / "cache")[0][0].host
print("RESULT " + json.dumps({"graded": str(graded), "again": str(again), "sums": read_sums(graded),
                              "copy": str(copy), "proxy": str(proxy), "data": read_sums(data)}))
"""

LOAD = (
    "import hashlib, model; m = model.load_base(model.build_model('full'), 'full'); "
    "print(hashlib.sha256(model.base_path('full').read_bytes()).hexdigest())"
)


def test_a_graded_copy_starts_from_the_base_prepare_made_of_the_graded_corpus(tmp_path):
    """The repo's own prepare.py, run by the harness on the graded instance's corpus (full, shrunk to
    CPU sizes: the same code at 20 pretraining steps), makes the base a graded run's copy holds in
    place of the visible one, listed where model.load_base checks it; a proxy run's copy is unchanged."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AI4AI_")}
    env.update(AI4AI_SHRINK="cpu", OMP_NUM_THREADS="1")
    r = subprocess.run(
        [sys.executable, "-c", SHRUNK_DRIVER, str(tmp_path)],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    out = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith("RESULT "))[7:])
    assert out["graded"] == out["again"] and "cached" in r.stdout  # made once, then reused
    assert list(out["sums"]) == ["artifacts/base_full.safetensors"]
    # what it was made from: the grader's graded corpus (and split), not the repo's committed one
    # (the training split a `datasets` folder at the GPU tiers, its files listed as train_full/<file>)
    assert {k.split("/")[0] for k in out["data"]} == {"train_full", "pretrain.u8"}
    assert any(k.startswith("train_full/") and k.endswith(".arrow") for k in out["data"])
    committed = dict(
        reversed(ln.split()) for ln in (PROJECT_ROOT / "repos_frozen/sft/data/SHA256SUMS").read_text().splitlines()
    )
    assert out["data"]["pretrain.u8"] != committed["pretrain.u8"]
    log = (tmp_path / "cache" / "prepare" / "sft_full_graded.log").read_text()
    assert "pretrain step 20/20" in log
    digest = out["sums"]["artifacts/base_full.safetensors"]
    loaded = subprocess.run([python_executable(), "-c", LOAD], cwd=out["copy"], env=env, capture_output=True, text=True)
    assert loaded.returncode == 0 and loaded.stdout.split()[-1] == digest, loaded.stderr[-2000:]
    # the agent's proxy runs build their copy without it: no base of the graded instance there
    proxy = subprocess.run([python_executable(), "-c", LOAD], cwd=out["proxy"], env=env, capture_output=True, text=True)
    assert digest not in proxy.stdout


def test_the_probe_carries_the_visible_table_under_the_information_check(tmp_path):
    """The probe is a submission the patch checks accept, and the table it carries is the visible one."""
    task, g, P = _grader()
    new = table_in_the_patch((task.repo / "train.py").read_text(), g._table("visible"))
    assert information_rejections(task, tmp_path, new) == {}
    rows = [ln for ln in new.splitlines() if ln.startswith("TABLE = ")]
    carried = np.array([[LETTERS.index(c) for c in row] for row in eval(rows[0][len("TABLE = ") :])])
    assert np.array_equal(carried, g._table("visible"))


@pytest.mark.slow
@needs_bwrap
def test_the_visible_table_in_the_patch_gains_nothing(compose_cfg, tmp_path):
    task, g, P = _grader()
    new = table_in_the_patch((task.repo / "train.py").read_text(), g._table("visible"))
    # before: 0.231 at ci (exact match 0.265 against the shipped 0.140); after: 0.015 (0.028)
    assert_gains_nothing(grade_train_py(compose_cfg, tmp_path, task, new, "visible table"))
