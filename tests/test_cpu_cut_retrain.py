"""A seed its CPU cap cuts is trained once more and the second training stands (grading.
_retrain_after_cpu_cut): on a shared host a slow spell costs CPU time too, so one cut alone must
not decide a score. Real trainings of dpo at ci (seconds each)."""

from dataclasses import replace

from ai4ai.grading import anchors, records
from ai4ai.grading import seeds as grading
from ai4ai.grading.context import context

from .conftest import needs_bwrap


def _ctx(compose_cfg, tmp_path):
    cfg = compose_cfg("grade", ["task=dpo", "scale=ci"])
    ctx = context(cfg, tmp_path / "run")
    rec = records.find(ctx.task.grader, ctx.key)
    assert rec is not None, "dpo has no ci record for its current version"
    return anchors.with_budget(ctx, rec)


@needs_bwrap
def test_a_cut_from_a_slow_spell_is_trained_again_and_the_second_run_stands(compose_cfg, tmp_path, monkeypatch):
    ctx = _ctx(compose_cfg, tmp_path)
    assert ctx.cpu_cap_s is not None
    real, calls = grading.train_and_evaluate, []

    def slow_then_normal(c, *args):
        calls.append(c.ctx.cpu_cap_s)
        # the first training meets a "slow spell": a cap it cannot finish under; the second has room
        return real(replace(c, ctx=replace(c.ctx, cpu_cap_s=0.5 if len(calls) == 1 else 600.0)), *args)

    monkeypatch.setattr(grading, "train_and_evaluate", slow_then_normal)
    (r,) = grading.grade_seeds(ctx, anchors.empty_submission(), [0], tmp_path / "g")
    assert len(calls) == 2
    assert r.status == "graded" and r.cut is None, r
    assert r.first_cut_cpu_s is not None and r.first_cut_cpu_s >= 0.5
    seed_dir = tmp_path / "g" / "seed_0"
    assert (seed_dir / "train.log").is_file() and (seed_dir / "cut_1" / "train.log").is_file()
    assert not (tmp_path / "g" / "seed_0.cut_1").exists()


@needs_bwrap
def test_a_submission_over_its_cap_is_cut_twice_and_no_more(compose_cfg, tmp_path, monkeypatch):
    ctx = replace(_ctx(compose_cfg, tmp_path), cpu_cap_s=0.5)
    real, calls = grading.train_and_evaluate, []
    monkeypatch.setattr(grading, "train_and_evaluate", lambda *a: calls.append(1) or real(*a))
    (r,) = grading.grade_seeds(ctx, anchors.empty_submission(), [0], tmp_path / "g")
    assert len(calls) == 2
    assert r.cut == "cpu" and r.first_cut_cpu_s is not None, r
    assert r.status in ("graded", "invalid"), r  # what the second training wrote, or nothing
