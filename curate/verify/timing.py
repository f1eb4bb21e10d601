"""Timing policy in the parent: the speedup and its bootstrap interval, a function of numbers.
(The worker's timers, L2 flush and timed loop are curate/verify/worker/clock.py and calls.py.)
"""

from __future__ import annotations

import numpy as np


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
