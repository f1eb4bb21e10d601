"""What verify is doing now: each row in flight and its phase, counted from the start of
verify, so that the watchdog and the progress lines say what is really in flight."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

log = logging.getLogger("curate.verify")


class InFlight:
    """Rows in flight -> (phase, since). A row leaves the moment its result is ready."""

    def __init__(self):
        self._rows: dict[int, tuple[str, float]] = {}
        self._lock = threading.Lock()
        self.started = time.monotonic()
        self.last_done = self.started
        self.finished = 0

    def restart(self) -> None:
        with self._lock:
            self.started = self.last_done = time.monotonic()

    def enter(self, row: int, phase: str) -> None:
        with self._lock:
            self._rows[row] = (phase, time.monotonic())

    def leave(self, row: int) -> None:
        with self._lock:
            if self._rows.pop(row, None) is not None:
                self.finished += 1
            self.last_done = time.monotonic()

    def phases(self) -> Counter:
        with self._lock:
            return Counter(phase for phase, _ in self._rows.values())

    def summary(self) -> str:
        waits = self.phases()
        return ", ".join(f"{n} {w}" for w, n in waits.most_common()) or "nothing"


class Watchdog:
    """Says what the run waits on when no row has finished for `stall` seconds."""

    def __init__(self, inflight: InFlight, every: float = 30.0, stall: float = 120.0):
        self.inflight, self.every, self.stall = inflight, every, stall
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="verify-watchdog")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            idle = time.monotonic() - self.inflight.last_done
            if idle > self.stall and self.inflight.phases():
                log.warning("verify: no row finished for %.0f s (%.0f s into verify); rows in "
                            "flight: %s", idle, time.monotonic() - self.inflight.started,
                            self.inflight.summary())
