"""Hidden grader of the `pruning` task (loaded by path as a package; never mounted in a sandbox)."""
from .grader import (SPLITS, best_attainable, check_pruned, evaluate, evaluate_with_noise,  # noqa: F401
                     materialize, split, uninformative, write_repo_data)
