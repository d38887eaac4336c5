"""Tables, figures and an HTML page from a results database (reporting.py is the library).

python -m ai4ai.report results=outputs/results.sqlite out=outputs/report [scale=smoke] [mix=true]
"""

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from ai4ai import CONF_DIR
from ai4ai.analysis.reporting import report


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="report")
def main(cfg: DictConfig) -> None:
    scale = cfg.scale.name if cfg.get("scale") else None
    try:
        res = report(
            Path(cfg.results),
            Path(cfg.out),
            scale,
            bool(cfg.mix),
            Path(cfg.labels) if cfg.labels else None,
            tuple(cfg.formats),
        )
    except FileNotFoundError as e:
        print(f"ai4ai: {e}")
        sys.exit(2)
    print(res["markdown"])
    print(f"\nwrote {', '.join(str(p) for p in res['files'])}")


if __name__ == "__main__":
    main()
