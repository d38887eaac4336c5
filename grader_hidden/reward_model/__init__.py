"""Hidden grader of the `reward_model` task (loaded by path as a package; never mounted in a sandbox)."""

from .grader import (  # noqa: F401
    SPLITS,
    best_attainable,
    evaluate,
    evaluate_with_noise,
    graded_rule,
    grading_data,
    materialize,
    split,
    uninformative,
)
