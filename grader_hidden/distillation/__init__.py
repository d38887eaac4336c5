"""Hidden grader of the `distillation` task (loaded by path as a package; never mounted in a sandbox)."""
from .grader import (SPLITS, best_attainable, evaluate, evaluate_with_noise,  # noqa: F401
                     grading_data, instance, materialize, score_completions, split, uninformative)
