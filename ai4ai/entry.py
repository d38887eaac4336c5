"""What the commands share: Hydra's run folder. Commands (run, grade, calibrate, check_task, audit,
report, view, list, prepare) map their arguments onto the library and are imported by nothing."""

from __future__ import annotations

import fcntl
from pathlib import Path

_HELD: dict[str, object] = {}  # run folder -> its open lock file, held until the process exits


def hydra_run_dir() -> Path:
    """This command's run folder, claimed for as long as the process lives.

    The folder's name has a one-second clock (`%H-%M-%S_<task>`): two commands of one task started
    in the same second (a calibration at ci and one at smoke, say) were given the same folder and
    each moved the other's seed folders away mid-run. The second now stops at once, with a message,
    before it writes anything; running again in the same folder after the first has ended is fine."""
    from hydra.core.hydra_config import HydraConfig  # only inside a running @hydra.main

    d = Path(HydraConfig.get().runtime.output_dir)
    claim_run_dir(d)
    return d


def claim_run_dir(d: Path) -> None:
    key = str(d.resolve())
    if key in _HELD:
        return
    d.mkdir(parents=True, exist_ok=True)
    f = open(d / ".ai4ai-run.lock", "a")  # its content is never read: the lock is the claim
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.close()
        raise SystemExit(
            f"ai4ai: the run folder {d} is in use by another command started in the same second; "
            "start this one again, or give it a folder of its own with hydra.run.dir=PATH"
        ) from None
    _HELD[key] = f
