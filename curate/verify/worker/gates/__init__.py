"""The worker side's gates: the dynamic gates in the candidate's worker (dynamic.py and what it
runs), the reference's degeneracy in the judge (degeneracy.py). `WORKER_CHECKS` /
`JUDGE_CHECKS` plug them into the worker (curate/verify/worker/hooks.py); `setup()` runs in
every verify worker's setup, before any program is loaded.
See docs/threat-model.md for what each gate catches and what it cannot."""

from __future__ import annotations

from .degeneracy import ReferenceDegeneracy
from .dynamic import DynamicGates

WORKER_CHECKS: list = [DynamicGates]
JUDGE_CHECKS: list = [ReferenceDegeneracy]


def setup() -> None:
    """Record the trusted code (by identity, now: nothing untrusted has run) and allocate host
    memory alike in the judge and the candidate's worker."""
    from ..memory import same_allocator_settings
    from .trust import capture
    capture()
    same_allocator_settings()
