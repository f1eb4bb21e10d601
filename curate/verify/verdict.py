"""Verdict rules: how findings and failed requests become a row's status (pure policy)."""

from __future__ import annotations

import signal

from .findings import Finding
from .result import VerifyResult, short


def fatal_finding(findings: list[Finding]) -> Finding | None:
    """The finding that decides the row: what a gate found outranks a gate that broke."""
    chosen = None
    for f in findings:
        if f.fatal and (chosen is None or (chosen.gate == "check_failed"
                                           and f.gate != "check_failed")):
            chosen = f
    return chosen


def apply_findings(findings: list[Finding], res: VerifyResult) -> bool:
    """Record every finding's reason on the row; a fatal one decides its status. True when the
    row is decided by a finding."""
    for f in findings:
        res.reason(f.reason)
    fatal = fatal_finding(findings)
    if fatal is None:
        return False
    if fatal.gate == "check_failed" and res.status == "incorrect":
        return True   # the outputs were already wrong: that verdict stands
    res.status = fatal.verdict()
    if res.status in ("deceptive", "incorrect"):
        res.correct = False
    return True


def task_failure(status: str, role: str, *, seconds: float = 0.0, exit_code: int | None = None,
                 output: str = "", error: str | None = None) -> tuple[str, list[str], str]:
    """A request the pool could not complete (the worker died, hung, flooded its output or its
    handler raised) as (status, reasons, error)."""
    if status == "timeout":
        return "timeout", [f"{role}_timeout"], \
            f"{role} did not finish within its time limit ({seconds:.0f}s)"
    if status == "output_flood":
        return "crashed", ["output_flood"], "the worker flooded its output and was killed"
    if status == "error":
        return "runtime_error", ["worker_error"], short(error) or "the worker's handler failed"
    reasons = []
    if exit_code is not None and exit_code < 0:
        try:
            reasons.append(f"signal:{signal.Signals(-exit_code).name}")
        except ValueError:
            reasons.append(f"signal:{-exit_code}")
    elif exit_code is not None:
        reasons.append(f"exit_code:{exit_code}")
    msg = f"the worker died ({role}); last output:\n{output[-1200:]}" if output \
        else f"the worker died ({role})"
    if error:
        msg = f"{msg}\n{error}"
    return "crashed", reasons, short(msg)


def judge_failure(status: str, reasons: list[str]) -> tuple[str, list[str]]:
    """The judge failing is the reference's failure, whatever the pool saw."""
    return "reference_error", [f"judge_{status}", *reasons]
