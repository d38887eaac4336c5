"""One run's page: a self-contained HTML file of its instructions, transcript, proxy calls,
submission, grading seeds and API cost (runpage.py is the library).

    python -m ai4ai.view run=RUN_DIR [out=FILE] [labels=FILE]
"""

from pathlib import Path

import hydra
from omegaconf import DictConfig

from ai4ai import CONF_DIR
from ai4ai.analysis.runpage import is_run_dir, write_page
from ai4ai.analysis.runs import read_labels
from ai4ai.grading.context import UsageError

WHAT = "give run=RUN_DIR, a folder `python -m ai4ai.run` wrote (outputs/runs/<date>/<time>_<task>_<agent>_s<seed>)"


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="view")
def main(cfg: DictConfig) -> None:
    if not cfg.run:
        raise UsageError(f"no run given: {WHAT}")
    run = Path(cfg.run)
    if not run.is_dir():
        raise UsageError(f"run={cfg.run}: no such folder; {WHAT}")
    if not is_run_dir(run):
        raise UsageError(
            f"run={cfg.run}: not a run folder (no result.json, agent.log, submission.patch or grade/); {WHAT}"
        )
    try:
        labels = read_labels(Path(cfg.labels) if cfg.labels else None)
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(write_page(run, Path(cfg.out) if cfg.out else None, labels))


if __name__ == "__main__":
    main()
