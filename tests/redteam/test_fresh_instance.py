"""Knowledge of the visible instance, written into the patch: reward_model is graded on a fresh one.

The raters of reward_model follow a rule of five lines. An agent can read it off the data it is
given (4,000 clean validation pairs, and noisy training pairs whose raters are named) and write it
into train.py: the probe below relabels every served pair with that rule and trains on the clean
labels. Graded on the rule it was read from, this scored 0.9272 pairwise accuracy on smoke seed 0
(shipped 0.855 +- 0.010 a seed: sigma 0.55, 7 x the noise), and 0.8305 at ci (sigma 0.475; shipped 0.709 on
that instance), measured before the fresh instance. Now a graded run is served pairs of
another instance of the rule family (grader.grading_data, from a secret seed) and the hidden splits
follow it, so what the patch carries ranks the grader's pairs by the wrong features: measured at
ci after the change, 0.6378 (sigma 0.084) against the shipped 0.6648 on the graded instance.
"""

import subprocess

import numpy as np
import pytest

from ai4ai.core.provenance import python_executable
from ai4ai.repo.preparing import data_mounts, grading_mounts

from .conftest import grade_train_py, grader_modules, needs_bwrap

RULE_READ_OFF_THE_DATA = '''def rule_score(seq: torch.Tensor) -> torch.Tensor:
    """The raters' rule as read off the data in the window (prompt p0 p1 p2 | response $)."""
    p = seq[:, :3] - 3
    letters = seq[:, 4:] - 3
    n = (seq[:, 4:] >= 3).sum(1)
    last = letters.gather(1, (n - 1).clamp(min=0)[:, None])[:, 0]
    a = (last > p[:, 0]).long()
    b = (letters[:, 0] < p[:, 1]).long()
    c = ((letters[:, 1:4] - letters[:, :3]) >= 0).all(1).long()
    low = p[:, 2] < 4
    d = torch.where(low, (n >= 8) & (n <= 11), (n >= 13) & (n <= 16)).long()
    return 2 * a + c + d + 2 * c * d + (a ^ b)


def preference_loss('''

RELABEL = """    a, b, label, _rater = (t.to(device) for t in pairs.get(perm[start:start + BATCH_SIZE]))
    sa, sb = rule_score(a), rule_score(b)
    keep = sa != sb
    a, b, label = a[keep], b[keep], (sa > sb)[keep].float()
"""


def _grader():
    """The task and its hidden grader module (grader.py, with its rule module as .rule)."""
    return grader_modules("reward_model", "grader")


def _ranked_right(scores: np.ndarray, split: dict) -> float:
    """The grader's own pairwise accuracy of per-sequence scores on a split (ties 0.5)."""
    _, g = _grader()
    return float(g.credit(scores[split["a"]].astype(float), scores[split["b"]].astype(float), split["label"]).mean())


def test_the_graded_instance_is_not_the_visible_one():
    _, g = _grader()
    graded = g.graded_rule()
    assert graded != g.rule.VISIBLE
    sel = g.split("selection")
    # the graded rule ranks every hidden pair; the visible one, written into a patch, far fewer
    # (measured 0.59; the shipped algorithm learns its instance to about 0.85 at smoke)
    assert _ranked_right(g.rule.rule_scores(sel["seqs"], graded), sel) == 1.0
    assert _ranked_right(g.rule.rule_scores(sel["seqs"]), sel) < 0.72
    # what the agent sees follows the visible rule: the validation split
    val = g.split("validation")
    assert _ranked_right(g.rule.rule_scores(val["seqs"]), val) == 1.0
    # every draw of the family is that far from the visible rule (drawn()'s constraints)
    assert (
        max(
            _ranked_right(g.rule.rule_scores(sel["seqs"]), g.rule.grouped(2000, s, rule=g.rule.drawn(s)))
            for s in range(40)
        )
        < 0.75
    )


def test_graded_runs_are_served_the_graded_instance_and_proxy_runs_the_visible_one(tmp_path):
    task, g = _grader()
    assert data_mounts(task, "ci") == ([], {})  # the agent's runs: the committed (visible) pairs
    mounts, env = grading_mounts(task, "ci", cache_root=tmp_path)
    folder = mounts[0].host
    assert env == {task.data_env: mounts[0].inside}
    seq = g.rule.SEQ_LEN
    rows = np.frombuffer((folder / "train_ci.u8").read_bytes(), np.uint8).reshape(-1, 2 * seq + 2)
    committed = np.frombuffer((task.repo / "data" / "train_ci.u8").read_bytes(), np.uint8).reshape(-1, 2 * seq + 2)
    assert rows.shape == committed.shape
    graded = g.graded_rule()
    clean = g.rule.rule_scores(rows[:, :seq], graded) > g.rule.rule_scores(rows[:, seq : 2 * seq], graded)
    wrong = rows[:, 2 * seq] != clean
    for k, rate in enumerate(graded.flip):  # each rater of the graded instance, at its own rate
        assert abs(wrong[rows[:, -1] == k].mean() - rate) < 0.15, (k, rate)
    # the repo's own data.py, pointed at the folder as the meter is, reads it against its listing
    code = (
        "import data; p = data.PreferencePairs('ci'); _, _, label, rater = data.split_pairs(p.pairs); "
        "print(int(label.sum().item()), int(rater.sum().item()))"
    )
    out = subprocess.run(
        [python_executable(), "-c", code],
        cwd=task.repo,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", task.data_env: str(folder)},
        check=True,
    ).stdout.split()
    assert [int(x) for x in out] == [int(rows[:, 2 * seq].sum()), int(rows[:, -1].astype(int).sum())]
    # a file that is not the one its listing names is refused
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train_ci.u8").write_bytes(committed.tobytes())
    (bad / "SHA256SUMS").write_text((folder / "SHA256SUMS").read_text())
    r = subprocess.run(
        [python_executable(), "-c", code],
        cwd=task.repo,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", task.data_env: str(bad)},
    )
    assert r.returncode != 0 and "checksum does not match" in r.stderr


@pytest.mark.slow
@needs_bwrap
def test_a_rule_read_off_the_visible_data_gains_nothing(compose_cfg, tmp_path):
    task, _ = _grader()
    old = (task.repo / "train.py").read_text()
    new = old.replace("def preference_loss(", RULE_READ_OFF_THE_DATA, 1)
    marker = "    a, b, label, _rater = (t.to(device) for t in pairs.get(perm[start:start + BATCH_SIZE]))\n"
    assert new.count(marker) == 1
    new = new.replace(marker, RELABEL)
    r = grade_train_py(compose_cfg, tmp_path, task, new, "rule_read_off")
    assert r["status"] == "graded"
    # below the shipped algorithm on the graded instance (before: 0.8305 at ci, above the shipped 0.709)
    baseline = r["anchors"]["baseline"]
    assert r["raw"]["mean"] < baseline, (r["raw"], baseline)
