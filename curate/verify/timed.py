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

from ..isolation.freeze import cpu_seconds
from . import messages as msg
from .budget import BATCH_HOLD_S
from .correctness import IDLE_CPU, SETTLE_S, judge_call, scale
from .findings import Finding
from .timing import FETCHES, Round, credit, plan as make_plan, speed, typical_ms

HARNESS_PARTS = ("before", "after", "digest")   # Batch.harness_ms: evidence, never a verdict


def timed_rounds(row, device, cand, judge, cand_ms: list, ref_ms: list, out_bytes: int) -> None:
    cfg, rng = row.cfg, row.rng
    plan = make_plan(cand_ms, ref_ms, out_bytes, cfg.device, cfg.time_budget, cfg.min_timed,
                     cfg.max_timed, BATCH_HOLD_S)
    fetch_rounds = set(rng.sample(range(1, plan.rounds), min(FETCHES, plan.rounds - 1)))
    rounds: list[Round] = []
    idle = {"cpu_s": 0.0, "wall_s": 0.0}
    harness = {"judge": Counter(), "candidate": Counter()}   # what each side says it spent
    # a batch that takes far longer than planned holds the device alone: it is
    # the row's timeout, not every other row's wait
    cap = row.clock.budget.batch_cap(
        plan.per_batch * max(typical_ms(cand_ms), typical_ms(ref_ms)) / 1e3)
    t_start = time.monotonic()
    for r in range(plan.rounds):
        calls = [[rng.randrange(cfg.trials), scale(rng)] for _ in range(plan.per_batch)]
        order = (cand, judge) if r % 2 == 0 else (judge, cand)
        row.phase("waiting to time")
        seen = {}
        with device.gate.exclusive(), _quiet(row, {cand.pid, judge.pid}):
            row.phase("timing")
            for side in order:
                seen[side.role] = _batch(row, side, cand, calls, idle, cap)
        if r == 0:
            continue   # warm-up
        (c_wall, c_ms, c_digs, c_h), (j_wall, j_ms, _, j_h) = seen["candidate"], seen["judge"]
        harness["candidate"].update(c_h)
        harness["judge"].update(j_h)
        rounds.append(Round(ref_wall=j_wall, ref_ms=j_ms, cand_wall=c_wall, cand_ms=c_ms))
        if r in fetch_rounds:
            i = rng.randrange(plan.per_batch)
            if not judge_call(row, device, cand, judge, i, calls[i], digest=c_digs[i],
                              phase="timing"):
                return   # the judge's comparison of the pass decides it: `incorrect`
    row.res.timed_wall_s += time.monotonic() - t_start
    _decide(row, cand, rounds, idle, plan)
    timed = max(1, sum(len(r.ref_ms) for r in rounds))
    row.res.notes["timing_check"]["harness_ms_per_call"] = {   # set by _decide
        side: {k: round(v / timed, 4) for k, v in sorted(spent.items())}
        for side, spent in harness.items()}


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
                           "fetched": min(FETCHES, plan.rounds - 1), "clock": "parent"}


def _quiet(row, pids: set):
    """Every other worker stopped while a pair is timed: on the CPU, where they compete for
    the cores. On the GPU the device gate keeps other work off the device."""
    if row.cfg.device == "cpu":
        return row.run.freezer.quiet(keep=pids)
    return contextlib.nullcontext()
