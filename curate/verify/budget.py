"""The time a row may take, phase by phase, all derived from `--timeout` (pure policy).

A row's own work is bounded: each request gets the smaller of its phase's budget and what is
left of the row's deadline. Time spent waiting for the device, for memory or for a worker slot
is not the row's own work and never counts (a row's limit counts only its own work). Untrusted
code never runs under the compiler's limit: the compile phase gets `timeout` for the candidate's
Python plus, on top, only the seconds a compiler process really ran (observed by the parent from
/proc), up to `compile_timeout`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

PHASES = ("compile", "load", "correctness", "timing", "verdict")
# the row's deadline, in multiples of --timeout (its phases together may not use more)
ROW_DEADLINE = 3.0
# the timing phase keeps the device to itself per batch at most this long, so that a candidate
# whose calls are slow cannot hold the exclusive gate while every other row waits
BATCH_HOLD_S = 10.0
# a timed request may take this many times its plan before the row ends `timeout`, and never
# less than a quarter of --timeout within these bounds: a loaded machine (a CI host, OpenMP
# threads that outnumber the cores) slows a planned 20 ms batch past a few seconds
BATCH_CAP_FACTOR, BATCH_CAP_FLOOR_S = 10.0, (5.0, 30.0)


@dataclass(frozen=True)
class Budget:
    timeout: float
    compile_timeout: float

    def phase(self, name: str) -> float:
        if name not in PHASES:
            raise ValueError(f"unknown phase {name!r}")
        return self.timeout * (0.5 if name == "verdict" else 1.0)

    def batch_cap(self, planned_s: float) -> float:
        """The limit of one timed batch planned to take `planned_s`: the device is held alone
        that long at most, far less than the timing phase's budget."""
        low, high = BATCH_CAP_FLOOR_S
        return max(min(high, max(low, self.timeout / 4)), BATCH_CAP_FACTOR * planned_s)

    @property
    def deadline(self) -> float:
        return ROW_DEADLINE * self.timeout

    @property
    def compiler_grace(self) -> float:
        return self.compile_timeout


@dataclass
class RowClock:
    """What one row has spent of its deadline (its own requests only)."""

    budget: Budget
    spent: float = 0.0
    by_phase: dict = field(default_factory=dict)

    def left(self) -> float:
        return self.budget.deadline - self.spent

    def limit(self, phase: str) -> float:
        """The time limit of the next request of `phase`: what is left of the phase's budget,
        never more than what is left of the row's deadline."""
        left_in_phase = self.budget.phase(phase) - self.by_phase.get(phase, 0.0)
        return max(0.0, min(left_in_phase, self.left()))

    def deadline_binds(self, phase: str, cap: float | None = None) -> bool:
        """Whether the row's deadline, not the phase's budget or `cap`, sets the next request's
        limit: a request that times out under it ran out of the row's time, which earlier
        passes may have spent."""
        left_in_phase = self.budget.phase(phase) - self.by_phase.get(phase, 0.0)
        return self.left() < (left_in_phase if cap is None else min(left_in_phase, cap))

    def charge(self, phase: str, seconds: float) -> None:
        self.spent += max(0.0, seconds)
        self.by_phase[phase] = self.by_phase.get(phase, 0.0) + max(0.0, seconds)

    def next_pass(self) -> PassClock:
        """The clock of a later pass of this row (its second shape): each phase's budget whole
        again, the row's deadline shared."""
        return PassClock(self.budget, row=self)

    @property
    def over(self) -> bool:
        return self.left() <= 0.0


@dataclass
class PassClock(RowClock):
    """A later pass of a row: its own phase budgets (a second shape's correctness must not
    time out on what the first pass spent), within what is left of the row's deadline; what
    it spends, the row has spent."""

    row: RowClock | None = None

    def left(self) -> float:
        return self.row.left()

    def charge(self, phase: str, seconds: float) -> None:
        super().charge(phase, seconds)
        self.row.spent += max(0.0, seconds)
