"""Grade a patch, or the shipped algorithm, with no agent (see pipeline.grade; grading.py is the library).

python -m ai4ai.grade task=optimizer patch=examples/optimizer/warmup_cosine.patch [scale=smoke]
"""

import hydra
from omegaconf import DictConfig

from ai4ai import CONF_DIR
from ai4ai.entry import hydra_run_dir
from ai4ai.pipeline import grade


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="grade")
def main(cfg: DictConfig) -> None:
    grade(cfg, hydra_run_dir())


if __name__ == "__main__":
    main()
