"""Run a source and a list of steps into a build directory, resumably.

Layout (DESIGN.md): stages/NN-name.parquet per stage, rejected.parquet, ledger.sqlite,
stats.json. Every stage streams its input in batches; every finished row goes to the ledger at
once; a stage that finished with the same cache key is skipped on the next run, and a stage cut
short is redone with its finished rows read back from the ledger instead of recomputed.

A stage cut short (Ctrl-C, SIGTERM, a crash) leaves the rows it finished in the ledger, no stage
output (writers write beside and rename on close) and no stage marker; whatever a SIGKILL left
half-written is removed when the stage runs again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..record import ensure_id, row_key
from ..tableio import (
    TableWriter,
    clear_leftovers,
    open_input,
    read_batches,
    required_columns,
    sibling,
)
from .ledger import Ledger
from .progress import Progress
from .step import Outcome, Source, Step

log = logging.getLogger("curate")


def cache_key(*parts) -> str:
    """A short stable hash of JSON-able parts: the key under which the ledger keeps a stage or a
    step's answers, so that changed settings or inputs are never answered from old work."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def step_id(step: Step) -> str:
    """The ledger's name for a step: its name plus the hash of its settings."""
    return f"{step.name}@{cache_key(step.name, step.config())}"


@dataclass
class StageStats:
    name: str
    rows_in: int = 0
    rows_out: int = 0
    dropped: int = 0
    computed: int = 0
    cached: int = 0
    seconds: float = 0.0
    reasons: Counter = field(default_factory=Counter)
    statuses: Counter = field(default_factory=Counter)  # every row out, ledger's included
    skipped: bool = False
    extra: dict = field(default_factory=dict)  # what the step reports (Step.stats())
    resources: dict = field(default_factory=dict)  # what the step declared it needs (Resources)
    # the timeline, in seconds since the build started: the stage began, its first and last
    # row were answered, it ended
    started: float | None = None
    first_row: float | None = None
    last_row: float | None = None
    ended: float | None = None

    def row_done(self, now: float) -> None:
        if self.first_row is None:
            self.first_row = round(now, 3)
        self.last_row = round(now, 3)

    @classmethod
    def from_json(cls, prev: dict, skipped: bool = False) -> "StageStats":
        known = {f.name for f in dataclasses.fields(cls)}
        st = cls(**{k: v for k, v in prev.items()
                    if k in known and k not in ("reasons", "statuses", "skipped")})
        st.reasons = Counter(prev.get("reasons", {}))
        st.statuses = Counter(prev.get("statuses", {}))
        st.skipped = skipped
        return st

    def to_json(self) -> dict:
        d = dict(self.__dict__)
        d["reasons"] = dict(self.reasons)
        d["statuses"] = dict(self.statuses)
        return d


