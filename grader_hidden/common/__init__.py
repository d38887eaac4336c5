"""The hidden graders' shared library: code more than one grader uses, hidden and versioned with them.

Never a task (no conf/task/common.yaml; `list_tasks` reads conf/task/). A grader imports it
relatively, as a sibling package: `from ..common import hmm, lm` (ai4ai.core.hidden.load_grader
loads every grader as `ai4ai_hidden.<task>` under a package whose path is grader_hidden/, so the
import resolves here wherever the grader's own folder lies; a grader folder copied elsewhere still
reads this library). That import is what the task version looks for (ai4ai.core.hidden.uses_common):
a task whose grader imports the library has the library's tree hash in its task version, so
editing a file here moves the versions of exactly those tasks, and of no other.

    hmm     the sparse-HMM token source (optimizer, pruning), its sampler by sequence length and its
            exact conditional likelihood (forward algorithm)
    lm      a causal LM's per-sequence negative log-likelihood of token sequences
"""
