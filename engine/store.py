"""Stores persist workflow runs: memory (tests, benchmarks) and SQLite (local runs, resumable).

The manager calls ``save(dirty_runs)`` once per engine tick. The SQLite store writes a run's
record (spec, status, node state, random-source state) and any extra snapshots (the simulated
cluster, the virtual clock) in one transaction, so a crash leaves a consistent checkpoint that
``chaosflow resume`` continues from. Continuing is level-based: each node re-derives its timers
and re-issues its idempotent actor calls from its stored state.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.runtime import WorkflowRun, run_from_record, run_to_record

if TYPE_CHECKING:
    from engine.control import Control

SnapshotProvider = Callable[[], Any]


class MemoryStore:
    def __init__(self) -> None:
        self.runs: dict[str, WorkflowRun] = {}
        self.saves = 0

    def save(self, runs: list[WorkflowRun]) -> None:
        self.saves += 1
        for r in runs:
            self.runs[r.key] = r


class SQLiteStore:
    SCHEMA = """
    CREATE TABLE IF NOT EXISTS workflows (
        key TEXT PRIMARY KEY,
        phase TEXT NOT NULL,
        record TEXT NOT NULL,
        updated REAL NOT NULL
    );
    CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE IF NOT EXISTS controls (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        workflow TEXT NOT NULL,
        action TEXT NOT NULL,
        node TEXT,
        message TEXT,
        created REAL NOT NULL,
        applied REAL,
        ok INTEGER,
        result TEXT
    );
    """

    def __init__(self, path: str | Path, min_interval: float = 0.0) -> None:
        self.path = str(path)
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(self.SCHEMA)
        self.snapshots: dict[str, SnapshotProvider] = {}
        self.min_interval = min_interval
        self._last = 0.0
        self._pending: dict[str, WorkflowRun] = {}
        self._deletes: set[str] = set()
        self.saves = 0

    def save(self, runs: list[WorkflowRun], force: bool = False) -> None:
        for r in runs:
            self._pending[r.key] = r
        now = time.monotonic()
        if not force and self.min_interval and now - self._last < self.min_interval:
            return
        self._write()
        self._last = now

    def flush(self) -> None:
        if self._pending or self._deletes or self.snapshots:
            self._write()

    def delete(self, key: str) -> None:
        """Forget a run (e.g. a cron child beyond the history limit) with the next write, in the
        same transaction as the runs and snapshots."""
        self._pending.pop(key, None)
        self._deletes.add(key)

    def flush_due(self) -> None:
        """Write what a throttled ``save`` left pending once ``min_interval`` has passed (an engine
        that went idle still gets its last changes checkpointed)."""
        if self._pending and time.monotonic() - self._last >= self.min_interval:
            self._write()
            self._last = time.monotonic()

    def _write(self) -> None:
        rows = [
            (r.key, r.phase.value, json.dumps(run_to_record(r), separators=(",", ":")), time.time())
            for r in self._pending.values()
        ]
        metas = [(k, json.dumps(fn(), separators=(",", ":"))) for k, fn in self.snapshots.items()]
        deletes = [(k,) for k in sorted(self._deletes)]
        db = self._db
        db.execute("BEGIN")
        try:
            db.executemany("INSERT OR REPLACE INTO workflows VALUES (?, ?, ?, ?)", rows)
            db.executemany("DELETE FROM workflows WHERE key = ?", deletes)
            db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", metas)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        self._pending.clear()
        self._deletes.clear()
        self.saves += 1

    def put_meta(self, key: str, value: Any) -> None:
        self._db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    # --- controls from other processes (engine/control.py) ---------------------------------------
    def add_control(self, workflow: str, action: str, node: str | None, message: str | None) -> int:
        cur = self._db.execute(
            "INSERT INTO controls (workflow, action, node, message, created) VALUES (?, ?, ?, ?, ?)",
            (workflow, action, node, message, time.time()),
        )
        return int(cur.lastrowid or 0)

    def pending_controls(self) -> list[Control]:
        from engine.control import Control

        rows = self._db.execute(
            "SELECT id, workflow, action, node, message FROM controls WHERE applied IS NULL ORDER BY id"
        ).fetchall()
        return [Control(int(r[0]), r[1], r[2], r[3], r[4]) for r in rows]

    def finish_control(self, control_id: int, ok: bool, result: str) -> None:
        self._db.execute(
            "UPDATE controls SET applied = ?, ok = ?, result = ? WHERE id = ?",
            (time.time(), int(ok), result, control_id),
        )

    def control_result(self, control_id: int) -> tuple[bool, str] | None:
        row = self._db.execute(
            "SELECT applied, ok, result FROM controls WHERE id = ?", (control_id,)
        ).fetchone()
        if row is None or row[0] is None:
            return None
        return bool(row[1]), str(row[2] or "")

    def put_engine(self, info: dict[str, Any]) -> None:
        self.put_meta("engine", info)

    def get_engine(self) -> dict[str, Any] | None:
        value = self.get_meta("engine")
        return value if isinstance(value, dict) else None

    def clear_engine(self) -> None:
        self._db.execute("DELETE FROM meta WHERE key = 'engine'")

    def workflow_phases(self) -> dict[str, str]:
        rows = self._db.execute("SELECT key, phase FROM workflows ORDER BY key").fetchall()
        return {str(k): str(p) for k, p in rows}

    def load_all(self) -> list[WorkflowRun]:
        rows = self._db.execute("SELECT record FROM workflows ORDER BY key").fetchall()
        return [run_from_record(json.loads(r[0])) for r in rows]

    def close(self) -> None:
        self._db.close()
