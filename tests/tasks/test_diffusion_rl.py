"""The diffusion_rl task: contract, consistency of repo and grader, hidden metric on hand-made samples, one ci seed."""

import importlib
import json
import math
import sys

import pytest
import torch

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.analysis.task_checks import Report, contract_checks
from ai4ai.core.hidden import load_grader
from ai4ai.core.task import load_task

from . import calibrated

TASK = "diffusion_rl"
REPO = PROJECT_ROOT / "repos_frozen" / TASK


@pytest.fixture(scope="module")
def repo():
    """The repo's modules, imported from the frozen repo (and removed again afterwards)."""
    names = ("config", "data", "model", "reward", "env", "evaluate", "checkpoint")
    saved = {k: sys.modules.pop(k) for k in names if k in sys.modules}
    sys.path.insert(0, str(REPO))
    try:
        mods = {k: importlib.import_module(k) for k in names}
    finally:
        sys.path.remove(str(REPO))
    yield mods
    for k in names:
        sys.modules.pop(k, None)
    sys.modules.update(saved)


@pytest.fixture(scope="module")
def grader():
    g = load_grader(TASK, PROJECT_ROOT / "grader_hidden" / TASK)
    return sys.modules[g.__name__ + ".grader"]


@pytest.fixture(scope="module")
def real_b(grader):
    return grader._real_b()


def _baseline() -> float:
    """The calibrated shipped hidden reward at smoke (current task version)."""
    return calibrated.baseline(TASK)


def _prepared(repo, scale="ci"):
    from safetensors.torch import load

    m = repo["model"].build_model(scale)
    m.load_state_dict(load(repo["data"].read_checked(REPO / "artifacts" / f"ddpm_{scale}.safetensors")))
    return m.eval()


def test_task_composes_and_contract_checks_pass():
    task = load_task(TASK)
    assert task.metric.direction == "max" and task.metric.transform == "identity" and task.metric.best == 1.0
    assert task.is_editable("train.py") and task.is_editable("algorithm/x.py")
    for f in ("model.py", "env.py", "reward.py", "data.py", "prepare.py", "evaluate.py", "config.py"):
        assert not task.is_editable(f)
    assert all(task.scale(s).threads == 1 for s in ("ci", "smoke"))
    rep = Report(lines=[])
    contract_checks(task, rep)
    assert rep.failed == 0, [line for line in rep.lines if line[0] == "FAIL"]


def test_repo_and_grader_agree(repo, grader, tmp_path):
    cfg, model = repo["config"], repo["model"]
    # the committed half of the digits is what the grader materializes
    sums = grader.materialize("smoke", tmp_path)
    assert (tmp_path / "digits_a.u8").read_bytes() == (REPO / "data" / "digits_a.u8").read_bytes()
    listed = dict(reversed(line.split()) for line in (REPO / "data" / "SHA256SUMS").read_text().splitlines())
    assert listed == sums
    a, b = grader.halves()
    assert len(set(a.tolist()) & set(b.tolist())) == 0 and len(a) + len(b) == 1797
    # same constants, same schedule, same sampler, same public validation batches
    assert (
        grader.N_STEPS,
        grader.N_PROMPTS,
        grader.INK_THRESHOLDS,
        grader.INK_TEMPERATURE,
        grader.VALIDATION_SEED,
        grader.DIVERSITY_FRACTION,
    ) == (
        cfg.N_STEPS,
        cfg.N_PROMPTS,
        cfg.INK_THRESHOLDS,
        cfg.INK_TEMPERATURE,
        cfg.VALIDATION_SEED,
        repo["evaluate"].DIVERSITY_FRACTION,
    )
    assert len(cfg.INK_THRESHOLDS) == cfg.N_PROMPTS == 10
    assert grader.SPLITS["validation"] == cfg.VALIDATION_SAMPLES and grader.BATCH == repo["evaluate"].BATCH
    for k, v in grader._schedule().items():
        assert torch.equal(v, model.SCHEDULE[k]), k
    m = _prepared(repo)
    for i in (3, 17):  # batch i is all for the digit i mod 10, in the repo's proxy and the grader alike
        c = repo["evaluate"].batch_prompts(i, 64)
        assert torch.equal(c, grader.batch_prompts(i, 64)) and (c == i % 10).all()
        mine = model.sample_chain(m, c, repo["evaluate"].batch_generator(cfg.VALIDATION_SEED, i))[-1]
        theirs = grader.sample(m, c, grader.batch_generator(grader.VALIDATION_SEED, i))
        assert torch.allclose(mine, theirs, atol=1e-5)
    # the splits weigh the ten prompts equally
    assert all(n % (grader.BATCH * 10) == 0 for n in grader.SPLITS.values())
    assert set(grader.SPLITS) >= {"selection", "test", "validation"}


