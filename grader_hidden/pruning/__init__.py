"""Hidden grader of the `pruning` task (loaded by path as a package; never mounted in a sandbox)."""

from .grader import (  # noqa: F401
    SPLITS,
    best_attainable,
    check_pruned,
    evaluate,
    evaluate_with_noise,
    materialize,
    split,
    uninformative,
    write_repo_data,
)
