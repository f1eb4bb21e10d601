"""Steps: small units of work over batches of records (the datatrove model).

A step declares its name and the resources it needs, keeps its one-time setup apart from its
processing, and answers for every input row with an Outcome: the rows it keeps (zero, one or
several) or the row it drops with the reasons why. The runner takes care of ledger, stats,
rejected rows and resume; a step only computes.
"""

from __future__ import annotations

import abc
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..record import add_reasons


@dataclass(frozen=True)
class Resources:
    """What a step needs to run (the NeMo Curator model): CPU processes and GPUs.

    The local runner runs one stage at a time and only records it (stats.json, per stage);
    executors that place stages side by side (streaming, Ray) schedule by it.
    """

    cpus: int = 1
    gpus: int = 0


@dataclass
class Outcome:
    """A step's answer for one input row."""

    kept: list[dict] = field(default_factory=list)
    dropped: dict | None = None
    reasons: list[str] = field(default_factory=list)
    # further rows dropped for the same input row ({"row": ..., "reasons": [...]}), for steps
    # that make several rows of one (synth-llm: every sample and turn)
    also_dropped: list[dict] = field(default_factory=list)

    @classmethod
    def keep(cls, *rows: dict) -> "Outcome":
        return cls(kept=list(rows))

    @classmethod
    def drop(cls, row: dict, *reasons: str) -> "Outcome":
        add_reasons(row, *reasons)
        return cls(dropped=row, reasons=list(reasons))

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "Outcome":
        return cls(**data)


class Step(abc.ABC):
    """Base class of a pipeline step.

    Subclasses set `name`, may set `resources` and `batch_size` (None: the whole table in one
    call, for steps such as dedup whose answer depends on every row), return their settings from
    `config()` (they are part of the cache key), and implement `process`, which returns a list of
    Outcomes aligned with its input or yields `(index, Outcome)` pairs as they finish, so that the
    runner can record each finished row at once. The other methods are optional: the runner
    calls every one of them, and the defaults do nothing.
    """

    name: str = "step"
    resources: Resources = Resources()
    batch_size: int | None = 64
    cache: bool = True
    # how registry.make made the step (module, class, arguments, attributes): what a Ray actor
    # makes it again from; None for a step made directly
    recipe: tuple | None = None

    def config(self) -> dict[str, Any]:
        return {}

    def setup(self) -> None:
        """Load once per run (models, compilers, worker pools)."""

    def teardown(self) -> None:
        """Release what setup took."""

    def bind_dir(self, out_dir: Path) -> None:
        """Called before setup with the build directory, for steps that keep files of their
        own there (synth-llm's response cache)."""

    def stats(self) -> dict[str, Any]:
        """What the step reports for stats.json after the stage (counts, timings)."""
        return {}

    def split(self) -> tuple["Step", "Step"] | None:
        """Two steps that do this one's work on either side of verify, for a step that would
        otherwise hold every row back (pipeline/plan.py); None: the step runs whole."""
        return None

    @abc.abstractmethod
    def process(self, rows: list[dict]) -> list[Outcome] | Iterator[tuple[int, Outcome]]:
        """Answer every row: Outcomes aligned with `rows`, or (index, Outcome) pairs."""

    def process_stream(self, rows: Iterable[dict]) -> Iterator[tuple[int, Outcome]]:
        """Answer rows that arrive while the step runs (a streaming build hands a pipeline.feed
        .Feed): (index in arrival order, Outcome) pairs. By default the rows that have arrived
        go to `process` together, at most `batch_size` at a time; steps whose pools take rows
        one by one override it, so that no row waits for a slow neighbour's batch."""
        from .feed import batches
        start = 0
        for batch in batches(rows, self.batch_size or 64):
            result = self.process(batch)
            for j, outcome in (enumerate(result) if isinstance(result, list) else result):
                yield start + j, outcome
            start += len(batch)


class Filter(Step):
    """A step that answers keep-or-drop for each row, with a reason when it drops."""

    @abc.abstractmethod
    def keep(self, row: dict) -> tuple[bool, str | None]:
        """(True, None) to keep the row, (False, reason) to drop it."""

    def process(self, rows: list[dict]) -> list[Outcome]:
        out = []
        for row in rows:
            ok, reason = self.keep(row)
            out.append(Outcome.keep(row) if ok else Outcome.drop(row, reason or self.name))
        return out


class Source(abc.ABC):
    """The first stage: reads rows from outside (files, repos, the Hub) and yields Outcomes."""

    name: str = "source"

    def config(self) -> dict[str, Any]:
        return {}

    def attach_ledger(self, ledger: Any) -> None:
        """Called before read, for sources that record their rows in the ledger as they
        finish (scrape), so that a cut run resumes where it stopped. `ledger` is the run's
        pipeline.ledger.Ledger (not imported here: the ledger imports this module)."""

    @abc.abstractmethod
    def read(self) -> Iterable[list[Outcome]]:
        """Batches of Outcomes: the rows read, and the ones unusable as dropped rows."""
