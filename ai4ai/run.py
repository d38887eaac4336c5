"""python -m ai4ai.run task=T agent=A [scale=S] [seed=N] [dry_run=true]"""
from .pipeline import run_main

if __name__ == "__main__":
    run_main()
