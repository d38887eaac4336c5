"""The proxy channel: the agent asks for a proxy score over a unix socket; the harness runs it.

A call snapshots the editable files (the same Python diff as the submission), trains them at
the run's scale in a fresh training sandbox with a proxy seed, evaluates the newest checkpoint
on the *visible* validation split only, and answers with the raw metric and its sigma against
the validation anchors. Calls are served one at a time and their time is the agent's. Every
call is appended to the run's trajectory.jsonl, which lives outside the workspace.
"""

from __future__ import annotations

import json
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from ai4ai.core.console import say
from ai4ai.core.layout import RunDir, write_json
from ai4ai.core.scoring import Anchors, sigma
from ai4ai.core.trajectory import PROXY, SUBMIT, Trajectory, rank
from ai4ai.grading.context import RunContext
from ai4ai.grading.devices import device_lock
from ai4ai.grading.evaluation import WorkerError, run_worker
from ai4ai.grading.seeds import eval_spec
from ai4ai.grading.training import build_training_copy, run_training, stage_dir, training_seed
from ai4ai.repo.preparing import data_mounts
from ai4ai.repo.submission import Submission, from_workspace
from ai4ai.sandbox import launcher, proxy_client
from ai4ai.sandbox.walk import WalkRefused

MAX_REQUEST = 4096
MAX_CALLS = 1000  # a flood of calls ends here; each call is still charged to the window
MAX_DETAIL = 600

# Every reply's `reason` is one of these. A reply carries the metric, its sigma, a reason, a short
# harness-written `detail` and the tail of the submission's own training log: nothing of the hidden
# grader or of the harness (no traceback, path or source line) reaches the agent. The full detail
# of a harness fault goes to .harness/proxy_errors.log, outside the agent's sandbox.
REASONS = (
    "ok",
    "training_failed",
    "no_checkpoint",
    "invalid_checkpoint",
    "sandbox_limit",
    "idle",
    "harness_error",
    "call_limit",
    "bad_request",
    "workspace_refused",
)
HARNESS_FAULT = "the harness failed during this call (not your code's fault); the benchmark's operators have its log"


