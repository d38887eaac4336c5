"""What the harness prints while it works."""

from __future__ import annotations

import re
import sys
import time

from tqdm import tqdm

_STEP = re.compile(r"\bstep\s+(\d+)\s*/\s*(\d+)")


def printable(text: str) -> str:
    """Text from a submission, safe for a terminal and a log: control characters escaped."""
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def say(msg: str) -> None:
    # Messages can carry names an agent chose (files, log lines): escape what a terminal would
    # act on and what the stream cannot encode (undecodable file names), rather than crash.
    msg = printable(msg)
    msg = msg.encode("utf-8", "backslashreplace").decode("utf-8")
    print(f"[ai4ai {time.strftime('%H:%M:%S')}] {msg}", file=sys.stdout, flush=True)


class TrainingBar:
    """A progress bar fed by the training log's `step N/M` lines (no lines, no bar)."""

    def __init__(self, desc: str, enabled: bool = True):
        self.desc, self.enabled, self.bar = desc, enabled, None

    def on_line(self, line: str) -> None:
        m = _STEP.search(line)
        if not m or not self.enabled:
            return
        n, total = int(m.group(1)), int(m.group(2))
        if self.bar is None:
            self.bar = tqdm(
                total=total,
                desc=self.desc,
                unit="step",
                file=sys.stdout,
                leave=True,
                dynamic_ncols=True,
                mininterval=1.0,
            )
        self.bar.n = min(n, self.bar.total)
        self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
