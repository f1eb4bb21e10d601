"""The streaming driver: every stage at once, a row handed to the next stage as soon as its
stage answered it. Lanes (local threads, Ray actors) compute; the driver alone reads and writes
the ledger and the tables, in one thread.

A row's answer is recorded in the ledger (and committed) as it arrives, so that a build killed
at any point, SIGKILL included, resumes row by row: rows the ledger has answered are not handed
to a lane again. A step whose answer depends on every row (batch_size None: dedup, select) gets
its table when every stage before it is done, in the order a staged build would give it (the
rows' positions), so that both keep the same rows.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ...record import ensure_id, row_key
from ...tableio import TableWriter, clear_leftovers
from ..ledger import Ledger
from ..progress import Progress
from ..runner import StageStats, cache_key, stage_paths, step_id, step_report, tally
from ..step import Outcome, Source, Step
from .base import Lane

log = logging.getLogger("curate")

MakeLane = Callable[..., Lane]  # (step, emit, fail, out_dir) -> Lane


class _Buffered:
    """A TableWriter written in blocks: rows arrive one by one, a part file per row is waste."""

    def __init__(self, path: Path, size: int = 256):
        self.writer, self.size, self.rows = TableWriter(path), size, []

    def write(self, rows: list[dict]) -> None:
        self.rows += rows
        if len(self.rows) >= self.size:
            self.flush()

    def flush(self) -> None:
        self.writer.write(self.rows)
        self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()

    def abort(self) -> None:
        self.writer.abort()


@dataclass
class _Stage:
    idx: int
    step: Step | None  # None: the source
    stats: StageStats
    kept: _Buffered
    dropped: _Buffered
    bar: Progress
    sid: str = ""
    lane: Lane | None = None
    pending: dict = field(default_factory=dict)  # position -> (ledger key, handed out at)
    table: list = field(default_factory=list)    # a whole-table step's rows until its turn
    upstream_done: bool = False
    submitted: bool = False
    busy: bool = False
    done: bool = False

    @property
    def whole(self) -> bool:
        return self.step is not None and self.step.batch_size is None


class Driver:
    def __init__(self, source: Source, steps: list[Step], out: Path, make_lane: MakeLane, *,
                 progress: bool, t0: float):
        self.source, self.steps, self.out = source, steps, out
        self.make_lane, self.progress, self.t0 = make_lane, progress, t0
        self.events: queue.Queue = queue.Queue()
        self.ledger = Ledger(out / "ledger.sqlite")
        self.stages: list[_Stage] = []

    def clock(self) -> float:
        return time.monotonic() - self.t0

    def run(self) -> list[StageStats]:
        try:
            reused = self._reuse()
            if reused:
                return reused
            self._open()
            threading.Thread(target=self._read_source, daemon=True, name="source").start()
            self._loop()
            for s in self.stages[1:]:
                s.stats.extra = step_report(s.lane.stats(), s.stats)
            for s in self.stages:  # again, with what each step reported
                self._mark(s)
            return [s.stats for s in self.stages]
        except BaseException:
            for s in self.stages:
                if s.lane is not None:
                    s.lane.stop()
                if not s.done:
                    s.kept.abort()
                    s.dropped.abort()
                s.bar.close()
            raise
        finally:
            self.ledger.close()

    def _fingerprints(self) -> list[str]:
        """Each stage's marker: the source's settings and every step's up to it."""
        fps = [cache_key(self.source.name, self.source.config())]
        for step in self.steps:
            fps.append(cache_key(fps[-1], step_id(step), "streamed"))
        return fps

    def _reuse(self) -> list[StageStats] | None:
        """A build finished before with the same settings: its stages' statistics, nothing run
        (a stage missing: every stage runs, its finished rows read back from the ledger)."""
        found = []
        for idx, (step, fp) in enumerate(zip([self.source, *self.steps], self._fingerprints())):
            prev = self.ledger.stage_done(idx, step.name, fp)
            if prev is None or not all(p.is_file() for p in stage_paths(self.out, idx, step.name)):
                return None
            found.append(prev)
        log.info("every stage finished earlier with these settings: reusing them")
        return [StageStats.from_json(prev, skipped=True) for prev in found]

    def _open(self) -> None:
        clear_leftovers(self.out / "stages")
        for idx, step in enumerate([self.source, *self.steps]):
            name = step.name
            self.ledger.forget_stage(idx, name)  # a staged run must not reuse these files
            kept, dropped = stage_paths(self.out, idx, name)
            res = dataclasses.asdict(step.resources) if idx else {}
            s = _Stage(idx, step if idx else None, StageStats(name, resources=res),
                       _Buffered(kept), _Buffered(dropped),
                       Progress(f"[{idx:02d}] {name}", enabled=self.progress))
            if idx:
                s.sid = step_id(step)
                s.lane = self.make_lane(step, self._emitter(idx), self._failer(idx), self.out)
            self.stages.append(s)
        self.stages[0].stats.started = round(self.clock(), 3)

    def _emitter(self, idx: int):
        return lambda pos, outcome: self.events.put(("row", idx, pos, outcome))

    def _failer(self, idx: int):
        return lambda exc: self.events.put(("fail", idx, None, exc))

    def _read_source(self) -> None:
        ledger = Ledger(self.out / "ledger.sqlite")  # sqlite: a connection per thread
        try:
            self.source.attach_ledger(ledger)
            n = 0
            for outcomes in self.source.read():
                for o in outcomes:
                    self.events.put(("row", 0, (n,), o))
                    n += 1
            self.events.put(("end", 0, None, None))
        except BaseException as exc:
            self.events.put(("fail", 0, None, exc))
        finally:
            ledger.close()

    def _loop(self) -> None:
        while not self.stages[-1].done:
            kind, idx, pos, payload = self.events.get()
            if kind == "fail":  # the step's own error, as a staged build would raise it
                if isinstance(payload, Exception):
                    log.error("[%02d] %s failed: %r", idx, self.stages[idx].stats.name, payload)
                raise payload
            if kind == "end":
                self.stages[0].upstream_done = True
                self._check(0)
            else:
                self._answer(idx, pos, payload, computed=True)

    def _answer(self, idx: int, pos: tuple, outcome: Outcome, computed: bool) -> None:
        s = self.stages[idx]
        if s.step is None:
            s.stats.rows_in += 1
        elif computed:
            key, t = s.pending.pop(pos)
            s.stats.computed += 1
            if s.step.cache:
                self.ledger.record(s.sid, key, outcome, time.monotonic() - t)
                self.ledger.commit()  # a SIGKILL loses no answered row
        s.stats.row_done(self.clock())
        s.bar.update(1)
        tally(s.stats, [outcome], s.kept, s.dropped, s.stats.name)
        for j, row in enumerate(outcome.kept):
            self._route(idx + 1, (*pos, j), row)
        self._check(idx)

    def _route(self, idx: int, pos: tuple, row: dict) -> None:
        if idx >= len(self.stages):
            return
        s = self.stages[idx]
        row = ensure_id(row)
        if s.whole:
            s.table.append((pos, row))
            return
        if s.stats.started is None:
            s.stats.started = round(self.clock(), 3)
        s.stats.rows_in += 1
        key = row_key(row)
        hit = self.ledger.lookup(s.sid, [key]).get(key) if s.step.cache else None
        if hit is not None:
            s.stats.cached += 1
            self._answer(idx, pos, hit, computed=False)
            return
        s.pending[pos] = (key, time.monotonic())
        s.lane.put(pos, row)

    def _check(self, idx: int) -> None:
        """Finish stage `idx` if nothing more can reach it; a whole-table step first gets its
        table."""
        s = self.stages[idx]
        if s.done or s.busy or not s.upstream_done or s.pending:
            return
        if s.whole and not s.submitted:
            s.submitted = True
            self._submit_table(s)
            if s.pending:
                return
        self._finish(s)

    def _submit_table(self, s: _Stage) -> None:
        s.stats.started = round(self.clock(), 3)  # it could not start before its table
        items = sorted(s.table, key=lambda t: t[0])  # the staged build's order
        s.table = []
        keys = [row_key(r) for _, r in items]
        scope = cache_key(sorted(keys))  # a whole-table step's answer depends on every row
        lkeys = [f"{k}:{scope}" for k in keys]
        s.stats.rows_in += len(items)
        cached = self.ledger.lookup(s.sid, lkeys) if s.step.cache else {}
        todo = []
        s.busy = True
        now = time.monotonic()
        for (pos, row), lk in zip(items, lkeys):
            if lk in cached:
                s.stats.cached += 1
                self._answer(s.idx, pos, cached[lk], computed=False)
            else:
                s.pending[pos] = (lk, now)
                todo.append((pos, row))
        s.busy = False
        if todo:
            s.lane.put_table(todo)

    def _mark(self, s: _Stage) -> None:
        self.ledger.mark_stage(s.idx, s.stats.name, self._fingerprints()[s.idx],
                               s.stats.to_json())

    def _finish(self, s: _Stage) -> None:
        s.done = True
        s.stats.ended = round(self.clock(), 3)
        s.stats.seconds = round(s.stats.ended - (s.stats.started or s.stats.ended), 3)
        s.kept.close()
        s.dropped.close()
        s.bar.close()
        if s.lane is not None:
            s.lane.close()
        if s.step is None and not s.stats.rows_in:
            log.warning("[00] %s: no rows were read", s.stats.name)
        self._mark(s)
        if s.idx + 1 < len(self.stages):
            self.stages[s.idx + 1].upstream_done = True
            if self.stages[s.idx + 1].stats.started is None:
                self.stages[s.idx + 1].stats.started = round(self.clock(), 3)
            self._check(s.idx + 1)
