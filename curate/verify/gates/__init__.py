"""The static gates: read the candidate's code in the parent before a row is dispatched (nothing
runs). Imports nothing that runs in a worker. The dynamic gates, gathered inside the candidate's
process, live in curate/verify/worker/gates/. See docs/threat-model.md for what each gate
catches and what it cannot."""

from .static import FAIL, STATIC_CHECKS, WARN, failed, static_findings, warned

__all__ = ["FAIL", "STATIC_CHECKS", "WARN", "failed", "static_findings", "warned"]
