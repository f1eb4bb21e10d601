"""What runs inside Ray workers: a step held by an actor (set up once, rows answered as they
finish), and a whole-table step as a task. Only this file and ray_executor.py import ray.

A step travels as its recipe (pipeline/registry.make), never pickled alive: the actor makes it
again, so that pools and sandboxes are set up where they run. A row's own failure is an answer
(an Outcome), never an exception; an exception here is the step's bug or the machine's, and
the driver decides what it costs.
"""

from __future__ import annotations

import threading
from pathlib import Path

import ray

from ...isolation.board import ENV as BOARD_ENV
from ..feed import Feed
from ..registry import remake
from ..step import Outcome


# Ray sets these to the CPUs a worker asked for (1 by default): inductor would then emit
# single-threaded C++ and verify time it so. A step must see the threads it sees in a local build.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def driver_env() -> dict:
    """What the driver has of THREAD_VARS (None: not set), for the actors to take on."""
    import os
    return {k: os.environ.get(k) for k in THREAD_VARS}


def _as_driver(env: dict) -> None:
    import os
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    _join_board(env.get(BOARD_ENV))


def _join_board(name: str | None) -> None:
    """This process's background workers (a synth actor's) on the build's board of the node,
    and the ones other actors published there stopped by this process's timed batches."""
    from ...isolation.board import Board, board_dir
    from ...isolation.freeze import BACKGROUND
    if name and BACKGROUND.board is None:
        BACKGROUND.use_board(Board(board_dir(name)))


class _Waiting:
    """One row's answer to come: set by the step's thread, read by the row's call."""

    def __init__(self):
        self.done = threading.Event()
        self.outcome: Outcome | None = None
        self.error: BaseException | None = None


@ray.remote
class StepActor:
    """One stage's step, set up once (verify: one per GPU, holding that device's sandboxed
    pools); `run(row)` answers one row, and many run at once (a threaded actor), fed to the
    step's process_stream as they come."""

    def __init__(self, recipe: tuple, out_dir: str, env: dict):
        _as_driver(env)
        self.step = remake(recipe)
        self.step.bind_dir(Path(out_dir))
        self.step.setup()
        self.feed = Feed()
        self.waiting: dict[int, _Waiting] = {}
        self.lock = threading.Lock()
        self.arrived = 0
        self.thread = threading.Thread(target=self._answer, daemon=True, name="step")
        self.thread.start()

    def run(self, row: dict) -> Outcome:
        w = _Waiting()
        with self.lock:  # arrival index and feed order must agree
            self.waiting[self.arrived] = w
            self.arrived += 1
            self.feed.put(row)
        w.done.wait()
        if w.error is not None:
            raise w.error
        return w.outcome

    def _answer(self) -> None:
        try:
            for j, outcome in self.step.process_stream(self.feed):
                with self.lock:
                    w = self.waiting.pop(j)
                w.outcome = outcome
                w.done.set()
        except BaseException as exc:  # every row still waiting hears of it
            with self.lock:
                waiting, self.waiting = list(self.waiting.values()), {}
            for w in waiting:
                w.error = exc
                w.done.set()

    def ready(self) -> bool:
        return True

    def finish(self) -> dict:
        """No more rows: tear the step down; its report (Step.stats())."""
        self.feed.close()
        self.thread.join()
        try:
            return dict(self.step.stats() or {})
        finally:
            self.step.teardown()


@ray.remote
def run_table(recipe: tuple, out_dir: str, env: dict, rows: list[dict]
              ) -> tuple[list[Outcome], dict]:
    """A step whose answer depends on every row (dedup, select), over its whole table."""
    _as_driver(env)
    step = remake(recipe)
    step.bind_dir(Path(out_dir))
    step.setup()
    try:
        result = step.process(rows)
        outcomes: list[Outcome | None] = [None] * len(rows)
        for j, outcome in (enumerate(result) if isinstance(result, list) else result):
            outcomes[j] = outcome
        return outcomes, dict(step.stats() or {})
    finally:
        step.teardown()