@dataclass
class ProxyServer:
    ctx: RunContext  # the run's, with its caps and secret (anchors.with_budget)
    pristine: Path
    workspace: Path
    run_dir: Path
    validation: Anchors | None
    deadline: float  # time.time() at which the window ends
    calls: int = 0
    credit_s: float = 0.0  # lock waits given back to the window (see _score)
    marked: Submission | None = None
    snapshots: list = field(default_factory=list)  # (rank: proxy score, else raw metric, or None; Submission) per call
    _sock: socket.socket | None = None
    _thread: threading.Thread | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def trajectory_path(self) -> Path:
        return RunDir(self.run_dir).trajectory

    def start(self) -> Path:
        """Listen on a fresh socket; returns the folder holding it (to bind into the sandbox)."""
        self.sock_dir = Path(tempfile.mkdtemp(prefix="ai4ai-proxy-"))  # short: unix paths are limited
        path = self.sock_dir / "proxy.sock"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        path.chmod(stat.S_IRWXU | stat.S_IRWXG | stat.S_IRWXO)
        self._sock.listen(8)
        self._sock.settimeout(0.5)
        self.trajectory.start()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        return self.sock_dir

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
        if self._sock:
            self._sock.close()
        shutil.rmtree(getattr(self, "sock_dir", ""), ignore_errors=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except (TimeoutError, OSError):
                continue
            with conn:  # one call at a time: the next connection waits in the backlog
                try:
                    reply = self.handle(_read_request(conn))
                except Exception:  # never let a request take the harness down, nor tell the agent about it
                    self._log_fault()
                    reply = {"ok": False, "reason": "harness_error", "detail": HARNESS_FAULT}
                try:
                    conn.sendall(json.dumps(reply).encode() + b"\n")
                except OSError:
                    pass

    # ------------------------------------------------------------------ requests
    def handle(self, req) -> dict:
        if not isinstance(req, dict) or req.get("cmd") not in ("score", "submit", "status"):
            return {
                "ok": False,
                "reason": "bad_request",
                "error": "request must be a JSON object with cmd: score | submit | status",
            }
        if req["cmd"] == "status":
            return {
                "ok": True,
                "reason": "ok",
                "seconds_left": round(self.seconds_left(), 1),
                "proxy_calls": self.calls,
                "marked": self.marked is not None,
            }
        try:
            return self._handle(req)
        except WalkRefused as e:  # the workspace is over the walk's bounds: the agent's to fix, said plainly
            return {"ok": False, "reason": "workspace_refused", "error": f"the workspace was not read: {e}"}

    def _handle(self, req: dict) -> dict:
        if req["cmd"] == "submit":
            self.marked = self._snapshot()
            rd = RunDir(self.run_dir)
            rd.harness.mkdir(exist_ok=True)
            rd.marked_patch.write_text(self.marked.patch)
            self.trajectory.append(SUBMIT, patch_sha256=self.marked.sha256, rejected=self.marked.rejected)
            return {
                "ok": True,
                "reason": "ok",
                "marked": self.marked.sha256,
                "files": sorted(self.marked.files),
                "rejected": self.marked.rejected,
            }
        if self.calls >= MAX_CALLS:
            return {"ok": False, "reason": "call_limit", "error": f"proxy call limit ({MAX_CALLS}) reached"}
        try:
            return self._score()
        except WalkRefused:
            raise
        except Exception:  # the harness's fault, on this call: logged in full, told to the agent in one line
            self._log_fault()
            n = self.calls
            self.trajectory.append(
                PROXY, call=n, proxy_metric=None, proxy_score=None, status="error", reason="harness_error"
            )
            return {
                "ok": False,
                "metric": self.ctx.task.metric.name,
                "proxy_metric": None,
                "proxy_score": None,
                "reason": "harness_error",
                "detail": HARNESS_FAULT,
                "train_log_tail": self._train_log_tail(self._call_dir(n)),
                "seconds_left": round(self.deadline - time.time(), 1),
            }

    def _log_fault(self) -> None:
        rd = RunDir(self.run_dir)
        rd.harness.mkdir(exist_ok=True)
        exc = sys.exc_info()[1]
        with open(rd.proxy_errors, "a") as f:
            f.write(
                f"--- {time.strftime('%Y-%m-%dT%H:%M:%S%z')} call {self.calls}\n{traceback.format_exc()}"
                + (f"{exc.detail}\n" if isinstance(exc, WorkerError) else "")
            )

    def _call_dir(self, n: int) -> Path:
        return RunDir(self.run_dir).proxy_call(n)

    @staticmethod
    def _train_log_tail(call_dir: Path) -> str:
        """The tail of the submission's own training log (what it printed; nothing else is read)."""
        log = call_dir / "run" / "train.log"
        try:
            with open(log, "rb") as f:
                f.seek(max(0, log.stat().st_size - 2000))
                return f.read().decode("utf-8", "replace")[-2000:]
        except OSError:
            return ""

    def seconds_left(self) -> float:
        return self.deadline + self.credit_s - time.time()

    def _snapshot(self) -> Submission:
        return from_workspace(self.ctx.task, self.pristine, self.workspace, scale=self.ctx.scale)

    def _score(self) -> dict:
        self.calls += 1
        n, t0 = self.calls, time.monotonic()
        sub = self._snapshot()
        call_dir = self._call_dir(n)
        call_dir.mkdir(parents=True)
        (call_dir / "submission.patch").write_text(sub.patch)
        # The training process must not tell this run from a grading seed: the same sandbox, data
        # mounts, caps and environment, a seed and folder names drawn the same way (training.stage_dir).
        ctx = self.ctx
        repo = build_training_copy(ctx.task, sub, stage_dir(ctx) / "repo")
        mounts, env = data_mounts(ctx.task, ctx.scale)
        say(f"proxy call {n}: training the agent's current code")
        t_wait = time.monotonic()
        with device_lock(ctx.device, ctx.threads, priority=True):
            # Waiting for the device (another grading holds it) is not the agent's doing: the wait
            # goes back to its window, and the reply says how long it was.
            waited = time.monotonic() - t_wait
            self.credit_s += waited
            outcome, ckpts, reason = run_training(
                ctx, repo, training_seed(ctx, f"proxy {n}", n), call_dir / "run", mounts, env, f"  proxy call {n}"
            )
            metric = None
            if reason is None:
                res = run_worker(eval_spec(ctx, self.pristine, ckpts, mode="proxy"), call_dir / "eval")
                metric = res.get("validation_metric")
                if metric is None:
                    reason = "no valid checkpoint: " + "; ".join(c.get("reason", "") for c in res["candidates"])
        m = ctx.task.metric
        score = (
            sigma(metric, self.validation, m.direction, m.transform) if metric is not None and self.validation else None
        )
        self.snapshots.append((rank(score, metric, m.direction), sub))
        # reason (harness-written text) -> a word of REASONS, in run_training's order of checks
        code = (
            "ok"
            if reason is None
            else "sandbox_limit"
            if outcome.limit
            else "idle"
            if reason.startswith(("idle past", "lowered its own"))
            else "training_failed"
            if (not outcome.timed_out and outcome.returncode != 0)
            else "no_checkpoint"
            if not ckpts
            else "invalid_checkpoint"
        )
        detail = None if reason is None else _short(reason.split(": ", 1)[0] if code == "training_failed" else reason)
        rec = self.trajectory.append(
            PROXY,
            call=n,
            patch_sha256=sub.sha256,
            proxy_metric=metric,
            proxy_score=score,
            status="ok" if reason is None else "invalid",
            reason=code,
            detail=detail,
            duration_s=round(time.monotonic() - t0, 2),
            lock_wait_s=round(waited, 2),
            rejected=sub.rejected,
        )
        return {
            "ok": reason is None,
            "metric": m.name,
            "proxy_metric": metric,
            "proxy_score": score,
            "reason": code,
            "detail": detail,
            "train_log_tail": self._train_log_tail(call_dir),
            "duration_s": rec["duration_s"],
            "lock_wait_s": rec["lock_wait_s"],
            "rejected": sub.rejected,
            "seconds_left": round(self.seconds_left(), 1),
        }

    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        self.trajectory = Trajectory(self.trajectory_path, self.started)


def _short(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."


def _read_request(conn: socket.socket):
    conn.settimeout(10)
    data = b""
    while not data.endswith(b"\n") and len(data) <= MAX_REQUEST:
        chunk = conn.recv(1024)
        if not chunk:
            break
        data += chunk
    if len(data) > MAX_REQUEST:
        return None
    try:
        return json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return None


def client_bin(run_dir: Path) -> Path:
    """A folder holding `ai4ai-proxy` and `ai4ai-launch` (bound read-only into the agent's sandbox)."""
    d = RunDir(run_dir).bin
    d.mkdir(parents=True, exist_ok=True)
    for src, name in ((proxy_client, "ai4ai-proxy"), (proxy_client, "ai4ai-time"), (launcher, "ai4ai-launch")):
        target = d / name
        shutil.copyfile(src.__file__, target)
        target.chmod(0o755)
    return d


def choose_submission(policy: str, final: Submission, server: ProxyServer | None) -> tuple[Submission, str]:
    """final | marked (falls back to final) | best_proxy (falls back to marked, then final)."""
    if policy not in ("final", "marked", "best_proxy"):
        raise ValueError(f"submission={policy!r}: use final, marked or best_proxy")
    if server is not None and policy == "best_proxy":
        scored = [(s, sub) for s, sub in server.snapshots if s is not None]
        if scored:
            return max(scored, key=lambda x: x[0])[1], "best_proxy"
    if server is not None and policy in ("marked", "best_proxy") and server.marked is not None:
        return server.marked, "marked"
    return final, "final"


def write_submission_record(run_dir: Path, sub: Submission, source: str) -> None:
    rd = RunDir(run_dir)
    rd.submission_patch.write_text(sub.patch)
    write_json(rd.submission_json, {**sub.summary(), "source": source})
