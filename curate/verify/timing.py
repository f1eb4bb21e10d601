"""How a row is timed and what it is credited: pure functions of numbers (no process, no device).

The speed that decides a verdict comes from the parent's own clock. Each round, the parent times
one batch of the reference (in the judge, trusted) and one of the candidate (in its own worker);
each replies with the digests of its batch's outputs (a commitment to every output byte, checked
later against the outputs the parent fetches), so no work of a batch can be left for after the
clock stops. Per-call times reported from inside the candidate's process are evidence: they may
lower the figure, never raise it.

- The judge's batches give the harness's fixed cost per call (batch wall time minus its own
  event times) and how much that cost moves (`spread`).
- A candidate's implied per-call time is its batch wall time (at least the harness's own cost
  of its calls), over the calls, minus the judge's fixed cost (which includes the digests).
  Where its median exceeds the reported median beyond noise, every reported sample is scaled
  up to it (credited); far beyond (`TIMING_SLACK`) the row fails `timing_disagrees`.
- The speedup and the interval's low end (what keeps a row) come from the credited samples. A
  credit carries the noise of two processes' harness costs, which the judge's spread cannot
  see (on the CPU they differ by a tenth or more between process pairs), so the interval's
  high end reaches as far as the samples as reported: the interval spans what the clock
  credits and what the candidate's own events say.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

import numpy as np

from .findings import Finding

KEEP_OUTPUT_BYTES = {"cuda": 2 * 2**30, "cpu": 256 * 2**20}  # a timed batch's kept outputs
BATCH_S = {"cpu": 0.025, "cuda": 0.02}    # a timed batch lasts at least this long (seconds)
# what the harness spends per timed call besides the kernel (inputs written, cache flushed,
# outputs checked and digested), before the judge's warm-up batch has measured it: on the GPU
# it outweighs a small kernel, so a plan that left it out held the device for seconds per row
HARNESS_S = {"cpu": 5e-5, "cuda": 1.2e-3}
FETCHES = 6                               # timed calls whose outputs the judge checks, per row
# a reported time this far below the parent's clock is a lie, not noise: the row fails
TIMING_SLACK = {"cpu": (3.0, 2.0), "cuda": (3.0, 0.5)}   # (x ratio, + ms)
NOISE_SHARE = 0.1    # the clock's noise allowance, at most this share of the reported time
SLOW_FACTOR = 10.0   # a candidate 10x slower than the reference is timed with the fewest calls
# counted rounds at most: on the GPU a round's fixed cost (two batches through the device gate)
# outweighs what more than a dozen samples of a stable kernel add to its interval
MAX_ROUNDS = {"cpu": 64, "cuda": 12}
# consecutive rounds share one exclusive hold of the device up to this long (0: one round per
# hold, as on the CPU, where every other worker is frozen while a pair is timed)
GROUP_HOLD_S = {"cpu": 0.0, "cuda": 0.5}


@dataclass
class TimingPlan:
    per_batch: int
    rounds: int          # the first round warms up and is not counted
    cap: float = 0.0     # the longest one batch may take (set by the row's budget)
    harness_s: float | None = None   # the harness's cost per call it was planned with


def typical_ms(ms: list) -> float:
    """A per-call time from correctness calls (the first includes warm-up)."""
    rest = ms[1:] or ms
    return statistics.median(rest) if rest else 1.0


def plan(cand_ms: list, ref_ms: list, out_bytes: int, device: str, time_budget: float,
         min_timed: int, max_timed: int, hold_s: float,
         harness_s: float | None = None) -> TimingPlan:
    """Calls per batch and rounds: batches long enough that their fixed cost is small beside
    their calls, short enough to hold the device at most `hold_s`, within what a worker may keep
    of its outputs. A call costs its kernel plus the harness's own work (`harness_s`, measured
    by the parent on the judge's warm-up batch once there is one), and the time budget pays for
    both. A candidate far slower than its reference cannot clear any threshold: it is measured
    with the fewest calls instead of holding the device."""
    cand, ref = typical_ms(cand_ms), typical_ms(ref_ms)
    harness = HARNESS_S[device] if harness_s is None else max(0.0, harness_s)
    slower = max(cand, ref, 1e-3) / 1e3 + harness
    keep = KEEP_OUTPUT_BYTES[device]
    per_batch = max(1, min(256, math.ceil(BATCH_S[device] / slower),
                           keep // max(out_bytes, 1) if out_bytes else 256,
                           max(1, int(hold_s / (2 * slower)))))
    if cand > SLOW_FACTOR * max(ref, 1e-6):
        return TimingPlan(per_batch=1, rounds=1 + 4)
    est = (cand + ref) / 1e3 + 2 * harness
    n_total = int(min(max_timed, max(min_timed, time_budget / max(est, 1e-6))))
    return TimingPlan(per_batch=per_batch,
                      rounds=1 + max(4, min(MAX_ROUNDS[device],
                                            math.ceil(n_total / per_batch))))


def harness_per_call(wall_s: float, ms: list) -> float | None:
    """The harness's own seconds per call in a trusted batch: its wall on the parent's clock
    less the calls' event times."""
    if not ms:
        return None
    return max(0.0, (wall_s - sum(ms) / 1e3) / len(ms))


@dataclass
class Round:
    """What the parent saw of one timed round (seconds on its clock; ms as reported)."""

    ref_wall: float
    ref_ms: list
    cand_wall: float
    cand_ms: list


