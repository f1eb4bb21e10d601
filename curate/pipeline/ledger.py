"""ledger.sqlite: every row's result per step, keyed by content hash, and stage markers.

A build killed at any point resumes from here: finished rows are read back, never recomputed.
`computes` counts how often a key was computed, so a test can prove nothing ran twice.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from .step import Outcome

_SCHEMA = """
CREATE TABLE IF NOT EXISTS results (
    step TEXT NOT NULL, key TEXT NOT NULL, outcome TEXT NOT NULL,
    computes INTEGER NOT NULL DEFAULT 1, seconds REAL, created REAL NOT NULL,
    PRIMARY KEY (step, key));
CREATE TABLE IF NOT EXISTS stages (
    idx INTEGER NOT NULL, name TEXT NOT NULL, fingerprint TEXT NOT NULL,
    stats TEXT NOT NULL, finished REAL NOT NULL, PRIMARY KEY (idx, name));
"""


class Ledger:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        if str(path) != ":memory:":
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), timeout=60)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(_SCHEMA)
        self._pending = 0
        self._last_commit = time.monotonic()

    def lookup(self, step: str, keys: list[str]) -> dict[str, Outcome]:
        found: dict[str, Outcome] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = f"SELECT key, outcome FROM results WHERE step=? AND key IN ({','.join('?' * len(chunk))})"
            for key, outcome in self.db.execute(q, [step, *chunk]):
                found[key] = Outcome.from_json(json.loads(outcome))
        return found

    def record(self, step: str, key: str, outcome: Outcome, seconds: float | None = None) -> None:
        self.db.execute(
            "INSERT INTO results (step, key, outcome, seconds, created) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT(step, key) DO UPDATE SET outcome=excluded.outcome, "
            "computes=computes+1, seconds=excluded.seconds, created=excluded.created",
            (step, key, json.dumps(outcome.to_json(), default=str), seconds, time.time()))
        self._pending += 1
        if self._pending >= 64 or time.monotonic() - self._last_commit > 2.0:
            self.commit()

    def commit(self) -> None:
        self.db.commit()
        self._pending = 0
        self._last_commit = time.monotonic()

    def stage_done(self, idx: int, name: str, key: str) -> dict | None:
        row = self.db.execute("SELECT stats FROM stages WHERE idx=? AND name=? AND fingerprint=?",
                              (idx, name, key)).fetchone()
        return json.loads(row[0]) if row else None

    def mark_stage(self, idx: int, name: str, key: str, stats: dict) -> None:
        self.db.execute("INSERT OR REPLACE INTO stages VALUES (?, ?, ?, ?, ?)",
                        (idx, name, key, json.dumps(stats), time.time()))
        self.commit()

    def forget_stage(self, idx: int, name: str) -> None:
        self.db.execute("DELETE FROM stages WHERE idx=? AND name=?", (idx, name))
        self.commit()

    def computes(self, step: str | None = None) -> dict[str, int]:
        """key -> how many times it was computed (for the resume guarantee)."""
        q, args = "SELECT key, computes FROM results", []
        if step:
            q, args = q + " WHERE step=?", [step]
        return dict(self.db.execute(q, args).fetchall())

    def progress(self) -> dict[str, tuple[int, float, float]]:
        """step -> (rows finished, when the first and the last of them finished; epoch
        seconds): where a build stood, finished or not."""
        q = "SELECT step, count(*), min(created), max(created) FROM results GROUP BY step"
        return {step: (n, lo, hi) for step, n, lo, hi in self.db.execute(q)}

    def close(self) -> None:
        self.commit()
        self.db.close()
