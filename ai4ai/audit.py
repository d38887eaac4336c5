"""Re-grade a stored submission from scratch and say whether its number still holds (auditing.py
is the library, with the rules of agreement and drift).

    python -m ai4ai.audit run=RUN_DIR [seeds=[0,1]] [regrade=true] [anchors=recorded] [model_path=FOLDER]
    python -m ai4ai.audit results=DB [sample=N]

A run on your own model (task.model_path) is re-graded on that model, from the folder it recorded
or model_path=FOLDER (an identical copy; checked by content hash).
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ai4ai import CONF_DIR
from ai4ai.analysis.auditing import audit_db, audit_run, changed_names, summary, table
from ai4ai.core.layout import write_json
from ai4ai.entry import hydra_run_dir
from ai4ai.grading.context import UsageError


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="audit")
def main(cfg: DictConfig) -> None:
    if bool(cfg.run) == bool(cfg.results):
        raise UsageError("give exactly one of run=RUN_DIR or results=DB")
    seeds = [int(s) for s in cfg.seeds] if cfg.seeds else None
    kw = dict(
        seeds=seeds,
        regrade=bool(cfg.regrade),
        anchors=str(cfg.anchors),
        device=str(cfg.device),
        sandbox=str(cfg.sandbox.backend),
        progress=bool(cfg.progress),
    )
    if cfg.run:
        rep = audit_run(
            Path(cfg.run), out=Path(cfg.out) if cfg.out else None, model_path=cfg.get("model_path") or None, **kw
        )
        print(summary(rep))
        sys.exit(0 if rep["agrees"] is not False and "submission" not in changed_names(rep) else 1)
    if cfg.get("model_path"):
        raise UsageError("model_path= goes with run=RUN_DIR (one run's model moved), not results=DB")
    if not Path(cfg.results).is_file():
        raise UsageError(
            f"results={cfg.results}: no results database there (give the results.sqlite a run wrote, "
            "or run=RUN_DIR for one run)"
        )
    rows = audit_db(Path(cfg.results), int(cfg.sample) if cfg.sample is not None else None, int(cfg.sample_seed), **kw)
    text = table(rows)
    print(text)
    d = hydra_run_dir()
    d.mkdir(parents=True, exist_ok=True)
    (d / "audit.md").write_text(text + "\n")
    write_json(d / "audit.json", rows)
    print(f"\n{sum(r['agrees'] is True for r in rows)} of {len(rows)} agree; written to {d}")
    sys.exit(0 if all(r["agrees"] is not False for r in rows) else 1)


if __name__ == "__main__":
    main()
