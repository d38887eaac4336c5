"""Records: result.json in the run dir and the same row in an SQLite results database."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from pathlib import Path

from ai4ai.core.layout import file_lock

COLUMNS = (
    "run_dir",
    "task",
    "agent",
    "agent_config_sha",
    "scale",
    "seed",
    "benchmark_version",
    "device_class",
    "status",
    "score",
    "raw_mean",
    "started_at",
    "result",
)


def config_sha(agent_cfg: dict) -> str:
    return hashlib.sha256(json.dumps(agent_cfg, sort_keys=True, default=str).encode()).hexdigest()[:16]


def connect(db: Path) -> sqlite3.Connection:
    """A connection to the results database, its schema in place. Many graders (Hydra's local and
    Slurm launchers) write to one database at once: the journal-mode switch and the schema are
    set up under an exclusive lock on a side file, because SQLite answers a concurrent
    `PRAGMA journal_mode=WAL` with "database is locked" at once, without waiting out the busy
    timeout. Rows are then written in WAL mode, where writers wait for each other."""
    db.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(str(db), timeout=120)
    try:
        with file_lock(db.with_name(db.name + ".lock")):
            if con.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                con.execute("PRAGMA journal_mode=WAL")
            cols = ", ".join(c + (" REAL" if c in ("score", "raw_mean", "seed") else " TEXT") for c in COLUMNS)
            con.execute(f"CREATE TABLE IF NOT EXISTS results (id INTEGER PRIMARY KEY AUTOINCREMENT, {cols})")
            _cells(con)
            con.commit()
    except BaseException:
        con.close()
        raise
    return con


def insert(db: Path, result: dict, run_dir: Path) -> None:
    row = (
        str(run_dir),
        result["task"],
        result["agent"],
        config_sha(result["agent_config"]),
        result["scale"],
        result["seed"],
        result["benchmark_version"],
        result["provenance"]["device_class"],
        result["status"],
        result["score"],
        result["raw"]["mean"],
        result["provenance"]["started_at"],
        json.dumps(result, default=str),
    )
    with connect(db) as con:
        con.execute(f"INSERT INTO results ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})", row)


def find_done(db: Path, task: str, agent_cfg: dict, scale: str, seed: int, version: str) -> dict | None:
    """A finished (graded or invalid) run of the same cell; `error` runs are retried, unless the
    cell has errored the same way twice (then it is done, status `error`, with its reason)."""
    if not db.exists():
        return None
    with connect(db) as con:
        row = con.execute(
            "SELECT run_dir, score, status FROM results WHERE task=? AND agent_config_sha=? AND scale=? "
            "AND seed=? AND benchmark_version=? AND status IN ('graded', 'invalid') ORDER BY id DESC LIMIT 1",
            (task, config_sha(agent_cfg), scale, seed, version),
        ).fetchone()
        if row:
            return {"run_dir": row[0], "score": row[1], "status": row[2]}
        cell = con.execute(
            "SELECT run_dir FROM cells WHERE cell=? AND phase=?",
            (cell_key(task, agent_cfg, scale, seed, version), ERROR_REPEATED),
        ).fetchone()
        if cell:
            last = con.execute(
                "SELECT reason FROM cell_errors WHERE cell=? ORDER BY updated DESC, count DESC LIMIT 1",
                (cell_key(task, agent_cfg, scale, seed, version),),
            ).fetchone()
            return {"run_dir": cell[0], "score": None, "status": "error", "reason": last[0] if last else None}
    return None


ERROR_REPEATED = "error_repeated"  # a cell's phase once it has errored the same way twice
ERROR_REPEATS = 2


def _cells(con: sqlite3.Connection) -> None:
    con.execute("CREATE TABLE IF NOT EXISTS cells (cell TEXT PRIMARY KEY, run_dir TEXT, phase TEXT, updated TEXT)")
    con.execute(
        "CREATE TABLE IF NOT EXISTS cell_errors (cell TEXT, signature TEXT, count INTEGER, reason TEXT, "
        "updated TEXT, PRIMARY KEY (cell, signature))"
    )


def error_signature(reason: str | None) -> str:
    """What makes two error reasons "the same": their text with paths and numbers blanked, so
    that a retry in another run folder, or a different elapsed time, is still the same error."""
    text = re.sub(r"\S*/\S*", "<path>", reason or "")
    return re.sub(r"\d+(\.\d+)?", "#", text).strip()


def note_error(db: Path, cell: str, reason: str | None) -> int:
    """Count an `error` attempt of `cell`; returns how many attempts have ended with this reason."""
    sig = error_signature(reason)
    with connect(db) as con:
        con.execute(
            "INSERT INTO cell_errors VALUES (?, ?, 1, ?, ?) ON CONFLICT(cell, signature) DO UPDATE SET "
            "count=count+1, reason=excluded.reason, updated=excluded.updated",
            (cell, sig, reason, now()),
        )
        return con.execute("SELECT count FROM cell_errors WHERE cell=? AND signature=?", (cell, sig)).fetchone()[0]


def cell_key(task: str, agent_cfg: dict, scale: str, seed: int, version: str) -> str:
    return f"{task}|{config_sha(agent_cfg)}|{scale}|{seed}|{version}"


def mark_cell(db: Path, cell: str, run_dir: Path, phase: str) -> None:
    """Progress of a run's cell: `agent_done` (submission written, grading pending) or `graded`."""
    with connect(db) as con:
        con.execute(
            "INSERT INTO cells VALUES (?, ?, ?, ?) ON CONFLICT(cell) DO UPDATE SET run_dir=excluded.run_dir, "
            "phase=excluded.phase, updated=excluded.updated",
            (cell, str(run_dir), phase, now()),
        )


def pending_grading(db: Path, cell: str) -> Path | None:
    """The run dir of this cell whose agent phase finished but whose grading did not."""
    if not db.exists():
        return None
    with connect(db) as con:
        row = con.execute("SELECT run_dir FROM cells WHERE cell=? AND phase='agent_done'", (cell,)).fetchone()
    if row and (Path(row[0]) / "submission.patch").exists():
        return Path(row[0])
    return None


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
