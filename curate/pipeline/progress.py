"""Progress for long stages: a bar on a terminal, plain log lines otherwise."""

from __future__ import annotations

import logging
import sys
import time

log = logging.getLogger("curate")


class Progress:
    def __init__(self, label: str, total: int | None = None, enabled: bool = True):
        self.label, self.total, self.done = label, total, 0
        self._bar = None
        self._last_log = time.monotonic()
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=label, unit="row", file=sys.stderr, leave=False)
        elif enabled:
            log.info("%s: started%s", label, f" ({total} rows)" if total else "")
        self.enabled = enabled

    def update(self, n: int = 1) -> None:
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
        elif self.enabled and time.monotonic() - self._last_log > 10:
            self._last_log = time.monotonic()
            of = f"/{self.total}" if self.total else ""
            log.info("%s: %d%s rows", self.label, self.done, of)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
