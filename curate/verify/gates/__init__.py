"""Gates against deceptive kernels. The static ones (static.py, read in the parent before a row
is dispatched) are importable here without anything that runs in the worker; `PARENT_CHECKS` /
`WORKER_CHECKS` (checks.py, which imports the dynamic gates) load only when asked for.
See docs/threat-model.md for what each gate catches and what it cannot."""

from .static import FAIL, STATIC_CHECKS, WARN, failed, static_findings, warned

__all__ = ["FAIL", "PARENT_CHECKS", "STATIC_CHECKS", "WARN", "WORKER_CHECKS", "failed",
           "static_findings", "warned"]


def __getattr__(name: str):
    # the hooks of the current verify read these lists; checks.py imports torch and the
    # dynamic gates, which the parent side must not load at import time
    if name in ("PARENT_CHECKS", "WORKER_CHECKS"):
        from . import checks
        return getattr(checks, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
