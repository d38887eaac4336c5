"""Measure a task's anchors on this device class and store them (anchors.calibrate is the library).

    python -m ai4ai.calibrate task=optimizer scale=smoke [seeds=[...]]
"""
import hydra
from omegaconf import DictConfig

from . import CONF_DIR
from .anchors import calibrate
from .context import context
from .entry import hydra_run_dir


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="calibrate")
def main(cfg: DictConfig) -> None:
    ctx = context(cfg, hydra_run_dir())
    calibrate(ctx, ctx.run_dir, [int(s) for s in cfg.seeds] if cfg.seeds else None)


if __name__ == "__main__":
    main()
