"""Where things live: the run directory's files and the paths a sandbox shows its phase.

Every module names a run's files through `RunDir` and a sandbox's folders through the constants
below, so that a file's name is written once. Nothing here imports the rest of the package.

    <run>/instructions.md  agent.log  agent_outcome.json  workspace/  agent_home/
          submission.patch  submission.json  trajectory.jsonl  result.json  grade/seed_N/
          calibration/
          .harness/  pristine/  nonce  bin/  marked.patch  proxy_errors.log  proxy/call_NNNN/  t/<16 hex>/
"""

from __future__ import annotations

import fcntl
import json
import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# inside a sandbox (bwrap); the `none` backend maps them back to host folders (Sandbox.host)
WORKSPACE = "/workspace"  # the agent's editable copy
AGENT_HOME = "/home/agent"
REPO = "/repo"  # the training copy
OUT = "/out"  # what training writes (checkpoints)
TRAIN_HOME = "/home/sandbox"
DATA = "/data"  # the materialized full split
HARNESS_BIN = "/opt/ai4ai/bin"  # ai4ai-proxy, ai4ai-time, ai4ai-launch
SOCKET_DIR = "/run/ai4ai"  # the proxy's unix socket
METER_DIR = "/run/ai4ai-meter"  # the meter's socket and its client module (training only)
KERNELS = "/opt/ai4ai/ai4ai_kernels"
KERNELS_PARENT = "/opt/ai4ai"  # on PYTHONPATH inside bwrap


@dataclass(frozen=True)
class RunDir:
    """The files of one run (or of one grading, calibration or audit folder)."""

    root: Path

    @property
    def harness(self) -> Path:
        """Files the harness keeps for itself; never mounted into a sandbox."""
        return self.root / ".harness"

    @property
    def pristine(self) -> Path:
        return self.harness / "pristine"

    @property
    def nonce(self) -> Path:
        return self.harness / "nonce"

    @property
    def bin(self) -> Path:
        return self.harness / "bin"

    @property
    def marked_patch(self) -> Path:
        return self.harness / "marked.patch"

    @property
    def proxy_errors(self) -> Path:
        return self.harness / "proxy_errors.log"

    def proxy_call(self, n: int) -> Path:
        return self.harness / "proxy" / f"call_{n:04d}"

    def stage(self, token: str) -> Path:
        """A training sandbox's host folders while it runs (see training.stage_dir)."""
        return self.harness / "t" / token

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def agent_home(self) -> Path:
        return self.root / "agent_home"

    @property
    def instructions(self) -> Path:
        return self.root / "instructions.md"

    @property
    def agent_log(self) -> Path:
        return self.root / "agent.log"

    @property
    def agent_outcome(self) -> Path:
        return self.root / "agent_outcome.json"

    @property
    def submission_patch(self) -> Path:
        return self.root / "submission.patch"

    @property
    def submission_json(self) -> Path:
        return self.root / "submission.json"

    @property
    def trajectory(self) -> Path:
        return self.root / "trajectory.jsonl"

    @property
    def result(self) -> Path:
        return self.root / "result.json"

    @property
    def grade(self) -> Path:
        return self.root / "grade"

    @property
    def calibration(self) -> Path:
        return self.root / "calibration"


def write_json(path: Path, obj) -> None:
    """Write atomically: a reader never sees half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    tmp.replace(path)


def read_json(path: Path, default=None):
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return default


RECORDS_ENV = "AI4AI_RECORDS_DIR"  # this machine's store of records (default: <checkout>/outputs/records)
CHECKOUT = Path(__file__).resolve().parent.parent.parent  # the project's folder (ai4ai.PROJECT_ROOT)


def local_records_dir(grader_dir: Path) -> Path | None:
    """Where this machine writes the records (anchors, calibration details, brought models) of a
    grader folder of the checkout: the committed ones are read-only at run time, and what a machine
    measures goes to a store of its own under outputs/ (ignored by git), read on top of them
    (grading.records). `$AI4AI_RECORDS_DIR` moves that store. None for a grader folder outside the
    checkout (a copy elsewhere is its own store, written in place)."""
    root = CHECKOUT
    try:
        rel = Path(grader_dir).resolve().relative_to(root)
    except ValueError:
        return None
    if rel.parts[:1] == ("outputs",):
        return None  # already a machine's own folder (a derived repo's grader, a local store)
    base = Path(os.environ[RECORDS_ENV]) if os.environ.get(RECORDS_ENV) else root / "outputs" / "records"
    return base / rel


@contextmanager
def file_lock(lock: Path):
    """An exclusive lock on the file `lock` (made if missing) for the block: for writers of one shared
    file in several processes. The lock file stays: unlinking it would let a writer that opened the old
    file and one that creates a new one each hold "the" lock at once."""
    with open(lock, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield  # closing the file releases the lock
