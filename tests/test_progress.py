"""Progress lines off a terminal: a row that finishes just after a line is shown one interval
later, not only when the next row finishes."""

from __future__ import annotations

import logging
import time

from curate.pipeline.progress import Progress


def test_finished_rows_show_within_an_interval_without_another_row(caplog):
    caplog.set_level(logging.INFO, logger="curate")
    bar = Progress("verify", total=3, interval=0.2)
    try:
        bar.update(1)            # right after the start line: too soon for a line of its own
        assert not any("1/3" in r.message for r in caplog.records)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and not any("1/3" in r.message
                                                      for r in caplog.records):
            time.sleep(0.05)
    finally:
        bar.close()
    assert any("1/3 rows" in r.message for r in caplog.records)
