"""Hidden grader of the `reward_model` task (loaded by path as a package; never mounted in a sandbox)."""
from .grader import (SPLITS, best_attainable, evaluate, evaluate_with_noise,  # noqa: F401
                     graded_rule, grading_data, materialize, split, uninformative)
