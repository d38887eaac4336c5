"""The agentic_rl task: contract, environment rules, hidden metric on hand-made policies, one ci seed end to end."""

import importlib
import json
import sys

import numpy as np
import pytest
import torch

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.analysis.task_checks import Report, contract_checks
from ai4ai.core.hidden import load_grader
from ai4ai.core.task import load_task

from . import calibrated

TASK = "agentic_rl"
REPO = PROJECT_ROOT / "repos_frozen" / TASK


@pytest.fixture(scope="module")
def repo():
    """The repo's modules (config, env, model, prepare), imported from the frozen repo."""
    names = ("config", "env", "model", "prepare", "checkpoint")
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
def grader(repo):
    return load_grader(TASK, PROJECT_ROOT / "grader_hidden" / TASK)


def _baseline_rate() -> float:
    """The calibrated shipped solve rate at smoke (current task version)."""
    return calibrated.baseline(TASK)


class Scripted(torch.nn.Module):
    """A 'policy' that plays fixed action sequences (one per level), as one-hot logits."""

    def __init__(self, plans, scale="smoke"):
        super().__init__()
        self.scale, self.plans, self.t = scale, plans, 0
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, obs):
        n = obs.shape[0]
        logits = torch.full((n, 4), -1e9)
        for i in range(n):
            plan = self.plans[i]
            logits[i, plan[self.t] if self.t < len(plan) else 0] = 0.0
        self.t += 1
        return logits


class Constant(torch.nn.Module):
    def __init__(self, logits, scale="smoke"):
        super().__init__()
        self.scale, self.logits = scale, torch.tensor(logits, dtype=torch.float32)
        self.w = torch.nn.Parameter(torch.zeros(1))

    def forward(self, obs):
        return self.logits.expand(obs.shape[0], 4)


def test_task_composes_and_contract_checks_pass():
    task = load_task(TASK)
    assert task.metric.direction == "max" and task.metric.transform == "identity" and task.metric.best == 1.0
    assert task.is_editable("train.py") and task.is_editable("algorithm/value.py")
    for f in ("env.py", "model.py", "prepare.py", "evaluate.py", "config.py"):
        assert not task.is_editable(f)
    rep = Report(lines=[])
    contract_checks(task, rep)
    assert rep.failed == 0, [line for line in rep.lines if line[0] == "FAIL"]


def test_grader_validation_split_is_the_proxy_one(repo, grader):
    cfg = repo["config"]
    v = grader.split("validation")
    assert v["seed"] == cfg.VALIDATION_SEED and v["levels"] == cfg.VALIDATION_LEVELS
    assert grader.SPLITS["test"] >= 10_000


def test_levels_are_deterministic_unsolved_and_solvable(repo):
    env, prepare = repo["env"], repo["prepare"]
    a, b = env.generate_levels(50, 7, "smoke"), env.generate_levels(50, 7, "smoke")
    assert all((getattr(a, f) == getattr(b, f)).all() for f in ("walls", "targets", "boxes", "player"))
    assert (a.boxes & ~a.targets).any(1).all()  # none starts solved
    assert all(len(prepare.solve(a, i)) > 0 for i in range(len(a)))  # every one has a solution


def test_bfs_solution_replayed_solves_and_a_wrong_sequence_does_not(repo):
    env, prepare = repo["env"], repo["prepare"]
    levels = env.generate_levels(40, 8, "smoke")
    plans = [prepare.solve(levels, i) for i in range(len(levels))]
    mask = env.solved_mask(Scripted(plans), levels, 30, 0)
    assert mask.all()
    # one move short: the last push replaced by walking away from the box, for the rest of the episode
    short = [p[:-1] + [p[-1] ^ 1] * 30 for p in plans]
    assert not env.solved_mask(Scripted(short), levels, 30, 0).any()
    # standing still against a wall (or any non-solving walk) does not count either
    assert not env.solved_mask(Scripted([[] for _ in plans]), levels, 30, 0)[[len(p) > 0 for p in plans]].all()


def _corridor(env, boxes, targets, player):
    """A 5x5 room whose middle row is a corridor: walls everywhere else."""
    w, row = 7, 3 * 7
    walls = np.ones((1, w * w), dtype=bool)
    walls[0, row + 1 : row + 6] = False
    b, t = np.zeros_like(walls), np.zeros_like(walls)
    b[0, [row + x for x in boxes]] = True
    t[0, [row + x for x in targets]] = True
    return env.VecEnv(env.Levels(5, walls, t, b, np.array([row + player])), 10), row


def test_pushing_rules(repo):
    env = repo["env"]
    v, row = _corridor(env, boxes=[2, 3], targets=[4, 5], player=1)
    v.step([3])  # two boxes in a row do not move
    assert v.state.player[0] == row + 1 and v.state.boxes[0, [row + 2, row + 3]].all()
    v.step([2])  # into the wall: nothing moves
    assert v.state.player[0] == row + 1 and not v.done[0]
    v, row = _corridor(env, boxes=[3], targets=[4], player=1)
    _, solved_now, _ = v.step([3])  # walk
    assert v.state.player[0] == row + 2 and not solved_now[0]
    _, solved_now, done = v.step([3])  # push the box onto the target
    assert v.state.player[0] == row + 3 and solved_now[0] and done[0] and v.solved[0]
    v.step([2])  # finished episodes do not move
    assert v.state.player[0] == row + 3
    v, row = _corridor(env, boxes=[3], targets=[4], player=2)
    v.step([2]), v.step([3]), v.step([3])  # walking back never pulls the box
    assert v.state.boxes[0, row + 4] and v.solved[0]
    v, row = _corridor(env, boxes=[4], targets=[2], player=3)
    for _ in range(10):
        v.step([2])  # the box cannot be pulled back
    assert not v.solved[0] and v.done[0] and v.t[0] == 10


