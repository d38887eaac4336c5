"""Knowledge of the visible instance, written into the patch: graph_diffusion is graded on a fresh source.

graph_diffusion's graphs come from a short program: node types from 4 probabilities, then each
pair's bond order from weights that depend on the two types, within the valences (56 numbers). An
agent can estimate them from the 65,536 graphs it is given and write the program into train.py.
The probe below carries the visible source's numbers and trains the shipped algorithm on graphs it
makes with them, fresh ones every step, for 1.25 x the shipped number of steps; no budgeted graph is
drawn. Measured before the fresh instance: 0.171 at ci (negative ELBO 33.98 against the shipped
34.97), and 0.155 at smoke over the grader seeds (per seed 0.141-0.176; the seed noise is about 0.02).
Now a graded run is served graphs of another source of the family (grader.grading_data, from the
secret `instance` seed: other bond weights, the same marginals) and scored on that source's graphs,
which the visible source is about 2.3 nats a graph off, so the probe's graphs teach the model the
wrong bond preferences: measured at ci after the change, 0.083 (35.31 against the shipped 33.94).
"""

import hashlib
import subprocess

import numpy as np
import pytest

from ai4ai.core.provenance import python_executable
from ai4ai.repo.preparing import data_mounts, grading_mounts

from .conftest import assert_gains_nothing, grade_train_py, grader_modules, information_rejections, needs_bwrap

SOURCE_IN_THE_PATCH = """
# The source, as read off the graphs in the window: node-type odds, valences, and the weights of
# bond orders (none, single, double) for each pair of types.
TYPE_P = {type_p!r}
VALENCE = np.array([4, 3, 2, 1])
BOND_W = np.array({bond_w!r})
PAIRS = [(i, j) for i in range(N_NODES) for j in range(i + 1, N_NODES)]


def source_graphs(n, rng):
    types = rng.choice(len(TYPE_P), size=(n, N_NODES), p=TYPE_P)
    rem = VALENCE[types].copy()
    bonds = np.zeros((n, len(PAIRS)), dtype=np.int64)
    for k, (i, j) in enumerate(PAIRS):
        w = BOND_W[types[:, i], types[:, j]].copy()
        w[np.arange(3)[None, :] > np.minimum(rem[:, i], rem[:, j])[:, None]] = 0.0
        cdf = np.cumsum(w / w.sum(1, keepdims=True), 1)
        bonds[:, k] = (rng.random(n)[:, None] > cdf).sum(1).clip(0, 2)
        rem[:, i] -= bonds[:, k]
        rem[:, j] -= bonds[:, k]
    return torch.from_numpy(np.concatenate([types, bonds], 1))


source_rng = np.random.default_rng(args.seed)
"""

SHIPPED_DRAW = (  # the shipped loop's draw: the meter's graphs, then the first pass kept in memory
    "    if step < served_steps:                                         # served by the meter\n"
    "        idx = perm[(step * BATCH_SIZE) % len(data):][:BATCH_SIZE]\n"
    "        graphs = data.get(idx)\n"
    "        if step * BATCH_SIZE < len(data):\n"
    "            kept.append(graphs)\n"
    "    else:                                                           # past the budget: kept graphs\n"
    "        if step == served_steps:\n"
    "            kept = torch.cat(kept)\n"
    "        graphs = kept[torch.randint(len(kept), (BATCH_SIZE,), generator=gen)]\n"
    "    nodes, bonds = split_graph(graphs)\n"
)

EDITS = (  # (shipped text, the probe's)
    ("import torch\n", "import numpy as np\nimport torch\n"),
    ("from config import N_BONDS, N_TYPES\n", "from config import N_BONDS, N_NODES, N_TYPES\n"),
    (
        "total_steps = int(passes * data.budget) // BATCH_SIZE\n",
        "total_steps = int(passes * data.budget) * 5 // 4 // BATCH_SIZE  # graphs of the source cost no budget\n",
    ),
    (  # every batch made by the source: the meter's and the kept graphs' branches go
        SHIPPED_DRAW,
        "    graphs = source_graphs(BATCH_SIZE, source_rng)\n    nodes, bonds = split_graph(graphs)\n",
    ),
)
MARKER = "t0 = time.time()\n"


def _grader():
    """The task, its hidden grader module and the grader's generator module."""
    return grader_modules("graph_diffusion", "grader", "generator")


