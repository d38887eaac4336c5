"""Run an agent on a task, grade its submission, record the result (see pipeline.run).

python -m ai4ai.run task=T agent=A [scale=S] [seed=N] [dry_run=true]
"""

import hydra
from omegaconf import DictConfig

from ai4ai import CONF_DIR
from ai4ai.entry import hydra_run_dir
from ai4ai.pipeline import run


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    run(cfg, hydra_run_dir())


if __name__ == "__main__":
    main()
