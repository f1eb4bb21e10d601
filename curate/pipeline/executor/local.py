"""The local streaming executor (the default of `curate build`): every stage runs at once on this
machine, in a thread of its own, over the rows as they arrive (Step.process_stream); the steps'
own pools (verify's per-device scheduler, synth's sandboxed workers) do the parallel work."""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path

from ..feed import Feed
from ..runner import StageStats
from ..step import Source, Step
from .base import Executor, Lane
from .driver import Driver

log = logging.getLogger("curate")


class LocalLane(Lane):
    """One stage in a thread: set up at once (its pools start while earlier stages work), fed
    rows as they come, torn down when its input ends."""

    def __init__(self, step: Step, emit, fail, out_dir: Path):
        super().__init__(step, emit, fail, out_dir)
        self.feed = Feed()
        self.positions: list[tuple] = []  # arrival index -> position
        self.tables: queue.Queue = queue.Queue()
        self._stats: dict = {}
        self.thread = threading.Thread(target=self._run, daemon=True,
                                       name=f"stage-{step.name}")
        self.thread.start()

    def put(self, pos: tuple, row: dict) -> None:
        self.positions.append(pos)
        self.feed.put(row)

    def put_table(self, items: list[tuple[tuple, dict]]) -> None:
        self.tables.put(items)

    def close(self) -> None:
        self.feed.close()
        self.tables.put(None)

    def stop(self) -> None:
        self.close()
        self.thread.join(timeout=2)
        if self.thread.is_alive():  # still in a row: end its workers now
            _teardown(self.step)

    def stats(self) -> dict:
        self.thread.join()
        return self._stats

    def _run(self) -> None:
        step = self.step
        try:
            step.bind_dir(self.out_dir)
            step.setup()
            if step.batch_size is None:
                self._tables()
            else:
                for j, outcome in step.process_stream(self.feed):
                    self.emit(self.positions[j], outcome)
        except BaseException as exc:
            self.fail(exc)
        finally:
            _teardown(step)
            self._stats = dict(step.stats() or {})

    def _tables(self) -> None:
        while (items := self.tables.get()) is not None:
            result = self.step.process([row for _, row in items])
            for j, outcome in (enumerate(result) if isinstance(result, list) else result):
                self.emit(items[j][0], outcome)


def _teardown(step: Step) -> None:
    try:
        step.teardown()
    except Exception:  # a stage that fails to clean up costs a log line, not the build
        log.exception("%s: teardown failed", step.name)


class LocalExecutor(Executor):
    name = "local"

    def run(self, source: Source, steps: list[Step], out: Path, *, progress: bool,
            t0: float) -> list[StageStats]:
        return Driver(source, steps, out, LocalLane, progress=progress, t0=t0).run()