def test_environment_meters_samples(repo):
    env = repo["env"].Environment("ci")
    m = _prepared(repo)
    g = torch.Generator().manual_seed(0)
    ro = env.rollout(m, env.budget - 8, g)
    assert ro.chain.shape == (repo["config"].N_STEPS + 1, env.budget - 8, 64)
    assert ((ro.rewards >= 0) & (ro.rewards <= 1)).all()
    # prompts drawn uniformly from the ten digits; each image is scored for its own prompt
    counts = torch.bincount(ro.prompts, minlength=10)
    assert counts.shape == (10,) and counts.min() > 0.5 * counts.float().mean()
    clf = repo["reward"].load_scorer()
    assert torch.allclose(ro.rewards, repo["reward"].reward(clf, ro.chain[-1], ro.prompts))
    given = env.rollout(m, 4, g, prompts=torch.tensor([0, 0, 9, 9]))
    assert given.prompts.tolist() == [0, 0, 9, 9]
    for bad in (torch.tensor([0, 1, 2]), torch.tensor([0, 1, 2, 10]), torch.tensor([0.0, 1.0, 2.0, 3.0])):
        with pytest.raises(ValueError, match="prompts"):
            env.score(torch.zeros(4, 64), bad)
    assert env.remaining == 4  # a refused call costs nothing
    env.score(torch.zeros(4, 64), torch.zeros(4, dtype=torch.long))
    assert env.remaining == 0
    with pytest.raises(repo["env"].BudgetExhausted):
        env.rollout(m, 1, g)
    # the visible reward: a non-finite image scores 0
    r = repo["reward"].reward(clf, torch.full((2, 64), float("nan")), torch.tensor([3, 3]))
    assert r.tolist() == [0.0, 0.0]
    # score() of images that require grad: the reward's own per-sample gradient, from the judge
    fresh = repo["env"].Environment("ci")
    x = torch.randn(4, 64, requires_grad=True)
    c = torch.tensor([1, 3, 5, 7])
    (fresh.score(x, c) * torch.arange(4.0)).sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    (repo["reward"].reward(clf, x2, c) * torch.arange(4.0)).sum().backward()
    assert torch.allclose(x.grad, x2.grad) and fresh.used == 4


def _for(c: int, n: int) -> torch.Tensor:
    return torch.full((n,), c, dtype=torch.long)


def test_real_digits_score_by_their_prompt_and_others_low(grader, real_b):
    x, y = real_b
    own = {}
    for c in range(10):
        s = grader.score_images(x, _for(c, len(x)))
        assert ((s >= 0) & (s <= 1)).all()
        own[c] = s[y == c]
        # a real digit scores only for its own prompt
        assert s[y != c].mean() < 0.01 * max(own[c].mean().item(), 1e-3)
        # a batch of real digits is diverse enough; its score is the per-sample mean
        assert grader.score_batch(x[y == c], c).mean() == pytest.approx(own[c].mean().item())
    # the prompts range from hard to easy: for a 0 the reward asks for ink below 0.22 (real 0s score
    # 0.004 on average), for a 9 below 0.31 (about half of the real 9s qualify)
    assert own[0].mean() < 0.01 and own[2].mean() < 0.02
    assert own[9].mean() > 0.4 and own[1].mean() > 0.4 and own[9].max() > 0.95
    order = sorted(range(10), key=lambda c: grader.INK_THRESHOLDS[c])
    means = [own[c].mean().item() for c in order]
    assert means[0] < means[4] < means[-1]


