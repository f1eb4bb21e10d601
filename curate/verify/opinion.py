"""A second opinion on a candidate: the labels of kernelguard, a static detector of kernel hacks
maintained by others (the one the GPU MODE leaderboards use). Recorded on every row, never a
gate: rows it flags that verify kept are listed on the dataset card for review.

kernelguard reads the code as text (regular expressions and Python's ast); nothing runs.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging

log = logging.getLogger("curate.verify")
TOOL = "kernelguard"


@functools.lru_cache(maxsize=1)
def _detector():
    try:
        import kernelguard
    except ImportError:
        return None
    return kernelguard


def _version() -> str | None:
    try:
        return importlib.metadata.version(TOOL)
    except importlib.metadata.PackageNotFoundError:
        return None


def second_opinion(code: str | None) -> dict:
    """`{"tool", "version", "labels", "flagged", "classification"}`; `available` false where
    kernelguard is not installed; `error` where it failed on this code."""
    out: dict = {"tool": TOOL, "version": _version()}
    kg = _detector()
    if kg is None:
        return {**out, "available": False}
    if not code:
        return {**out, "labels": [], "flagged": False}
    try:
        got = kg.analyze_code(code, compute_structural_hash=False)
    except Exception as exc:  # noqa: BLE001 - their bug costs the label, never the row
        log.warning("kernelguard failed on a row: %s", exc)
        return {**out, "error": f"{type(exc).__name__}: {exc}"[:200]}
    labels = sorted({str(m.get("pattern")) for m in got.get("matched_patterns") or []
                     if m.get("pattern")})
    return {**out, "labels": labels, "flagged": bool(got.get("should_filter")),
            "classification": got.get("classification")}