def test_training_env_meters_steps(repo):
    env = repo["env"]
    te = env.TrainingEnv("ci", 0)
    steps = te.scale.max_steps
    lv = te.sample_levels(10)
    assert te.served == 10 * steps  # a sampled level prepays its whole episode
    v = te.reset(lv)
    v.step(np.zeros(10, dtype=int))
    assert te.served == 10 * steps  # its steps use the prepaid ones first
    rng = np.random.default_rng(0)
    while not v.done.all():
        v.step(rng.integers(0, 4, 10))
    assert te.served == int(v.t.sum())  # played to the end: exactly the steps taken
    again = te.reset(lv)  # a replay (or a level made elsewhere) pays per step
    before = te.served
    again.step(np.zeros(10, dtype=int))
    assert te.served == before + 10
    te.served = te.budget - 5
    with pytest.raises(env.BudgetExhausted):
        again.step(np.zeros(10, dtype=int))
    te.served = 0
    te.sample_levels(3)  # sampled, never played: a full episode each
    assert te.served == 3 * steps
    assert (te.sample_levels(3).player != env.TrainingEnv("ci", 1).sample_levels(3).player).any()


def test_uninformative_is_the_random_policy(repo, grader):
    model = grader.uninformative(repo["model"].build_model("smoke"))
    val = grader.split("validation")
    rate = grader.evaluate(model, val)
    # a uniform-logit constant policy is the same measurement, and the same number
    assert rate == grader.evaluate(Constant([0.0, 0.0, 0.0, 0.0]), val)
    assert 0.02 < rate < 0.12
    # and an independent random rollout of the same levels agrees within sampling noise
    env, s = repo["env"], repo["config"].get_scale("smoke")
    levels = env.generate_levels(val["levels"], val["seed"], s)
    other = env.solved_mask(Constant([0.0] * 4), levels, s.max_steps, 12345).mean()
    assert abs(other - rate) < 4 * np.sqrt(rate * (1 - rate) / val["levels"]) + 1e-9
    # and the calibrated 0 anchor (the same policy on the hidden test levels) is the same rate
    for scale in ("ci", "smoke"):
        no_info = calibrated.anchors(TASK, scale).no_info
        assert abs(no_info - rate) < 4 * np.sqrt(rate * (1 - rate) / val["levels"])


def test_perfect_policy_scores_one(repo, grader):
    env, prepare, s = repo["env"], repo["prepare"], repo["config"].get_scale("smoke")
    val = {"name": "t", "seed": 5, "levels": 200}
    levels = env.generate_levels(200, 5, s)
    plans = [prepare.solve(levels, i) for i in range(200)]
    assert max(map(len, plans)) <= s.max_steps
    assert grader.evaluate(Scripted(plans), val) == 1.0


@pytest.mark.parametrize(
    "logits",
    [
        [1e9, 0, 0, 0],
        [0, 1e9, 0, 0],
        [0, 0, 1e9, 0],
        [0, 0, 0, 1e9],
        [5.0, 5.0, -5.0, -5.0],
        [float("nan")] * 4,
        [float("inf"), 0, 0, 0],
        [float("-inf")] * 4,
    ],
)
def test_degenerate_policies_do_not_beat_the_shipped_algorithm(grader, logits):
    val = grader.split("validation")
    rate = grader.evaluate(Constant(logits), val)
    assert rate < _baseline_rate()
    if not all(np.isfinite(logits)):
        assert rate == 0.0


def test_committed_warm_starts_load_exactly(repo):
    """Each committed warm start passes its checksum and loads into the scale's model unchanged
    (that prepare reproduces it is test_prepare_reproduces_the_committed_artifact, slow)."""
    from safetensors.torch import load_file

    model, prepare = repo["model"], repo["prepare"]
    for scale in ("ci", "smoke"):
        loaded = prepare.load_prepared(model.build_model(scale), scale).state_dict()
        ref = load_file(str(REPO / "artifacts" / f"bc_{scale}.safetensors"))
        assert set(loaded) == set(ref) and all(torch.equal(loaded[k], ref[k]) for k in ref), scale


@pytest.mark.slow
def test_prepare_reproduces_the_committed_artifact(repo):
    from safetensors.torch import load_file

    torch.set_num_threads(1)
    sd = repo["prepare"].behaviour_clone("ci")
    ref = load_file(str(REPO / "artifacts" / "bc_ci.safetensors"))
    assert all(torch.equal(sd[k], ref[k]) for k in ref)


def test_ci_seed_trains_and_grades_end_to_end(compose_cfg, tmp_path):
    cfg = compose_cfg("config", [f"task={TASK}", "scale=ci", "agent=baseline"])
    run_dir = tmp_path / "run"
    pipeline.run(cfg, run_dir)
    r = json.loads((run_dir / "result.json").read_text())
    assert r["status"] == "graded", r.get("reason")
    assert abs(r["score"] - 0.1) < 0.06, r["score_per_seed"]
    cands = r["checkpoints"]["per_seed"][0]["candidates"]
    assert len(cands) == 3 and all(c["valid"] for c in cands)
