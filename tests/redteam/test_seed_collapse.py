"""Route: collapsing the seed replicates (a submission that ignores --seed).

Identical weights on two grader seeds give a std of 0 and a zero-width interval, and let a
submission pin whichever seed it found luckiest; every result is checked for it and flagged.
"""

import json
from dataclasses import replace
from pathlib import Path

from ai4ai import pipeline
from ai4ai.core.record import connect
from ai4ai.core.result import validate
from ai4ai.core.scoring import Anchors, score_seeds
from ai4ai.grading.seeds import SeedResult
from ai4ai.repo.submission import unified_diff

from .conftest import CI, needs_bwrap, write_patch

SHORT = "total_steps = min(total_steps, 8)\nsave_every = 8\n"  # a few steps, one checkpoint: the flag, not the score


def _insert(text: str, after: str, code: str) -> str:
    lines = text.splitlines(keepends=True)
    i = next(n for n, ln in enumerate(lines) if ln.startswith(after))
    return "".join(lines[: i + 1]) + code + "".join(lines[i + 1 :])


def _grade(compose_cfg, tmp_path, task, name: str, pin: bool):
    old = (task.repo / "train.py").read_text()
    new = _insert(_insert(old, "args = p.parse_args()", "args.seed = 0\n" if pin else ""), "save_every =", SHORT)
    patch = write_patch(tmp_path, unified_diff("train.py", old, new), name + ".patch")
    cfg = compose_cfg("grade", CI + [f"patch={patch}", "seeds=[0,1]"])
    run_dir = tmp_path / name
    pipeline.grade(cfg, run_dir)
    return json.loads((run_dir / "result.json").read_text()), cfg


@needs_bwrap
def test_pinned_seed_is_flagged(compose_cfg, tmp_path, task, capsys):
    """Probe: train.py sets args.seed = 0 whatever --seed says (init and data order pinned), graded on
    grader seeds 0 and 1 (8 steps each: the flag is the point, not the score).
    Found open: identical weights, perplexity 17.6268 +- 0.0000, interval [0.052, 0.052], nothing flagged.
    Now: result.json (and the database row) carries the flag `identical weights on seeds 0 and 1`, both
    seeds record the same weights digest, and the final line shows the flag."""
    r, cfg = _grade(compose_cfg, tmp_path, task, "pinned", pin=True)
    validate(r)
    assert r["status"] == "graded"
    assert r["flags"] == ["identical weights on seeds 0 and 1"], r["flags"]
    assert "[flag: identical weights on seeds 0 and 1]" in capsys.readouterr().out
    digests = [s["weights_sha256"] for s in r["checkpoints"]["per_seed"]]
    assert digests[0] == digests[1] and len(digests[0]) == 64
    with connect(Path(cfg.results_db)) as con:
        stored = json.loads(con.execute("SELECT result FROM results ORDER BY id DESC").fetchone()[0])
    assert stored["flags"] == r["flags"]


def test_weights_digest_is_of_the_tensors_not_the_file(tmp_path, task, pristine):
    """The digest the flag compares: the same weights written into two files that differ (safetensors
    header metadata) hash the same; weights of another seed's initialization hash differently. So the
    flag can neither be dodged by rewriting the file nor fire on replicates that truly differ."""
    import torch
    from safetensors.torch import save_file

    from ai4ai.grading.evaluation import run_worker
    from ai4ai.grading.seeds import eval_spec

    from .conftest import grade_setup
    from .test_checkpoints import _params

    a = _params(task)
    torch.manual_seed(1)
    b = {k: v + 1e-3 * torch.randn_like(v) for k, v in a.items()}
    d = tmp_path / "ckpts"
    d.mkdir()
    paths = [d / f"ckpt_{i:08d}.safetensors" for i in (1, 2, 3)]
    save_file(a, str(paths[0]))
    save_file(a, str(paths[1]), metadata={"written": "differently"})
    save_file(b, str(paths[2]))
    assert paths[0].read_bytes() != paths[1].read_bytes()
    res = run_worker(eval_spec(grade_setup(tmp_path, task), pristine, paths), tmp_path / "eval")
    h = [c["weights_sha256"] for c in res["candidates"]]
    assert (
        h[0] == h[1] != h[2] and res["weights_sha256"] == h[[c["name"] for c in res["candidates"]].index(res["chosen"])]
    )


def _seed(seed, digest, status="graded"):
    return SeedResult(
        seed=seed,
        status=status,
        reason=None if status == "graded" else "x",
        raw=7.0 + seed / 100 if status == "graded" else None,
        train_s=1.0,
        timed_out=False,
        chosen="ckpt_00000001.safetensors",
        weights_sha256=digest,
    )


def test_flags_name_every_pair_and_skip_deterministic_tasks(task):
    """The flag rule on its own: every pair of graded seeds whose chosen weights hash the same is named;
    distinct weights and invalid seeds give none; a task that declares its shipped algorithm
    deterministic (pruning) is not flagged for what its own algorithm does."""
    a = Anchors(no_info=8.0, baseline=7.3, best=6.0)
    s = score_seeds(task, [_seed(0, "a"), _seed(1, "b"), _seed(2, "a"), _seed(3, "b")], a)
    assert s.flags == ["identical weights on seeds 0 and 2", "identical weights on seeds 1 and 3"]
    assert score_seeds(task, [_seed(0, "a"), _seed(1, "b")], a).flags == []
    assert score_seeds(task, [_seed(0, "a"), _seed(1, "a", status="invalid")], a).flags == []
    assert score_seeds(replace(task, deterministic=True), [_seed(0, "a"), _seed(1, "a")], a).flags == []
