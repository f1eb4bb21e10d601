"""A row's timing phase, driven and clocked by the parent. Each round times one batch of the
reference (judge) and one of the candidate on the same calls, alternating which goes first,
each batch alone on its device (on the CPU with every other worker stopped); each side replies
with the digests of its batch's outputs, inside the parent's clock. Calls whose
outputs are checked are picked with the run's secret after the round; the judge checks both the
output and that it is the one the candidate committed to. `timing.credit` turns what the parent
saw into the samples the speedup is computed from."""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter

from ..isolation.freeze import BACKGROUND, cpu_seconds
from . import messages as msg
from .budget import BATCH_HOLD_S
from .correctness import IDLE_CPU, SETTLE_S, judge_call, scale
from .findings import Finding
from .timing import (FETCHES, GROUP_HOLD_S, HARNESS_S, Round, credit, harness_per_call,
                     plan as make_plan, speed, typical_ms)

HARNESS_PARTS = ("before", "after", "digest")   # Batch.harness_ms: evidence, never a verdict


def timed_rounds(row, device, cand, judge, cand_ms: list, ref_ms: list, out_bytes: int) -> None:
    _Rounds(row, device, cand, judge, cand_ms, ref_ms, out_bytes).run()


class _Rounds:
    """One row's timed rounds. On the GPU, consecutive rounds share one exclusive hold of the
    device up to `GROUP_HOLD_S`, the checks of timed outputs included: each taking of the gate
    waits for every shared request in flight (a comparison, a fetch) while new ones queue, so
    a gate taken per round of a few milliseconds would cost the device far more than the
    rounds themselves."""

    def __init__(self, row, device, cand, judge, cand_ms: list, ref_ms: list, out_bytes: int):
        self.row, self.device, self.cand, self.judge = row, device, cand, judge
        self.sizes = (cand_ms, ref_ms, out_bytes)
        self.plan = _plan(row, *self.sizes, None)
        self.rounds: list[Round] = []
        self.idle = {"cpu_s": 0.0, "wall_s": 0.0}
        self.harness = {"judge": Counter(), "candidate": Counter()}   # what each side says
        self.fetch_rounds: set = set()
        self.r = 0

    def run(self) -> None:
        row, t_start = self.row, time.monotonic()
        group_s = GROUP_HOLD_S[row.cfg.device]
        while self.r < self.plan.rounds:
            row.phase("waiting to time")
            with self.device.gate.exclusive(), _quiet(row, {self.cand.pid, self.judge.pid}):
                row.phase("timing")
                t_hold = time.monotonic()
                while True:
                    t_round = time.monotonic()
                    if not self._round():
                        return   # the judge's comparison of the pass decides it: `incorrect`
                    now = time.monotonic()
                    if self.r >= self.plan.rounds or now - t_hold + (now - t_round) > group_s:
                        break
        row.res.timed_wall_s += time.monotonic() - t_start
        _decide(row, self.cand, self.rounds, self.idle, self.plan)
        timed = max(1, sum(len(r.ref_ms) for r in self.rounds))
        row.res.notes["timing_check"]["harness_ms_per_call"] = {   # set by _decide
            side: {k: round(v / timed, 4) for k, v in sorted(spent.items())}
            for side, spent in self.harness.items()}

    def _round(self) -> bool:
        """Round `r`: both sides' batches on the same calls, the candidate first on even
        rounds. False when a checked output differs from the reference's."""
        row, r, cand, judge = self.row, self.r, self.cand, self.judge
        calls = [[row.rng.randrange(row.cfg.trials), scale(row.rng)]
                 for _ in range(self.plan.per_batch)]
        seen = {side.role: _batch(row, side, cand, calls, self.idle, self.plan.cap)
                for side in ((cand, judge) if r % 2 == 0 else (judge, cand))}
        (c_wall, c_ms, c_digs, c_h), (j_wall, j_ms, _, j_h) = seen["candidate"], seen["judge"]
        self.r += 1
        if r == 0:   # warm-up: not counted; the judge's batch measures the harness's own cost
            self.plan = _plan(row, *self.sizes, harness_per_call(j_wall, j_ms))
            n = self.plan.rounds - 1
            self.fetch_rounds = set(row.rng.sample(range(1, n + 1), min(FETCHES, n)))
            return True
        self.harness["candidate"].update(c_h)
        self.harness["judge"].update(j_h)
        self.rounds.append(Round(ref_wall=j_wall, ref_ms=j_ms, cand_wall=c_wall, cand_ms=c_ms))
        if r not in self.fetch_rounds:
            return True
        i = row.rng.randrange(len(calls))
        return judge_call(row, self.device, cand, judge, i, calls[i], digest=c_digs[i],
                          phase="timing", held=True)


