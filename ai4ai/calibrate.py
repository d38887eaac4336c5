"""Measure a task's anchors on this device class and store them (anchors.calibrate is the library).

    python -m ai4ai.calibrate task=optimizer scale=smoke [seeds=[...]]
    python -m ai4ai.calibrate task=optimizer scale=smoke cpu_only=true
    python -m ai4ai.calibrate task=optimizer scale=smoke probe_only=true
    python -m ai4ai.calibrate task=optimizer scale=smoke verify=true [seeds=[1000]]

cpu_only=true keeps a stored record's anchors and measures only the shipped algorithm's CPU time on
this machine (one seed, which must reproduce the record's metric; anchors.measure_cpu). Grading at
smoke does this by itself when the record's CPU time is another CPU class's or missing.

probe_only=true adds this host's host-speed probe figure (hostspeed) to a record of this device
class that was calibrated before the probe existed; a full calibration measures it by itself.

verify=true retrains the record's calibration seeds here (all of them, or `seeds`) and compares each
seed's metric with the stored one, storing nothing: anyone can check that a published record still
describes the code. It exits 1 when a seed differs by more than half the record's seed std.

Where a record goes: this machine's own store (outputs/records/, read on top of the committed
records in grader_hidden/<task>/), so that calibrating leaves the checkout as it was. commit=true
writes it into grader_hidden/<task>/ instead, to be committed (a maintainer's step;
tools/promote_records.py moves records already in the local store).
"""

import hydra
from omegaconf import DictConfig

from ai4ai import CONF_DIR
from ai4ai.entry import hydra_run_dir
from ai4ai.grading.anchors import add_probe, calibrate, find, measure_cpu, needs_cpu_here, verify
from ai4ai.grading.context import context


def _stored(ctx, purpose: str, instead: str):
    """The stored record of ctx's key, or a usage error saying what to run instead."""
    rec = find(ctx.task.grader, ctx.key)
    if rec is None:
        raise SystemExit(
            f"ai4ai: no anchors of {ctx.task.name} at {ctx.scale} for task version "
            f"{ctx.key.task_version} {purpose}; {instead}"
        )
    return rec


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="calibrate")
def main(cfg: DictConfig) -> None:
    ctx = context(cfg, hydra_run_dir())
    if cfg.probe_only:
        rec = _stored(ctx, "to add a probe to", "calibrate in full (drop probe_only=true)")
        add_probe(ctx, rec, commit=bool(cfg.commit))
        return
    if cfg.verify:
        rec = _stored(ctx, "to verify", "calibrate (drop verify=true)")
        rows = verify(ctx, rec, ctx.run_dir, [int(s) for s in cfg.seeds] if cfg.seeds else None)
        bad = [r["seed"] for r in rows if not r["agrees"]]
        if bad:
            raise SystemExit(
                f"ai4ai: the {ctx.task.name}/{ctx.scale} record does not reproduce on seeds {bad}: "
                f"recalibrate (python -m ai4ai.calibrate task={ctx.task.name} scale={ctx.scale})"
            )
        print(f"ai4ai: the {ctx.task.name}/{ctx.scale} record reproduces on seeds {[r['seed'] for r in rows]}")
        return
    if cfg.cpu_only:
        rec = _stored(ctx, "to keep", "calibrate in full (drop cpu_only=true)")
        why = needs_cpu_here(ctx, rec) or "asked for (cpu_only=true)"
        measure_cpu(ctx, rec, ctx.run_dir, why, commit=bool(cfg.commit))
        return
    calibrate(ctx, ctx.run_dir, [int(s) for s in cfg.seeds] if cfg.seeds else None, commit=bool(cfg.commit))


if __name__ == "__main__":
    main()
