"""Timing: captured timers, L2 flush, interleaved trials adapted to a budget, bootstrap interval.

`capture_timers()` runs in the worker before any candidate code is imported, so a candidate that
later replaces `time.perf_counter`, `torch.cuda.Event` or `torch.cuda.synchronize` does not
change what the harness measures with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Timers:
    perf_counter: Callable[[], float]
    cuda_event: Callable | None = None
    cuda_synchronize: Callable | None = None
    cuda_elapsed: Callable | None = None
    cuda_record: Callable | None = None


def capture_timers() -> Timers:
    t = Timers(perf_counter=time.perf_counter)
    try:
        import torch
        ev = torch.cuda.Event
        t.cuda_event = ev
        t.cuda_synchronize = torch.cuda.synchronize
        t.cuda_elapsed = ev.elapsed_time
        t.cuda_record = ev.record
    except Exception:
        pass
    return t


@dataclass
class TimingResult:
    ref_ms: list[float] = field(default_factory=list)
    cand_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0      # wall time spent in timed trials (warm-up and flushes included)
    clock: str = "cuda_events"


class L2Flush:
    """A device buffer of at least twice the L2 size; `run()` reads all of it."""

    def __init__(self, device: str = "cuda"):
        import torch
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
        n = max(2 * l2, 64 * 2**20) // 4
        self.buf = torch.ones(n, dtype=torch.float32, device=device)
        self.sink = torch.empty((), dtype=torch.float32, device=device)

    def run(self) -> None:
        import torch
        torch.sum(self.buf, dim=0, out=self.sink)


def time_cuda(ref_fn: Callable[[], object], cand_fn: Callable[[], object], timers: Timers,
              flush: L2Flush | None, *, budget_s: float = 0.5, min_trials: int = 20,
              max_trials: int = 1000, warmup: int = 3) -> TimingResult:
    """Reference and candidate alternate (order flipped every round) on the same inputs, each
    call bracketed by device-wide synchronization and CUDA events after an L2 flush. The end
    event is recorded after a device-wide synchronize, so work on side streams counts; the few
    microseconds this adds fall on both sides alike (a conservative bias for tiny kernels)."""
    sync, Event, elapsed, record = (timers.cuda_synchronize, timers.cuda_event,
                                    timers.cuda_elapsed, timers.cuda_record)
    res = TimingResult(clock="cuda_events")
    t_wall = timers.perf_counter()

    def one(fn) -> float:
        if flush is not None:
            flush.run()
        start, end = Event(enable_timing=True), Event(enable_timing=True)
        sync()
        record(start)
        fn()
        sync()  # device-wide: work the call left on any stream ends before the end event
        record(end)
        sync()
        return float(elapsed(start, end))

    for _ in range(warmup):
        one(ref_fn)
        one(cand_fn)
    probe_r, probe_c = one(ref_fn), one(cand_fn)
    per_round = (probe_r + probe_c) / 1e3 + 2e-4  # seconds, with sync overhead
    n = int(min(max_trials, max(min_trials, budget_s / max(per_round, 1e-6))))
    for i in range(n):
        if i % 2 == 0:
            res.ref_ms.append(one(ref_fn))
            res.cand_ms.append(one(cand_fn))
        else:
            res.cand_ms.append(one(cand_fn))
            res.ref_ms.append(one(ref_fn))
    res.wall_s = timers.perf_counter() - t_wall
    return res


def time_cpu(ref_fn: Callable[[], object], cand_fn: Callable[[], object], timers: Timers, *,
             budget_s: float = 1.0, min_trials: int = 20, max_trials: int = 1000,
             warmup: int = 2) -> TimingResult:
    """Wall-clock timing for CPU kernels: the same interleaving, perf_counter instead of events."""
    clock = timers.perf_counter
    res = TimingResult(clock="perf_counter")
    t_wall = clock()

    def one(fn) -> float:
        t0 = clock()
        fn()
        return (clock() - t0) * 1e3

    for _ in range(warmup):
        one(ref_fn)
        one(cand_fn)
    probe_r, probe_c = one(ref_fn), one(cand_fn)
    per_round = (probe_r + probe_c) / 1e3
    n = int(min(max_trials, max(min_trials, budget_s / max(per_round, 1e-6))))
    for i in range(n):
        if i % 2 == 0:
            res.ref_ms.append(one(ref_fn))
            res.cand_ms.append(one(cand_fn))
        else:
            res.cand_ms.append(one(cand_fn))
            res.ref_ms.append(one(ref_fn))
    res.wall_s = clock() - t_wall
    return res


def speedup_ci(ref_ms: list[float], cand_ms: list[float], *, n_boot: int = 2000,
               seed: int = 0, level: float = 0.95) -> dict:
    """Median times, speedup = median(ref) / median(cand) and a percentile bootstrap interval
    (reference and candidate samples resampled independently)."""
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
    return {"ref_ms": ref_med, "kernel_ms": cand_med, "speedup": ref_med / cand_med,
            "speedup_ci_low": float(lo), "speedup_ci_high": float(hi)}