def _plan(row, cand_ms: list, ref_ms: list, out_bytes: int, harness_s: float | None):
    cfg = row.cfg
    plan = make_plan(cand_ms, ref_ms, out_bytes, cfg.device, cfg.time_budget, cfg.min_timed,
                     cfg.max_timed, BATCH_HOLD_S, harness_s=harness_s)
    per_call = max(typical_ms(cand_ms), typical_ms(ref_ms)) / 1e3 + (
        HARNESS_S[cfg.device] if harness_s is None else harness_s)
    # a batch that takes far longer than planned holds the device alone: it is
    # the row's timeout, not every other row's wait
    plan.cap = row.clock.budget.batch_cap(plan.per_batch * per_call)
    plan.harness_s = harness_s
    return plan


def _batch(row, side, cand, calls: list, idle: dict, cap: float
           ) -> tuple[float, list, list, dict]:
    """One side's timed batch, with the digests of its outputs, on the parent's clock. While
    the judge runs, the candidate's process must be idle (its CPU time is read from /proc)."""
    if side.role == "judge" and row.cfg.device == "cpu":
        time.sleep(SETTLE_S)   # the candidate's OpenMP threads go to sleep first
    cpu0 = cpu_seconds(cand.pid) if side.role == "judge" else None
    batch, _ = side.ask(msg.Calls(calls=calls, timed=True, keep=True), "timing", (msg.Batch,),
                        cap=cap)
    wall = side.last_wall
    if cpu0 is not None:
        cpu1 = cpu_seconds(cand.pid)
        if cpu1 is not None:
            idle["cpu_s"] += max(0.0, cpu1 - cpu0)
            idle["wall_s"] += wall
    if len(batch.ms) != len(calls) or len(batch.digests) != len(calls):
        side.take([Finding("protocol_violation", "fail",
                           detail=f"{len(batch.ms)} times and {len(batch.digests)} digests "
                                  f"for {len(calls)} calls")])
    return wall, [float(x) for x in batch.ms], list(batch.digests), said_harness(batch.harness_ms)


def said_harness(value) -> dict:
    """The parts of a side's `harness_ms` claim worth keeping as evidence: known parts with
    finite numbers (a candidate's reply may hold anything)."""
    if not isinstance(value, dict):
        return {}
    return {k: float(v) for k, v in value.items() if k in HARNESS_PARTS and
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


def _decide(row, cand, rounds: list[Round], idle: dict, plan) -> None:
    res, cfg = row.res, row.cfg
    res.notes["idle_cpu_s"] = round(idle["cpu_s"], 4)
    if idle["cpu_s"] > max(IDLE_CPU[0], IDLE_CPU[1] * idle["wall_s"]):
        cand.take([Finding("work_outside_call", "fail")])
    got = credit(rounds, cfg.device)
    res.notes["timing_check"] = got.check
    res.timed_trials = len(got.ref_ms)
    res.notes["samples_ms"] = {"ref": list(got.ref_ms), "kernel": list(got.cand_ms)}
    cand.take(got.findings)
    sp = speed(rounds, got, seed=row.rng.randrange(2**31))
    for k, v in sp.items():
        setattr(res, k, v)
    res.notes["timing"] = {"rounds": plan.rounds - 1, "per_batch": plan.per_batch,
                           "fetched": min(FETCHES, plan.rounds - 1), "clock": "parent",
                           "harness_ms": None if plan.harness_s is None
                           else round(plan.harness_s * 1e3, 4)}


@contextlib.contextmanager
def _quiet(row, pids: set):
    """Every other worker stopped while a pair is timed: on the CPU, where they compete for
    the cores (on the GPU the device gate keeps verify's other work off the device); and on
    either, the workers of other stages (BACKGROUND: a streaming build's synth workers, which
    compile on the CPU and run references on the GPU outside verify's gates)."""
    with BACKGROUND.quiet(keep=()), (row.run.freezer.quiet(keep=pids)
                                     if row.cfg.device == "cpu" else contextlib.nullcontext()):
        yield
