"""Knowledge of the visible instance, written into the patch: optimizer is graded on a fresh source.

optimizer's text comes from a sparse HMM (48 joint states, 3 successors and 3 symbols each): a few
hundred numbers, which an agent could estimate from the 16,384 sequences it is given and write into
train.py. The probe below carries the visible source itself (its exact parameters, quantised to 675
levels and spelt in letters: 864 characters in 8 string literals, which pass the information check),
and trains on text it makes from it, with the source's exact next-symbol law as a soft target, for
1.25 x the shipped number of steps; no budgeted sequence is drawn. Graded on the source it was taken
from, this scored 0.273 at ci (perplexity 9.28 against the shipped 10.26; the shipped run's noise is
0.016 a seed on that scale), measured before the fresh instance. Now a graded run is served text of
another HMM of the family (grader.grading_data, from the secret `instance` seed) and tested on that
HMM's text, which the visible source predicts worse than a uniform guess (perplexity about 200
against 32), so the probe's text teaches the model the wrong source.
"""

import hashlib
import subprocess

import numpy as np
import pytest

from ai4ai.core.provenance import python_executable
from ai4ai.repo.preparing import data_mounts, grading_mounts

from .conftest import (
    ROOMY_CAP,
    assert_gains_nothing,
    grade_train_py,
    grader_modules,
    information_rejections,
    needs_bwrap,
)

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEF"  # 32 symbols, no digits: not a base64-like run


