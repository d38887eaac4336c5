"""Hidden grader of the `unlearning` task (loaded by path as a package; never mounted in a sandbox)."""

from .grader import (  # noqa: F401
    SPLITS,
    details,
    evaluate,
    evaluate_with_noise,
    materialize,
    prepare_data,
    score,
    split,
    uninformative,
)
