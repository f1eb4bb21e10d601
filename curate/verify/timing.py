"""Timing: captured timers, the L2 flush and the bootstrap interval (the timed loop itself is
curate/verify/calls.py, the same in the judge and the candidate's worker).

`capture_timers()` runs in the worker before any candidate code is imported, so a candidate that
later replaces `time.perf_counter`, `torch.cuda.Event` or `torch.cuda.synchronize` does not
change what the harness measures with.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
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
