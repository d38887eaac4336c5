"""Route 3 (unmetered environment): the level generator carried back in the patch.

agentic_rl's meter holds `levels.py` out of the training copy, so a run's levels come only as the
meter serves them, each prepaying its episode. But the agent's workspace has the file, and the
information budget compressed a copy against the pristine sources, where a verbatim copy is nearly
free: before check_held, a patch that added `algorithm/gen.py` (levels.py, renamed or not) and
generated its own levels from it was accepted, and trained on as many levels as its CPU cap
allowed without one metered step. These probes build such patches and assert they are rejected
with a reason naming the held source, and that nothing the benchmark ships is caught by it.
"""

import io
import json
import keyword
import tokenize

import pytest

from ai4ai import PROJECT_ROOT, pipeline
from ai4ai.analysis.tuning import point_patch, points
from ai4ai.core.task import list_tasks, load_task
from ai4ai.repo.leaks import HELD_COVER_MAX
from ai4ai.repo.submission import from_patch, unified_diff

from .conftest import baseline_score, needs_bwrap, write_patch

TASK = load_task("agentic_rl")
LEVELS = (TASK.repo / "levels.py").read_text()
TRAIN = (TASK.repo / "train.py").read_text()
# train.py draws its levels from the carried generator instead of the meter
USE = TRAIN.replace("from env import", "from algorithm.gen import generate as own_levels\nfrom env import", 1)