class Runner:
    """Drives stages into `out_dir`; the same code serves `curate build` and single-stage commands."""

    def __init__(self, out_dir: str | Path, *, ledger_path: str | Path | None = None,
                 progress: bool = True, t0: float | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._ledger_path = ledger_path or self.out_dir / "ledger.sqlite"
        self._ledger: Ledger | None = None
        self.progress = progress
        self.stats: list[StageStats] = []
        self.t0 = time.monotonic() if t0 is None else t0  # the timeline's zero

    def clock(self) -> float:
        return time.monotonic() - self.t0

    @property
    def ledger(self) -> Ledger:
        """Opened on first use, so that a command refused for bad input leaves no ledger."""
        if self._ledger is None:
            self._ledger = Ledger(self._ledger_path)
        return self._ledger

    # -- sources -------------------------------------------------------------------------
    def run_source(self, idx: int, source: Source, out: Path, rejected: Path) -> StageStats:
        fp = cache_key(source.name, source.config())
        done = self._finished(idx, source.name, fp, out, rejected)
        if done:
            return done
        self._begin(idx, source.name, out, rejected)
        source.attach_ledger(self.ledger)
        st = StageStats(source.name, started=round(self.clock(), 3))
        t0 = time.monotonic()
        bar = Progress(f"[{idx:02d}] {source.name}", enabled=self.progress)
        with TableWriter(out) as kept, TableWriter(rejected) as dropped:
            for outcomes in source.read():
                self._tally(st, outcomes, kept, dropped, source.name)
                st.rows_in += len(outcomes)
                st.row_done(self.clock())
                bar.update(len(outcomes))
        bar.close()
        if not st.rows_in:
            log.warning("[%02d] %s: no rows were read; %s is an empty table", idx, source.name, out)
        st.seconds = time.monotonic() - t0
        st.ended = round(self.clock(), 3)
        self.ledger.mark_stage(idx, source.name, fp, st.to_json())
        self.stats.append(st)
        return st

    # -- steps ---------------------------------------------------------------------------
    def run_step(self, idx: int, step: Step, inp: Path, out: Path, rejected: Path,
                 upstream: str = "") -> StageStats:
        sid = step_id(step)
        total = open_input(inp, require=required_columns())
        fp = cache_key(sid, upstream, _file_digest(inp))
        done = self._finished(idx, step.name, fp, out, rejected)
        if done:
            return done
        if not total:
            log.warning("[%02d] %s: %s has no rows; %s will be an empty table", idx, step.name,
                        inp, out)
        self._begin(idx, step.name, out, rejected)
        st = StageStats(step.name, resources=dataclasses.asdict(step.resources),
                        started=round(self.clock(), 3))
        t0 = time.monotonic()
        bar = Progress(f"[{idx:02d}] {step.name}", total, enabled=self.progress)
        step.bind_dir(self.out_dir)
        if total:  # no workers or models for an empty table
            step.setup()
        try:
            with TableWriter(out) as kept, TableWriter(rejected) as dropped:
                for rows, keys, scope in self._batches(step, inp):
                    outcomes = self._process(step, sid, rows, keys, scope, st, bar)
                    st.rows_in += len(rows)
                    self._tally(st, outcomes, kept, dropped, step.name)
            st.extra = step_report(step.stats(), st)
        finally:
            if total:
                step.teardown()
            bar.close()
            self.ledger.commit()
        st.seconds = time.monotonic() - t0
        st.ended = round(self.clock(), 3)
        self.ledger.mark_stage(idx, step.name, fp, st.to_json())
        self.stats.append(st)
        return st

    def _batches(self, step: Step, inp: Path) -> Iterator[tuple[list[dict], list[str], str]]:
        if step.batch_size is None:
            rows = [ensure_id(r) for b in read_batches(inp, require=required_columns()) for r in b]
            keys = [row_key(r) for r in rows]
            scope = cache_key(sorted(keys))  # a whole-table step's answer depends on every row
            yield rows, keys, scope
            return
        for batch in read_batches(inp, step.batch_size):
            rows = [ensure_id(r) for r in batch]
            yield rows, [row_key(r) for r in rows], ""

    def _process(self, step: Step, sid: str, rows: list[dict], keys: list[str], scope: str,
                 st: StageStats, bar: Progress) -> list[Outcome]:
        ledger_keys = [f"{k}:{scope}" if scope else k for k in keys]
        cached = self.ledger.lookup(sid, ledger_keys) if step.cache else {}
        outcomes: list[Outcome | None] = [cached.get(k) for k in ledger_keys]
        todo = [i for i, o in enumerate(outcomes) if o is None]
        st.cached += len(rows) - len(todo)
        if len(todo) < len(rows):
            st.row_done(self.clock())
        bar.update(len(rows) - len(todo))
        if todo:
            t0 = time.monotonic()
            result = step.process([rows[i] for i in todo])
            pairs = enumerate(result) if isinstance(result, list) else result
            for j, outcome in pairs:
                i = todo[j]
                outcomes[i] = outcome
                if step.cache:
                    self.ledger.record(sid, ledger_keys[i], outcome, time.monotonic() - t0)
                st.computed += 1
                st.row_done(self.clock())
                bar.update(1)
            missing = [todo[j] for j in range(len(todo)) if outcomes[todo[j]] is None]
            if missing:
                raise RuntimeError(f"step {step.name} returned no outcome for {len(missing)} rows")
        return outcomes  # type: ignore[return-value]

    # -- shared --------------------------------------------------------------------------
    def _tally(self, st: StageStats, outcomes: list[Outcome], kept: TableWriter,
               dropped: TableWriter, stage: str) -> None:
        tally(st, outcomes, kept, dropped, stage)

    def _begin(self, idx: int, name: str, out: Path, rejected: Path) -> None:
        """Before a stage writes: forget its old marker (its files are about to change, and a
        run killed before the new marker must not pass them off as the old stage's), and remove
        what a killed writer of these files left behind."""
        self.ledger.forget_stage(idx, name)
        for path in (out, rejected):
            clear_leftovers(path.parent, path.name)

    def _finished(self, idx: int, name: str, fp: str, out: Path, rejected: Path):
        prev = self.ledger.stage_done(idx, name, fp)
        if prev is not None and out.is_file() and rejected.is_file():
            st = StageStats.from_json(prev, skipped=True)
            log.info("[%02d] %s: finished earlier, reusing %s", idx, name, out.name)
            self.stats.append(st)
            return st
        return None

    def close(self) -> None:
        if self._ledger is not None:
            self._ledger.close()


def step_report(extra: dict | None, st: StageStats) -> dict:
    """What the step reports (Step.stats()), its statuses counted over every row."""
    extra = dict(extra or {})
    if "statuses" in extra:  # the step saw only the rows it computed in this run
        extra["statuses"] = dict(st.statuses)
    return extra


def tally(st: StageStats, outcomes: list[Outcome], kept, dropped, stage: str) -> None:
    """Count `outcomes` into `st` and write their kept and dropped rows (dropped rows with their
    stage and reasons)."""
    keep_rows, drop_rows = [], []
    for o in outcomes:
        for r in o.kept:
            keep_rows.append(ensure_id(r))
        extra = [(x["row"], x["reasons"]) for x in o.also_dropped]
        for row, reasons in ([(o.dropped, o.reasons)] if o.dropped is not None else []) + extra:
            d = ensure_id(dict(row))
            d["stage"] = stage
            drop_rows.append(d)
            st.dropped += 1
            st.reasons.update(reasons or ["unspecified"])
    st.statuses.update(r["status"] for r in keep_rows + drop_rows if r.get("status"))
    st.rows_out += len(keep_rows)
    kept.write(keep_rows)
    dropped.write(drop_rows)


def _file_digest(path: Path) -> str:
    """Cheap identity of an input file: size and mtime are enough to notice a changed input."""
    s = path.stat()
    return f"{s.st_size}:{s.st_mtime_ns}"


def stage_paths(out_dir: Path, idx: int, name: str) -> tuple[Path, Path]:
    out = out_dir / "stages" / f"{idx:02d}-{name}.parquet"
    return out, sibling(out, "rejected")
