"""Validate a task against the contract; at `smoke`, run every statistical check of DESIGN.md.

    python -m ai4ai.check_task task=optimizer [stats=false] [scale=smoke] [calibrate=true] [tuning=true]

Prints one line per check (PASS / FAIL / WARN with what to fix) and exits 1 on any FAIL
(task_checks.py is the library).
"""

import sys

import hydra
from omegaconf import DictConfig

from ai4ai import CONF_DIR
from ai4ai.analysis.task_checks import check
from ai4ai.analysis.tuning import tuning_checks
from ai4ai.entry import hydra_run_dir


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="check_task")
def main(cfg: DictConfig) -> None:
    sys.exit(check(cfg, hydra_run_dir(), tuning=tuning_checks))


if __name__ == "__main__":
    main()