@dataclass
class Credit:
    ref_ms: list = field(default_factory=list)      # reference samples (trusted)
    cand_ms: list = field(default_factory=list)     # candidate samples as credited
    findings: list = field(default_factory=list)
    check: dict = field(default_factory=dict)       # the figures behind it (row notes)
    factor: float = 1.0                             # credited over reported (never below 1)


def credit(rounds: list[Round], device: str) -> Credit:
    """The samples a row's speed is computed from, after the parent's clock has had its say:
    where the clock's median per-call time exceeds the reported median beyond measured noise,
    every reported sample is scaled up to it (never down)."""
    out = Credit()
    if not rounds:
        return out
    over = [(r.ref_wall - sum(r.ref_ms) / 1e3) / max(len(r.ref_ms), 1) for r in rounds]
    overhead = statistics.median(over)
    spread = statistics.median([abs(o - overhead) for o in over])
    implied, reported = [], []
    for r in rounds:
        n = max(len(r.cand_ms), 1)
        # a batch is charged at least the harness's own cost of n calls: a worker that answers
        # without running the harness's loop gains nothing by skipping it
        wall = max(r.cand_wall, n * overhead)
        implied.append(1e3 * (wall / n - overhead))
        reported.append(sum(r.cand_ms) / n)
        out.ref_ms.extend(r.ref_ms)
    imp, rep = statistics.median(implied), statistics.median(reported)
    # noise: how much the harness's fixed cost moves, at most a tenth of the reported time (a
    # fixed cost as large as a tiny kernel's must not let a third of its time pass as noise)
    allow = min(4e3 * spread, NOISE_SHARE * rep)
    factor = max(1.0, (imp - allow) / rep) if rep > 0 else 1.0
    out.cand_ms = [ms * factor for r in rounds for ms in r.cand_ms]
    out.factor = factor
    out.check = {"reported_ms": round(rep, 5), "wall_ms": round(imp, 5),
                 "overhead_ms": round(1e3 * overhead, 5),
                 "overhead_spread_ms": round(1e3 * spread, 5),
                 "credited_factor": round(factor, 4)}
    ratio, extra = TIMING_SLACK[device]
    if imp > ratio * rep + extra + 4e3 * spread:
        out.findings.append(Finding("timing_disagrees", "fail",
                                    detail=f"reported {rep:.4g} ms/call, clock {imp:.4g}"))
    return out


def speedup_ci(ref_ms: list[float], cand_ms: list[float], *, n_boot: int = 2000,
               seed: int = 0, level: float = 0.95,
               rounds: list[tuple[list[float], list[float]]] | None = None) -> dict:
    """Median times, speedup = median(ref) / median(cand) and a percentile bootstrap interval
    (reference and candidate samples resampled independently). With `rounds` (each round's
    reference and candidate calls, timed back to back), the interval also spans a bootstrap of
    the rounds' own speedups: a machine whose load drifts from round to round (other tenants
    of a shared CPU) moves whole rounds, which call-level resampling cannot see."""
    r = np.asarray(ref_ms, dtype=np.float64)
    c = np.asarray(cand_ms, dtype=np.float64)
    if r.size == 0 or c.size == 0 or np.median(c) <= 0:
        return {"ref_ms": None, "kernel_ms": None, "speedup": None, "speedup_ci_low": None,
                "speedup_ci_high": None}
    ref_med, cand_med = float(np.median(r)), float(np.median(c))
    rng = np.random.default_rng(seed)
    rb = np.median(r[rng.integers(0, r.size, (n_boot, r.size))], axis=1)
    cb = np.median(c[rng.integers(0, c.size, (n_boot, c.size))], axis=1)
    ratios = rb / np.maximum(cb, 1e-12)
    a = (1 - level) / 2
    lo, hi = np.quantile(ratios, [a, 1 - a])
    per_round = np.asarray([np.median(rr) / np.median(cc) for rr, cc in rounds or []
                            if len(rr) and len(cc) and np.median(cc) > 0], dtype=np.float64)
    if per_round.size >= 4:
        pb = np.median(per_round[rng.integers(0, per_round.size, (n_boot, per_round.size))],
                       axis=1)
        plo, phi = np.quantile(pb, [a, 1 - a])
        lo, hi = min(lo, plo), max(hi, phi)
    return {"ref_ms": ref_med, "kernel_ms": cand_med, "speedup": ref_med / cand_med,
            "speedup_ci_low": float(lo), "speedup_ci_high": float(hi)}


def speed(rounds: list[Round], got: Credit, seed: int) -> dict:
    """The row's speed figures from its rounds and their credit: median and low end from the
    credited samples; where the clock credited more than was reported, the high end spans the
    samples as reported too (the credit's own uncertainty)."""
    credited, i = [], 0
    for r in rounds:
        credited.append((r.ref_ms, got.cand_ms[i:i + len(r.cand_ms)]))
        i += len(r.cand_ms)
    sp = speedup_ci(got.ref_ms, got.cand_ms, seed=seed, rounds=credited)
    if got.factor > 1.0 and sp["speedup"] is not None:
        reported = speedup_ci(got.ref_ms, [ms for r in rounds for ms in r.cand_ms], seed=seed,
                              rounds=[(r.ref_ms, r.cand_ms) for r in rounds])
        if reported["speedup_ci_high"] is not None:
            sp["speedup_ci_high"] = max(sp["speedup_ci_high"], reported["speedup_ci_high"])
    return sp
