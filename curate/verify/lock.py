"""A fair readers-writer lock between worker processes, on two files (fcntl.flock).

Correctness runs hold it shared (many workers on the GPU at once); timed trials hold it
exclusive, so nothing else runs on the device while a pair is timed. A writer first takes the
turnstile, which new readers must pass, so a stream of readers cannot starve it. A killed
process drops its locks with its file descriptors.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path


class DeviceLock:
    def __init__(self, directory: str | Path | None):
        self.dir = Path(directory) if directory else None
        self.waited_s = 0.0  # time spent waiting for the lock (reported in the rows' notes)
        if self.dir:
            self.dir.mkdir(parents=True, exist_ok=True)

    def _open(self, name: str) -> int:
        return os.open(str(self.dir / name), os.O_RDWR | os.O_CREAT, 0o600)

    def shared(self):
        """Many holders at once (correctness work on the device)."""
        return self._hold(fcntl.LOCK_SH)

    def exclusive(self):
        """One holder, nobody else on the device (timed trials)."""
        return self._hold(fcntl.LOCK_EX)

    @contextlib.contextmanager
    def _hold(self, mode: int):
        if self.dir is None:
            yield
            return
        gate, main = self._open("turnstile.lock"), self._open("device.lock")
        try:
            t0 = time.monotonic()
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(main, mode)
            if mode == fcntl.LOCK_SH:  # a reader lets the next one through; a writer keeps
                fcntl.flock(gate, fcntl.LOCK_UN)  # the turnstile until it is done
            self.waited_s += time.monotonic() - t0
            yield
        finally:
            os.close(main)
            os.close(gate)