def renamed(source: str) -> str:
    """Every identifier that is not a keyword, a builtin or an attribute of numpy/config gets a new
    name, comments and the docstring go: a copy as an agent hiding it would write it."""
    keep = set(dir(__builtins__)) | {"np", "numpy", "config", "Scale", "annotations", "__future__"}
    out, prev, names = [], None, {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        s = tok.string
        if tok.type == tokenize.COMMENT:
            s = ""
        elif tok.type == tokenize.STRING and s.startswith('"""'):
            s = '""'
        elif tok.type == tokenize.NAME and not keyword.iskeyword(s) and s not in keep and prev != ".":
            s = names.setdefault(s, f"v_{len(names)}")  # one new name per name (a hash mod 10,000 collided)
        out.append((tok.type, s))
        prev = tok.string
    return tokenize.untokenize(out)


def patch_with(files: dict) -> str:
    return "".join(
        unified_diff(rel, (TASK.repo / rel).read_text() if (TASK.repo / rel).exists() else None, text)
        for rel, text in files.items()
    )


@pytest.mark.parametrize("how", ["verbatim", "renamed"])
def test_a_carried_level_generator_is_rejected(how):
    gen = LEVELS if how == "verbatim" else renamed(LEVELS)
    if how == "renamed":
        assert "generate(" not in gen and "scramble" in gen  # names changed, attributes of config kept
        compile(gen, "gen.py", "exec")
    sub = from_patch(TASK, TASK.repo, patch_with({"algorithm/gen.py": gen, "train.py": USE}))
    assert "algorithm/gen.py" in sub.rejected, sub.rejected
    assert "levels.py" in sub.rejected["algorithm/gen.py"] and "meter holds back" in sub.rejected["algorithm/gen.py"]
    assert "algorithm/gen.py" not in sub.files and "gen.py" not in sub.patch


def test_a_copy_spread_over_files_is_rejected_in_each():
    lines = LEVELS.splitlines(keepends=True)
    cut = next(i for i, ln in enumerate(lines) if ln.startswith("def _box_distance"))
    a = "".join(lines[:cut])
    b = "import numpy as np\n\n\n" + "".join(lines[cut:])
    sub = from_patch(TASK, TASK.repo, patch_with({"algorithm/gen_a.py": a, "algorithm/gen_b.py": b, "train.py": USE}))
    assert {"algorithm/gen_a.py", "algorithm/gen_b.py"} <= set(sub.rejected), sub.rejected


def test_a_small_part_of_a_held_source_is_allowed():
    # the docstring's rules and a helper of a few lines are below the share: adapting an idea is fine
    helper = LEVELS[LEVELS.index("def _box_distance") :]
    sub = from_patch(TASK, TASK.repo, patch_with({"algorithm/dist.py": "import numpy as np\n\n\n" + helper}))
    assert sub.rejected == {}, sub.rejected
    assert "algorithm/dist.py" in sub.files


def test_readable_environment_code_may_be_adapted():
    # env.py is not held: its rules stay the agent's to read and reuse (README)
    env = (TASK.repo / "env.py").read_text()
    body = env[env.index("class VecEnv") : env.index("def _level_key")]
    sub = from_patch(TASK, TASK.repo, patch_with({"algorithm/sim.py": "import numpy as np\nimport torch\n\n\n" + body}))
    assert sub.rejected == {}, sub.rejected


@pytest.mark.parametrize("name", list_tasks())
def test_nothing_shipped_is_taken_for_a_held_copy(name):
    task = load_task(name)
    patches = [p.read_text() for p in sorted((PROJECT_ROOT / "examples" / name).glob("*.patch"))]
    patches += [point_patch(task, pt) for pt in points(task) or ()]
    assert patches
    for text in patches:
        sub = from_patch(task, task.repo, text, scale="smoke")
        assert not any("meter holds back" in r for r in sub.rejected.values()), sub.rejected


def test_the_share_leaves_room_between_related_code_and_a_copy():
    from ai4ai.repo.leaks import _shingles

    held = _shingles(LEVELS)
    same_hand = _shingles((TASK.repo / "env.py").read_text())
    assert len(held & same_hand) / len(held) < HELD_COVER_MAX / 5
    assert len(held & _shingles(renamed(LEVELS))) / len(held) > 0.9


# --------------------------------------------------------------------------- trained: what is left

# Search and imitation, as the route was filed: solve levels by breadth-first search (prepare.solve,
# readable code) and clone the solutions, training until the CPU cap ends the run. LEVELS_FROM says
# where the levels come from: "served", the meter's (each prepays its episode, so the budget buys
# budget // max_steps of them), or "own", a generator the submission wrote itself from the README's
# rules (random rooms kept when the search solves them): not a copy, so check_held lets it through.
SEARCH_AND_CLONE = """
# ----------------------------------------------------------------------------- the attack
from env import Levels
from prepare import demonstrations
LEVELS_FROM = "{source}"
rng = np.random.default_rng(args.seed)
s = env.scale


def own_levels(n):
    w = s.size + 2
    out = []
    while len(out) < n:
        walls = np.ones((w, w), dtype=bool)
        walls[1:-1, 1:-1] = rng.random((s.size, s.size)) < s.wall_prob
        free = np.flatnonzero(~walls.reshape(-1))
        if len(free) < 3:
            continue
        t, b, pl = rng.choice(free, 3, replace=False)
        if abs(t // w - b // w) + abs(t % w - b % w) < s.min_box_dist:
            continue
        tg, bx = np.zeros(w * w, dtype=bool), np.zeros(w * w, dtype=bool)
        tg[t], bx[b] = True, True
        lv = Levels(s.size, walls.reshape(1, -1), tg[None], bx[None], np.array([pl]))
        try:
            if len(demonstrations(lv, max_steps)[1]) <= max_steps:
                out.append(lv)
        except (RuntimeError, AssertionError):
            pass                                   # no solution: redraw
    return Levels.concat(out)


obs_all, act_all, step = [], [], 0
while True:                                         # until the CPU cap ends the run
    if LEVELS_FROM == "own":
        levels = own_levels(256)
    elif env.remaining >= 256 * max_steps:
        levels = env.sample_levels(256)
    else:
        levels = None
    if levels is not None:
        o, a = demonstrations(levels, max_steps)
        obs_all.append(o)
        act_all.append(a)
        O, A = torch.cat(obs_all), torch.cat(act_all)
        print(f"ATTACK {{len(A)}} demonstrated moves, {{env.served}} served steps", flush=True)
    for _ in range(100):
        idx = torch.randint(0, len(A), (256,))
        loss = torch.nn.functional.cross_entropy(model(O[idx].to(device)), A[idx].to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
    save_checkpoint(model, args.out, step, metadata={{"env_steps": env.served, "updates": step}})
"""


def search_and_clone(source: str) -> str:
    old = TRAIN
    cut = old.index("# ----------------------------------------------------------------------------- loop")
    return unified_diff("train.py", old, old[:cut] + SEARCH_AND_CLONE.format(source=source))


@pytest.mark.slow
@needs_bwrap
def test_an_own_level_generator_buys_no_more_than_the_served_levels(compose_cfg, tmp_path):
    """The same search-and-clone attack graded twice at ci on the same training seed: on the levels
    the meter serves, and on levels of its own making. Within the CPU cap, its own levels must not
    score above the served ones by more than the shipped algorithm's noise: an own generator then
    buys nothing the budget does not.

    Measured (2026-12-01, CPU cap 18 CPU-s, both cut by it): served 0.699 (3,328 levels, 99,840
    prepaid steps, 21,990 demonstrated moves), own 0.424 (15,243 moves, 0 served steps): the search
    and the cloning, not the levels, take the CPU. That search on served levels scores 0.70 is the
    route's remainder (docs/threat-model.md, "Left open")."""
    nonce = "ab" * 16
    scores = {}
    for source in ("served", "own"):
        patch = write_patch(tmp_path, search_and_clone(source), f"{source}.patch")
        run = tmp_path / source
        (run / ".harness").mkdir(parents=True)
        (run / ".harness" / "nonce").write_text(nonce)
        cfg = compose_cfg("grade", ["task=agentic_rl", "scale=ci", f"patch={patch}"])
        pipeline.grade(cfg, run)
        r = json.loads((run / "result.json").read_text())
        assert r["status"] == "graded", r
        seed = r["checkpoints"]["per_seed"][0]
        log = (run / "grade" / "seed_0" / "train.log").read_text()
        print(
            source,
            "score",
            r["score"],
            "cut",
            seed["cut"],
            "cpu",
            seed["cpu_s"],
            log.count("ATTACK"),
            [ln for ln in log.splitlines() if ln.startswith("ATTACK")][-1:],
        )
        assert seed["cut"] == "cpu", seed
        scores[source] = r["score"]
    _, tol = baseline_score({})
    assert scores["own"] <= scores["served"] + tol, scores
