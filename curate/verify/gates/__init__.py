"""Gates against deceptive kernels: static ones read the candidate's AST in the parent before a
row is dispatched; dynamic ones run inside the verify worker around the candidate's execution.
Every finding is `(reason, severity)`: "fail" makes the row `deceptive` (or
`degenerate_reference` for the reference gates), "warn" records the reason and lets it verify.
`PARENT_CHECKS` / `WORKER_CHECKS` plug them into verify (curate/verify/hooks.py).
See docs/threat-model.md for what each gate catches and what it cannot."""

from .checks import PARENT_CHECKS, WORKER_CHECKS
from .static import FAIL, WARN, failed, static_findings, warned

__all__ = ["FAIL", "PARENT_CHECKS", "WARN", "WORKER_CHECKS", "failed", "static_findings",
           "warned"]
