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
import keyword
import tokenize
from pathlib import Path

import pytest

from ai4ai import PROJECT_ROOT
from ai4ai.submission import HELD_COVER_MAX, from_patch, unified_diff
from ai4ai.task import list_tasks, load_task
from ai4ai.tuning import point_patch

TASK = load_task("agentic_rl")
LEVELS = (TASK.repo / "levels.py").read_text()
TRAIN = (TASK.repo / "train.py").read_text()
# train.py draws its levels from the carried generator instead of the meter
USE = TRAIN.replace("from env import", "from algorithm.gen import generate as own_levels\nfrom env import", 1)


def renamed(source: str) -> str:
    """Every identifier that is not a keyword, a builtin or an attribute of numpy/config gets a new
    name, comments and the docstring go: a copy as an agent hiding it would write it."""
    keep = set(dir(__builtins__)) | {"np", "numpy", "config", "Scale", "annotations", "__future__"}
    out, prev = [], None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        s = tok.string
        if tok.type == tokenize.COMMENT:
            s = ""
        elif tok.type == tokenize.STRING and s.startswith('"""'):
            s = '""'
        elif tok.type == tokenize.NAME and not keyword.iskeyword(s) and s not in keep and prev != ".":
            s = f"v_{abs(hash(s)) % 10_000}"
        out.append((tok.type, s))
        prev = tok.string
    return tokenize.untokenize(out)


def patch_with(files: dict) -> str:
    return "".join(unified_diff(rel, (TASK.repo / rel).read_text() if (TASK.repo / rel).exists() else None, text)
                   for rel, text in files.items())


@pytest.mark.parametrize("how", ["verbatim", "renamed"])
def test_a_carried_level_generator_is_rejected(how):
    gen = LEVELS if how == "verbatim" else renamed(LEVELS)
    if how == "renamed":
        assert "generate(" not in gen and "scramble" in gen   # names changed, attributes of config kept
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
    helper = LEVELS[LEVELS.index("def _box_distance"):]
    sub = from_patch(TASK, TASK.repo, patch_with({"algorithm/dist.py": "import numpy as np\n\n\n" + helper}))
    assert sub.rejected == {}, sub.rejected
    assert "algorithm/dist.py" in sub.files


def test_readable_environment_code_may_be_adapted():
    # env.py is not held: its rules stay the agent's to read and reuse (README)
    env = (TASK.repo / "env.py").read_text()
    body = env[env.index("class VecEnv"):env.index("def _level_key")]
    sub = from_patch(TASK, TASK.repo, patch_with({"algorithm/sim.py": "import numpy as np\nimport torch\n\n\n" + body}))
    assert sub.rejected == {}, sub.rejected


@pytest.mark.parametrize("name", list_tasks())
def test_nothing_shipped_is_taken_for_a_held_copy(name):
    task = load_task(name)
    patches = [p.read_text() for p in sorted((PROJECT_ROOT / "examples" / name).glob("*.patch"))]
    patches += [point_patch(task, pt) for pt in task.tuning or ()]
    assert patches
    for text in patches:
        sub = from_patch(task, task.repo, text, scale="smoke")
        assert not any("meter holds back" in r for r in sub.rejected.values()), sub.rejected


def test_the_share_leaves_room_between_related_code_and_a_copy():
    from ai4ai.submission import _shingles
    held = _shingles(LEVELS)
    same_hand = _shingles((TASK.repo / "env.py").read_text())
    assert len(held & same_hand) / len(held) < HELD_COVER_MAX / 5
    assert len(held & _shingles(renamed(LEVELS))) / len(held) > 0.9
