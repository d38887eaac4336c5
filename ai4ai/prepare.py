"""Build what a task needs at a scale whose data and prepared models are not committed (full):
its training splits into the harness's cache, then the repo's own prepared models; each phase
resumable and checksummed (preparing.py is the library).

    python -m ai4ai.prepare task=sft scale=full [device=cuda]
"""

import hydra
from omegaconf import DictConfig

from ai4ai import CONF_DIR
from ai4ai.core.provenance import default_device
from ai4ai.grading.context import resolve_scale, task_from_cfg
from ai4ai.repo.preparing import prepare


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="prepare")
def main(cfg: DictConfig) -> None:
    task, _ = task_from_cfg(cfg)
    device = default_device() if cfg.device == "auto" else str(cfg.device)
    prepare(task, resolve_scale(cfg.scale.name, device, paid=False), device, bool(cfg.progress))


if __name__ == "__main__":
    main()