def test_degenerate_samples_score_zero(grader, real_b):
    x, y = real_b
    base = _baseline()
    consts = torch.stack([torch.full((64,), v) for v in (-1.0, -0.5, 0.0, 0.5, 1.0)])
    assert grader.score_images(consts, _for(3, 5)).max() < 1e-3  # constant images
    noise = torch.rand(256, 64, generator=torch.Generator().manual_seed(0)) * 2 - 1
    assert all(grader.score_batch(noise, c).mean() < 1e-3 for c in range(10))  # noise
    threes = x[y == 3]
    best3 = threes[grader.score_images(threes, _for(3, len(threes))).argmax()]
    collapsed = best3.expand(256, 64).clone()  # all identical, even a good 3
    assert grader.score_images(collapsed, _for(3, 256)).mean() > 0.4
    assert grader.score_batch(collapsed, 3).sum() == 0
    jittered = collapsed + 0.05 * torch.randn(256, 64, generator=torch.Generator().manual_seed(1))
    assert grader.score_batch(jittered, 3).sum() == 0  # nearly collapsed
    nonfinite = threes[:64].clone()
    nonfinite[::2, 5] = float("nan")
    nonfinite[1::4, 7] = float("inf")
    s = grader.score_batch(nonfinite, 3)
    assert (s[::2] == 0).all() and (s[1::4] == 0).all() and s.mean() < base
    assert grader.score_batch(torch.full((256, 64), float("nan")), 3).sum() == 0
    assert grader.score_batch(torch.empty(0, 64), 3).numel() == 0
    for c in range(10):  # faded digits: thin but not real
        faded = (x[y == c] + 1) * 0.3 - 1
        assert grader.score_batch(faded, c).mean() < 0.5 * base


class Const(torch.nn.Module):
    """A 'denoiser' with one parameter that predicts eps = w everywhere."""

    def __init__(self, w: float):
        super().__init__()
        self.w = torch.nn.Parameter(torch.full((1,), w))

    def forward(self, x, t, c):
        return self.w.expand_as(x)


def test_models_no_info_and_non_finite(repo, grader):
    val = grader.split("validation")
    noinfo = grader.uninformative(repo["model"].build_model("ci"))
    assert all((p == 0).all() for p in noinfo.parameters())
    assert grader.evaluate(noinfo, dict(val, n=512)) < 1e-3  # noise samples: the 0 anchor
    assert grader.evaluate(Const(float("nan")), dict(val, n=256)) == 0.0
    raw, se = grader.evaluate_with_noise(_prepared(repo), dict(val, n=512))
    assert 0 < raw < _baseline() and 0 < se < 0.05  # the untuned base model is below shipped
    assert grader.split("test")["seed"] != grader.split("selection")["seed"]
    assert grader.SPLITS["test"] >= 16384


@pytest.mark.slow
def test_ci_seed_end_to_end(compose_cfg, tmp_path):
    cfg = compose_cfg("config", [f"task={TASK}", "scale=ci", "agent=baseline"])
    run_dir = tmp_path / "run"
    pipeline.run(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded", r.get("reason")
    assert math.isfinite(r["score"]) and abs(r["score"] - 0.1) < 0.08, r["score_per_seed"]
    cands = r["checkpoints"]["per_seed"][0]["candidates"]
    assert len(cands) == 3 and all(c["valid"] for c in cands)
