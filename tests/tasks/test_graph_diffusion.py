"""graph_diffusion: the contract, the bound on hand-made denoisers, and one ci seed end to end."""

import json
import math
import sys

import numpy as np
import pytest
import torch

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.analysis.task_checks import Report, contract_checks
from ai4ai.core.hidden import load_grader
from ai4ai.core.task import load_task

from . import calibrated

REPO = PROJECT_ROOT / "repos_frozen" / "graph_diffusion"


@pytest.fixture(scope="module")
def grader():
    sys.path.insert(0, str(REPO))  # the grader imports the pristine process.py, as in the worker
    try:
        yield load_grader("graph_diffusion", PROJECT_ROOT / "grader_hidden" / "graph_diffusion")
    finally:
        sys.path.remove(str(REPO))


@pytest.fixture(scope="module")
def graphs(grader):
    s = grader.split("selection")
    return {**s, "graphs": s["graphs"][:300]}


class Oracle(torch.nn.Module):
    """Reads the clean graph it is asked about: p(x_0 | x_t) is a point mass on the truth."""

    def __init__(self, truth):
        super().__init__()
        self.truth, self.w = truth, torch.nn.Parameter(torch.zeros(1))

    def forward(self, nodes, bonds, t):
        n = self.truth[:, : nodes.shape[1]]
        b = self.truth[:, nodes.shape[1] :]
        return (
            torch.nn.functional.one_hot(n, 4).float() * 60 - 30,
            torch.nn.functional.one_hot(b, 3).float() * 60 - 30,
        )


class Constant(torch.nn.Module):
    def __init__(self, node_logits, bond_logits):
        super().__init__()
        self.n, self.b, self.w = node_logits, bond_logits, torch.nn.Parameter(torch.zeros(1))

    def forward(self, nodes, bonds, t):
        return self.n.expand(len(nodes), nodes.shape[1], -1), self.b.expand(len(bonds), bonds.shape[1], -1)


def baseline_raw() -> float:
    """The shipped algorithm's calibrated negative ELBO at smoke (current task version)."""
    return calibrated.baseline("graph_diffusion")


def test_contract_checks_pass():
    rep = Report(lines=[])
    contract_checks(load_task("graph_diffusion"), rep)
    assert rep.failed == 0, [line for line in rep.lines if line[0] == "FAIL"]


def test_a_perfect_denoiser_makes_the_bound_exact(grader, graphs):
    # for a point mass the entropy is 0, and a denoiser that knows x_0 reaches it
    assert grader.evaluate(Oracle(graphs["graphs"]), graphs, None) == pytest.approx(0.0, abs=1e-6)


def test_the_uniform_model_matches_its_closed_form(grader, graphs):
    import process

    impl = sys.modules[grader.__name__ + ".grader"]
    b = impl._bound(grader.uninformative(None), graphs, None)
    se = b.std(ddof=1) / math.sqrt(len(b))
    assert abs(b.mean() - process.uniform_nll()) < 4 * se
    assert process.uniform_nll() == pytest.approx(8 * math.log(4) + 28 * math.log(3))


def test_the_source_entropy_is_below_every_model(grader, graphs):
    best = grader.best_attainable(graphs)
    assert 15 < best < 30
    assert grader.evaluate(grader.uninformative(None), graphs, None) > best + 10


def test_a_process_outside_the_family_is_invalid(grader, graphs):
    model = grader.uninformative(None)
    assert math.isnan(grader.evaluate(model, graphs, {"metadata": {"noise": "absorbing"}}))
    assert math.isnan(grader.evaluate(model, graphs, {"metadata": {"schedule": "sqrt"}}))
    assert math.isfinite(grader.evaluate(model, graphs, {"metadata": {"noise": "marginal", "schedule": "linear"}}))


@pytest.mark.parametrize(
    "name,model",
    [
        ("zero logits", Constant(torch.zeros(4), torch.zeros(3))),
        ("collapsed on the commonest graph", Constant(torch.tensor([30.0, 0, 0, 0]), torch.tensor([30.0, 0, 0]))),
        (
            "marginals only",
            Constant(
                torch.tensor([0.4006, 0.2497, 0.1995, 0.1502]).log(), torch.tensor([0.7174, 0.2278, 0.0548]).log()
            ),
        ),
    ],
)
def test_degenerate_denoisers_do_not_beat_the_shipped_algorithm(grader, graphs, name, model):
    for meta in ({}, {"noise": "marginal"}):
        assert grader.evaluate(model, graphs, {"metadata": meta}) > baseline_raw(), (name, meta)


def test_non_finite_outputs_are_not_scored(grader, graphs):
    model = Constant(torch.full((4,), math.nan), torch.zeros(3))
    assert not math.isfinite(grader.evaluate(model, graphs, None))


def test_one_ci_seed_trains_and_grades_end_to_end(compose_cfg, tmp_path):
    cfg = compose_cfg("config", ["task=graph_diffusion", "scale=ci", "agent=baseline"])
    pipeline.run(cfg, tmp_path / "run")
    r = json.loads((tmp_path / "run" / "result.json").read_text())
    assert r["status"] == "graded", r["reason"]
    assert 0.0 < r["score"] < 0.4, r["score_per_seed"]
    chosen = r["checkpoints"]["per_seed"][0]["candidates"]
    assert all(c["valid"] and c["metadata"]["noise"] == "uniform" for c in chosen)
    assert np.isfinite(r["raw"]["mean"]) and r["raw"]["mean"] < r["anchors"]["no_info"]
