"""Hidden grader of the `graph_diffusion` task (loaded by path as a package; never mounted in a sandbox)."""
from .grader import (SPLITS, best_attainable, evaluate, evaluate_with_noise,  # noqa: F401
                     grading_data, materialize, split, uninformative)
