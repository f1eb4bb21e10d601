"""A second opinion on a candidate: the labels of kernelguard, a static detector of kernel hacks
maintained by others (the one the GPU MODE leaderboards use). Recorded on every row, never a
gate: rows it flags that verify kept are listed on the dataset card for review.

kernelguard reads the code as text (regular expressions and Python's ast); nothing runs. It
reads it in a helper process of its own all the same: a candidate written to make its patterns
backtrack for ever costs that process (killed after `TIMEOUT_S`), never a thread of the parent.
"""

from __future__ import annotations

import atexit
import functools
import importlib.metadata
import multiprocessing
import signal
import threading

TOOL = "kernelguard"
TIMEOUT_S = 30.0
_pool = None
_lock = threading.Lock()


@functools.lru_cache(maxsize=1)
def _version() -> str | None:
    try:
        return importlib.metadata.version(TOOL)
    except importlib.metadata.PackageNotFoundError:
        return None


def analyze(code: str) -> dict:
    """kernelguard's labels of `code` (runs in the helper process)."""
    import kernelguard
    got = kernelguard.analyze_code(code, compute_structural_hash=False)
    labels = sorted({str(m.get("pattern")) for m in got.get("matched_patterns") or []
                     if m.get("pattern")})
    return {"labels": labels, "flagged": bool(got.get("should_filter")),
            "classification": got.get("classification")}


def second_opinion(code: str | None) -> dict:
    """`{"tool", "version", "labels", "flagged", "classification"}`; `available` false where
    kernelguard is not installed; `error` where it failed or timed out on this code."""
    out: dict = {"tool": TOOL, "version": _version()}
    if out["version"] is None:
        return {**out, "available": False}
    if not code:
        return {**out, "labels": [], "flagged": False}
    try:
        return {**out, **_ask(code)}
    except Exception as exc:  # noqa: BLE001 - their failure costs the label, never the row
        return {**out, "error": f"{type(exc).__name__}: {exc}"[:200]}


def _ignore_ctrl_c() -> None:
    """The helper ends with the parent (terminate, or its pipe closing), not on Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _ask(code, fn=analyze):
    """`fn(code)` in the helper process, within `TIMEOUT_S` (else the helper is killed)."""
    global _pool
    with _lock:
        if _pool is None:
            # spawn: the parent runs threads, and a fork of it would copy their locks
            _pool = multiprocessing.get_context("spawn").Pool(1, initializer=_ignore_ctrl_c)
        pool = _pool
    pending = pool.apply_async(fn, (code,))
    try:
        return pending.get(TIMEOUT_S)
    except multiprocessing.TimeoutError:
        with _lock:
            if _pool is pool:
                _pool = None
        pool.terminate()
        raise TimeoutError(f"{TOOL} took more than {TIMEOUT_S:.0f} s") from None


@atexit.register
def close() -> None:
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.terminate()
