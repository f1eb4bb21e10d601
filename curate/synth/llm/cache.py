"""The response cache of synth-llm: a rerun or a resumed build never pays for a reply twice.

Replies are keyed by (model, messages, sampling parameters, sample index) and written
the moment they arrive, so that a build killed mid-batch (SIGKILL included) keeps every reply it
had paid for. Refinement verdicts are kept too, keyed by the candidate and the device: the next
turn's prompt quotes them, and a verdict measured again (a speedup a few percent off) would
change that prompt and miss the cache.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS replies (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


def reply_key(model: str, messages: list[dict], sampling: dict, sample: int) -> str:
    """Not the server's address: the same model moved to another port answers alike."""
    blob = json.dumps([model, messages, sampling, sample], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def verdict_key(pytorch_code: str, kernel_code: str, device: str, config: dict) -> str:
    blob = json.dumps([pytorch_code, kernel_code, device, config], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class ResponseCache:
    def __init__(self, path: str | Path):
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def _get(self, table: str, key: str) -> dict | None:
        with self._lock:
            row = self._db.execute(f"SELECT value FROM {table} WHERE key = ?",
                                   (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def _put(self, table: str, key: str, value: dict) -> None:
        with self._lock:
            self._db.execute(f"INSERT OR REPLACE INTO {table} VALUES (?, ?)",
                             (key, json.dumps(value)))

    def reply(self, key: str) -> dict | None:
        got = self._get("replies", key)
        if got is None:
            self.misses += 1
        else:
            self.hits += 1
        return got

    def put_reply(self, key: str, reply: dict) -> None:
        self._put("replies", key, reply)

    def verdict(self, key: str) -> dict | None:
        return self._get("verdicts", key)

    def put_verdict(self, key: str, verdict: dict) -> None:
        self._put("verdicts", key, verdict)

    def close(self) -> None:
        with self._lock:
            self._db.close()
