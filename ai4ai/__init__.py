"""ai4ai: a benchmark of how well AI agents improve training algorithms."""

from pathlib import Path

__version__ = "0.1.0"
PROJECT_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = str(PROJECT_ROOT / "conf")  # a string: what hydra.main takes as config_path
SCHEMA = "ai4ai.result/1"
