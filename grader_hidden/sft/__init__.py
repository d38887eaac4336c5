"""Hidden grader of the `sft` task (loaded by path as a package; never mounted in a sandbox)."""

from .grader import SPLITS, evaluate, evaluate_with_noise, grading_data, materialize, split, uninformative  # noqa: F401