def source_in_the_patch(train_py: str, source) -> str:
    assert train_py.count(MARKER) == 1
    new = train_py.replace(
        MARKER,
        SOURCE_IN_THE_PATCH.format(type_p=source.type_p.tolist(), bond_w=source.bond_w.tolist()) + "\n" + MARKER,
        1,
    )
    for old, probe in EDITS:
        assert new.count(old) == 1, old
        new = new.replace(old, probe)
    return new


def test_the_graded_source_is_not_the_visible_one():
    task, g, gen = _grader()
    graded = g._source("graded")
    assert not graded.same(gen.VISIBLE)
    sel, val = g.split("selection"), g.split("validation")
    assert (sel["instance"], val["instance"]) == ("graded", "visible")
    # the graded graphs are far from the visible source: it is over 2 nats a graph off them
    graphs = sel["graphs"].numpy()
    assert (gen.log_prob(graphs, graded) - gen.log_prob(graphs)).mean() > 2.0
    assert g.best_attainable(sel) == pytest.approx(float(-gen.log_prob(graphs, graded).mean()))
    # ... and keeps the marginals process.py hard-codes for the marginal noise
    vis, drawn = gen.marginals(50_000, 9)[1], gen.marginals(50_000, 9, graded)[1]
    assert np.abs(vis - drawn).max() < 0.015
    # what the agent is given is the visible source's graphs: the committed validation split
    committed = np.frombuffer((task.repo / "data" / "val.u8").read_bytes(), np.uint8).reshape(val["graphs"].shape)
    assert np.array_equal(committed, val["graphs"].numpy())


def test_graded_runs_are_served_the_graded_source_and_proxy_runs_the_visible_one(tmp_path):
    task, g, gen = _grader()
    assert data_mounts(task, "ci") == ([], {})  # the agent's runs: the committed (visible) split
    for scale in ("ci", "smoke"):  # ci reads smoke's split
        mounts, env = grading_mounts(task, scale, cache_root=tmp_path)
        folder = mounts[0].host
        assert env == {task.data_env: mounts[0].inside}
        served = np.frombuffer((folder / "train_smoke.u8").read_bytes(), np.uint8).reshape(
            -1, gen.N_NODES + gen.N_PAIRS
        )
        assert len(served) == 65_536
        sample = served[:4_000]
        assert (gen.log_prob(sample, g._source("graded")) - gen.log_prob(sample)).mean() > 2.0
    # the repo's own data.py, pointed at the folder as the meter is, reads it against its listing
    code = (
        "import hashlib, data; s = data.TrainingGraphs('ci'); "
        "print(len(s), hashlib.sha256(s.graphs.to(__import__('torch').uint8).numpy().tobytes()).hexdigest())"
    )
    out = subprocess.run(
        [python_executable(), "-c", code],
        cwd=task.repo,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", task.data_env: str(folder)},
    )
    assert out.returncode == 0, out.stderr[-800:]
    assert out.stdout.split() == [str(len(served)), hashlib.sha256(served.tobytes()).hexdigest()]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train_smoke.u8").write_bytes((task.repo / "data" / "train_smoke.u8").read_bytes())
    (bad / "SHA256SUMS").write_text((folder / "SHA256SUMS").read_text())
    r = subprocess.run(
        [python_executable(), "-c", code],
        cwd=task.repo,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", task.data_env: str(bad)},
    )
    assert r.returncode != 0 and "checksum does not match" in r.stderr, r.stderr[-500:]


def test_the_probe_carries_the_visible_source_under_the_information_check(tmp_path):
    task, g, gen = _grader()
    new = source_in_the_patch((task.repo / "train.py").read_text(), gen.VISIBLE)
    assert information_rejections(task, tmp_path, new) == {}
    import torch

    scope = {"np": np, "torch": torch, "N_NODES": gen.N_NODES, "args": type("A", (), {"seed": 0})}
    start = new.index("# The source, as read")
    exec(compile(new[start : new.index(MARKER)], "probe", "exec"), scope)
    made = scope["source_graphs"](4_000, np.random.default_rng(0)).numpy()
    # graphs of the visible source: it gives them their entropy, as it does its own
    assert abs(-gen.log_prob(made).mean() - (-gen.log_prob(gen.sample(4_000, 1)).mean())) < 0.3


@pytest.mark.slow
@needs_bwrap
def test_the_visible_source_written_into_the_patch_gains_nothing(compose_cfg, tmp_path):
    task, _, gen = _grader()
    new = source_in_the_patch((task.repo / "train.py").read_text(), gen.VISIBLE)
    # no gain over the shipped algorithm (before: 0.171 at ci)
    assert_gains_nothing(grade_train_py(compose_cfg, tmp_path, task, new, "source_in_the_patch"))
