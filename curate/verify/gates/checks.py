"""The static gates as a parent check: `StaticGates.before_run` reads the candidate's AST before
anything runs. The worker's checks (dynamic gates, the reference's degeneracy) live in
curate/verify/worker/gates/.
"""

from __future__ import annotations

from .static import FAIL, static_findings


def _flag(ctx, reason: str, fatal: bool) -> None:
    """Flag, upgrading an earlier non-fatal flag of the same reason."""
    for f in ctx.flags:
        if f.reason == reason:
            f.fatal = f.fatal or fatal
            return
    ctx.flag(reason, fatal=fatal)


class StaticGates:
    name = "static"

    def before_run(self, ctx) -> None:
        for f in static_findings(ctx.kernel_code, ctx.pytorch_code):
            _flag(ctx, f.reason, f.severity == FAIL)

    def after_reference(self, ctx) -> None: ...
    def after_candidate(self, ctx) -> None: ...


PARENT_CHECKS = [StaticGates]
# the worker's checks moved to curate.verify.worker.gates; kept empty while gates/__init__.py
# (another branch's file) still imports the name
WORKER_CHECKS: list = []
