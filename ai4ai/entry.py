"""What the commands share: Hydra's run folder. Commands (run, grade, calibrate, check_task, audit,
report, list, prepare) map their arguments onto the library and are imported by nothing."""
from __future__ import annotations

from pathlib import Path


def hydra_run_dir() -> Path:
    from hydra.core.hydra_config import HydraConfig      # only inside a running @hydra.main
    return Path(HydraConfig.get().runtime.output_dir)
