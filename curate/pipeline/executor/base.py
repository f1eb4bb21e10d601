"""The executor seam: an Executor runs a build's stages; a Lane computes one stage's rows."""

from __future__ import annotations

import abc
from pathlib import Path
from typing import Callable

from ..runner import StageStats
from ..step import Outcome, Source, Step

# what a lane calls with each answer: (position of the row, its Outcome)
Emit = Callable[[tuple, Outcome], None]


class Executor(abc.ABC):
    name = "executor"

    @abc.abstractmethod
    def run(self, source: Source, steps: list[Step], out: Path, *, progress: bool,
            t0: float) -> list[StageStats]:
        """Run the source and the steps into `out` (stages/, ledger.sqlite); return every
        stage's statistics. `t0`: the build's start (time.monotonic), the timeline's zero."""

    def info(self) -> dict:
        """What stats.json records about where the build ran."""
        return {"executor": self.name}


class Lane(abc.ABC):
    """Where one stage's rows are computed. The driver hands it rows (`put`) or, for a step
    whose answer depends on every row, the whole table (`put_table`); the lane answers each
    through `emit` from any thread, and failures through `fail`."""

    def __init__(self, step: Step, emit: Emit, fail: Callable[[BaseException], None],
                 out_dir: Path):
        self.step, self.emit, self.fail, self.out_dir = step, emit, fail, out_dir

    @abc.abstractmethod
    def put(self, pos: tuple, row: dict) -> None: ...

    @abc.abstractmethod
    def put_table(self, items: list[tuple[tuple, dict]]) -> None: ...

    @abc.abstractmethod
    def close(self) -> None:
        """No more rows: finish what is in flight, then release the stage's resources."""

    @abc.abstractmethod
    def stop(self) -> None:
        """The build is cut short: release everything now."""

    def stats(self) -> dict:
        """The step's report (Step.stats()) once the lane closed; wait for it."""
        return {}
