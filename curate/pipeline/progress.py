"""Progress for long stages: a bar on a terminal, periodic log lines with rate and ETA otherwise.

While a bar is open, log records to the terminal go through tqdm (tqdm.contrib.logging), which
clears the bar, writes the line and draws the bar again: a log line never splits a bar, and a
closed bar leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time

log = logging.getLogger("curate")

INTERVAL_S = 10.0  # off a terminal: one line per this many seconds at most


class Progress:
    def __init__(self, label: str, total: int | None = None, enabled: bool = True,
                 interval: float = INTERVAL_S):
        self.label, self.total, self.done = label, total, 0
        self.enabled, self.interval = enabled, interval
        self._bar = None
        self._redirect = contextlib.ExitStack()
        self._t0 = self._last_log = time.monotonic()
        self._window = (self._t0, 0)  # (time, rows done) where the current rate window starts
        self._rate: float | None = None
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm
            from tqdm.contrib.logging import logging_redirect_tqdm
            self._redirect.enter_context(logging_redirect_tqdm())
            self._bar = tqdm(total=total, desc=label, unit="row", file=sys.stderr, leave=False,
                             dynamic_ncols=True)
        elif enabled:
            log.info("%s: started%s", label, f" ({total} rows)" if total else "")
        self._logged = 0          # rows shown in the last line
        self._lock = threading.Lock()
        self._stop = threading.Event()
        if enabled and self._bar is None:
            # rows that finish just after a line are shown one interval later, not only when
            # the next row finishes (which may be minutes away)
            threading.Thread(target=self._tick, daemon=True, name="progress").start()

    def update(self, n: int = 1) -> None:
        with self._lock:
            self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        if self.enabled and n and time.monotonic() - self._last_log >= self.interval:
            self._emit()

    def _emit(self) -> None:
        with self._lock:
            now = time.monotonic()
            self._last_log, self._logged = now, self.done
            text = self.line(now)
        log.info("%s: %s", self.label, text)

    def _tick(self) -> None:
        while not self._stop.wait(self.interval):
            if self.done != self._logged and time.monotonic() - self._last_log >= self.interval:
                self._emit()

    def line(self, now: float) -> str:
        """'12/30 rows (40%), 0.52 rows/s, ETA 35s'. The rate is a moving average over the
        windows between lines: rows finish in bursts (and rows read back from the ledger all
        at once), which would make a window's rate, or the average since the start, jump."""
        t, d = self._window
        window = (self.done - d) / (now - t) if now > t else 0.0
        self._window = (now, self.done)
        rate = self._rate = window if self._rate is None else 0.3 * window + 0.7 * self._rate
        text = f"{self.done}/{self.total} rows ({self.done / self.total:.0%})" if self.total \
            else f"{self.done} rows"
        text += f", {rate:.2f} rows/s" if rate < 10 else f", {rate:.0f} rows/s"
        if self.total and rate > 0 and self.done < self.total:
            text += f", ETA {_duration((self.total - self.done) / rate)}"
        return text

    def close(self) -> None:
        self._stop.set()
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._redirect.close()


def _duration(seconds: float) -> str:
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"