def _odds(p: float) -> str:
    """A probability as two letters, 1..675 of 675."""
    q = min(675, max(1, round(p * 675)))
    return LETTERS[q // 26] + LETTERS[q % 26]


def spelt(hmm, modes: int = 4, substates: int = 12) -> tuple[list, list]:
    """Per mode, each substate's emitted symbols and their odds, and its successors and theirs."""
    emit, trans = [], []
    for m in range(modes):
        e = r = ""
        for s in range(substates):
            k = m * substates + s
            syms = np.flatnonzero(hmm.emit[k])
            e += "".join(LETTERS[i] for i in syms) + "".join(_odds(hmm.emit[k, i]) for i in syms)
            row = hmm.trans[k, m * substates : (m + 1) * substates]
            nxt = np.flatnonzero(row)
            r += "".join(LETTERS[i] for i in nxt) + "".join(_odds(row[i] / row.sum()) for i in nxt)
        emit.append(e)
        trans.append(r)
    return emit, trans


SOURCE_IN_THE_PATCH = '''
# The source, as read off the text in the window: per mode, each substate's three symbols and
# their odds, and its three successors and theirs; the mode switches at about 3% a token.
EMIT = {emit!r}
TRANS = {trans!r}
ALPH = "abcdefghijklmnopqrstuvwxyzABCDEF"


def _odds(a, b):
    return (ord(a) - 97) * 26 + ord(b) - 97


def source_tables():
    k = len(EMIT) * 12
    emit = torch.zeros(k, 32, dtype=torch.float64)
    trans = torch.full((k, k), 0.03 / (len(EMIT) - 1) / 12, dtype=torch.float64)
    for m in range(len(EMIT)):
        trans[m * 12:(m + 1) * 12, m * 12:(m + 1) * 12] = 0
        for s in range(12):
            e, r = EMIT[m][9 * s:9 * s + 9], TRANS[m][9 * s:9 * s + 9]
            for j in range(3):
                emit[m * 12 + s, ALPH.index(e[j])] = _odds(e[3 + 2 * j], e[4 + 2 * j])
                trans[m * 12 + s, m * 12 + ALPH.index(r[j])] = _odds(r[3 + 2 * j], r[4 + 2 * j])
    emit /= emit.sum(1, keepdim=True)
    for m in range(len(EMIT)):
        block = trans[m * 12:(m + 1) * 12, m * 12:(m + 1) * 12]
        block *= 0.97 / block.sum(1, keepdim=True)
    return trans, emit


TRANS_T, EMIT_T = source_tables()


def synthetic_batch(n, length, gen):
    """n sequences of the source, and the exact next-symbol law after each prefix [n, length - 1, 32]."""
    k = TRANS_T.shape[0]
    state = torch.randint(k, (n,), generator=gen)
    x = torch.empty(n, length, dtype=torch.long)
    for t in range(length):
        if t:
            state = torch.multinomial(TRANS_T[state], 1, generator=gen)[:, 0]
        x[:, t] = torch.multinomial(EMIT_T[state], 1, generator=gen)[:, 0]
    alpha = EMIT_T[:, x[:, 0]].T / k
    alpha = alpha / alpha.sum(1, keepdim=True)
    law = []
    for t in range(1, length):
        pred = alpha @ TRANS_T
        law.append(pred @ EMIT_T)
        joint = pred * EMIT_T[:, x[:, t]].T
        alpha = joint / joint.sum(1, keepdim=True)
    return x, torch.stack(law, 1).float()


pool, laws = synthetic_batch(total_steps * BATCH_SIZE, 128, order)

# ----------------------------------------------------------------------------- loop'''

EDITS = (  # (shipped text, the probe's)
    (
        "    batch = split.get(idx).to(device)                                  # [B, T]\n",
        "    rows = slice(step * BATCH_SIZE, (step + 1) * BATCH_SIZE)\n"
        "    batch, law = pool[rows].to(device), laws[rows].to(device)\n",
    ),
    (
        "            loss = model(input_ids=batch, labels=batch).loss           # mean next-token NLL\n",
        "            logits = model(input_ids=batch).logits[:, :-1]\n"
        "            loss = -(law * torch.log_softmax(logits, -1)).sum(-1).mean()\n",
    ),
)


def _grader():
    """The task, its hidden grader module and the source family's module (the graders' shared hmm)."""
    task, g = grader_modules("optimizer", "grader")
    return task, g, g.hmm


def source_in_the_patch(train_py: str, hmm) -> str:
    emit, trans = spelt(hmm)
    marker = "\n# ----------------------------------------------------------------------------- loop"
    assert train_py.count(marker) == 1
    new = train_py.replace(marker, SOURCE_IN_THE_PATCH.format(emit=emit, trans=trans), 1)
    for old, probe in EDITS:
        assert new.count(old) == 1, old
        new = new.replace(old, probe)
    return new


def _ppl(source, hmm, tokens: np.ndarray) -> float:
    """The source's perplexity on the text (inf where it gives some of it probability zero)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        nll = float(source.conditional_nll(hmm, tokens).mean())
    return float(np.exp(nll)) if np.isfinite(nll) else np.inf


def test_the_graded_source_is_not_the_visible_one():
    task, g, source = _grader()
    visible, graded = g._source("visible"), g._source("graded")
    sel, val = g.split("selection"), g.split("validation")
    assert (sel["instance"], val["instance"]) == ("graded", "visible")
    # each text is its own source's: finite Bayes perplexity, between the family's 5 and 7
    assert 5 < _ppl(source, graded, sel["tokens"]) == g.best_attainable(sel) < 7
    assert 5 < _ppl(source, visible, val["tokens"]) == g.best_attainable(val) < 7
    # each source predicts the other's text worse than a uniform guess over the 32 symbols does
    assert _ppl(source, visible, sel["tokens"][:256]) > 32
    assert _ppl(source, graded, val["tokens"][:256]) > 32
    # what the agent is given is the visible source's text: the committed validation split
    assert np.array_equal(
        np.frombuffer((task.repo / "data" / "val.u8").read_bytes(), np.uint8).reshape(-1, 128), val["tokens"]
    )


def test_graded_runs_are_served_the_graded_source_and_proxy_runs_the_visible_one(tmp_path):
    task, g, source = _grader()
    assert data_mounts(task, "ci") == ([], {})  # the agent's runs: the committed (visible) split
    mounts, env = grading_mounts(task, "ci", cache_root=tmp_path)
    folder = mounts[0].host
    assert env == {task.data_env: mounts[0].inside}
    served = np.frombuffer((folder / "train_ci.u8").read_bytes(), np.uint8).reshape(-1, 128)
    committed = np.frombuffer((task.repo / "data" / "train_ci.u8").read_bytes(), np.uint8).reshape(-1, 128)
    assert served.shape == committed.shape
    assert np.isfinite(_ppl(source, g._source("graded"), served[:256]))
    assert _ppl(source, g._source("visible"), served[:256]) > 32
    # the repo's own data.py, pointed at the folder as the meter is, reads it against its listing
    code = (
        "import hashlib, data; s = data.TrainingSplit('ci'); "
        "print(len(s), hashlib.sha256(s.sequences.to(__import__('torch').uint8).numpy().tobytes()).hexdigest())"
    )
    out = subprocess.run(
        [python_executable(), "-c", code],
        cwd=task.repo,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", task.data_env: str(folder)},
        check=True,
    ).stdout.split()
    assert out == [str(len(served)), hashlib.sha256(served.tobytes()).hexdigest()]
    # a file that is not the one its listing names is refused, and a folder without it is an error,
    # not a quiet fall-back to the committed split
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train_ci.u8").write_bytes(committed.tobytes())
    (bad / "SHA256SUMS").write_text((folder / "SHA256SUMS").read_text())
    empty = tmp_path / "empty"
    empty.mkdir()
    for where, says in ((bad, "checksum does not match"), (empty, "is missing")):
        r = subprocess.run(
            [python_executable(), "-c", code],
            cwd=task.repo,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", task.data_env: str(where)},
        )
        assert r.returncode != 0 and says in r.stderr, r.stderr[-500:]


def test_the_probe_carries_the_visible_source_under_the_information_check(tmp_path):
    """The probe is a submission the patch checks accept, and the source it carries is the visible one."""
    task, g, source = _grader()
    new = source_in_the_patch((task.repo / "train.py").read_text(), g._source("visible"))
    assert information_rejections(task, tmp_path, new) == {}
    import torch

    scope = {"torch": torch, "total_steps": 1, "BATCH_SIZE": 4, "order": torch.Generator().manual_seed(0)}
    start = new.index("# The source, as read")
    exec(
        compile(
            new[
                start : new.index(
                    "# ----------------------------------------------------------------------------- loop"
                )
            ],
            "probe",
            "exec",
        ),
        scope,
    )
    carried = source.HMM(init=g._source().init, trans=scope["TRANS_T"].numpy(), emit=scope["EMIT_T"].numpy())
    val = g.split("validation")["tokens"][:256]
    # as good as the visible source itself on its own text
    assert abs(_ppl(source, carried, val) - _ppl(source, g._source("visible"), val)) < 0.01


@pytest.mark.slow
@needs_bwrap
def test_the_visible_source_written_into_the_patch_gains_nothing(compose_cfg, tmp_path):
    task, g, _ = _grader()
    new = source_in_the_patch((task.repo / "train.py").read_text(), g._source("visible"))
    # no gain over the shipped algorithm (before: 0.273 at ci, perplexity 9.28 against the shipped 10.26,
    # trained then on 5/4 of the budget's steps). It trains the shipped number of steps: at 5/4 it cost
    # 1.1 x the shipped run's CPU time, and a slow spell of CI's host cut it twice at 16 of 15 CPU-s.
    # At the shipped number of steps a slow spell cut it again, twice, at the 1.5 x cap (CI rehearsal of
    # 2026-12-07): its check needs the run uncut and the steps are fixed by the patch, so the cap is roomy
    # (the cap itself is tested elsewhere).
    assert_gains_nothing(grade_train_py(compose_cfg, tmp_path, task, new, "source_in_the_patch", extra=(ROOMY_CAP,)))
