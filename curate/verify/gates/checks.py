"""The gates as verify checks (curate/verify/hooks.py): the harness calls these at fixed points.

Parent side (trusted): `StaticGates.before_run` reads the candidate's AST before anything runs;
`ReferenceDegeneracy.after_reference` asks whether the reference is any test at all.
Worker side (inside the candidate's sandbox): `DynamicGates` installs the launch hooks and the
audit hook before the candidate is imported, wraps its compiled kernels after, poisons free
memory before every call, and after the first trial runs the launch count, the ghost run, the
alias, stale-output, mutation and side-stream checks.
"""

from __future__ import annotations

import re

from . import dynamic
from .static import FAIL, static_findings

_CUDA_KERNEL_NAME = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                               r"(?:static\s+)?void\s+(\w+)")


def cuda_kernel_names(code: str | None) -> list[str]:
    return sorted(set(_CUDA_KERNEL_NAME.findall(code or "")))


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


class ReferenceDegeneracy:
    """The reference is no test when the same output passes for every trial's inputs, or when
    all-zeros passes the very comparison the verdict uses (outputs below the tolerance)."""

    name = "degeneracy"

    def before_run(self, ctx) -> None: ...
    def after_candidate(self, ctx) -> None: ...

    def after_reference(self, ctx) -> None:
        import torch

        from ..compare import compare
        trials = ctx.ref_outputs or []
        trials = [t for t in trials if t and all(isinstance(x, torch.Tensor) for x in t)]
        if not trials:
            return
        floating = [x for t in trials for x in t if x.is_floating_point() and x.numel()]
        if len(trials) >= 2 and all(compare(trials[0], t).ok for t in trials[1:]):
            ctx.flag("reference_ignores_inputs", fatal=True, status="degenerate_reference")
        if floating and all(compare(t, [torch.zeros_like(x) for x in t]).ok for t in trials):
            ctx.flag("reference_zero_passes_tolerance", fatal=True,
                     status="degenerate_reference")


class DynamicGates:
    name = "dynamic"

    def __init__(self):
        self.rows = 0

    def before_import(self, ctx) -> None:
        dynamic.install()
        dynamic.begin_row()
        dynamic.STATE.phase = "candidate"
        # flag at once: a refused write or socket raises inside the candidate, and the harness
        # then answers with the error and the flags gathered so far
        dynamic.STATE.on_violation = lambda reason: _flag(ctx, reason, True)
        self.checked = False

    def after_import(self, ctx) -> None:
        dynamic.instrument(ctx.cand_module, ctx.new_model)
        dynamic.poison_free_memory(ctx.device)

    def after_call(self, ctx, call) -> None:
        if not self.checked:
            self.checked = True
            self._check(ctx, call)
        self._flag_violations(ctx)
        dynamic.poison_free_memory(ctx.device, like=call.pristine)

    def before_timing(self, ctx) -> None:
        self._flag_violations(ctx)

    def after_timing(self, ctx, timing) -> None:
        self._flag_violations(ctx)

    def finish(self, ctx) -> None:
        self._flag_violations(ctx)
        for reason, severity in dynamic.integrity_findings():
            _flag(ctx, reason, severity == FAIL)
        dynamic.restore_integrity()
        dynamic.STATE.phase = "idle"
        dynamic.STATE.on_violation = None

    # -- helpers -------------------------------------------------------------------------------
    def _flag_violations(self, ctx) -> None:
        for reason, severity in dynamic.candidate_violations():
            _flag(ctx, reason, severity == FAIL)

    def _check(self, ctx, call) -> None:
        from ..harness import make_inputs
        device = ctx.device
        model, ref = ctx.new_model, ctx.ref_model
        inputs_a = call.pristine
        inputs_b = make_inputs(ctx.ref_module, (call.seed or 0) * 7 + 104729, device)
        names = cuda_kernel_names(ctx.kernel_code) if ctx.backend == "cuda" else ()
        findings = dynamic.check_candidate(model, inputs_a, inputs_b, device=device,
                                           reference=ref, cuda_kernel_names=names)
        for reason, severity in findings:
            _flag(ctx, reason, severity == FAIL)
        if any(r == "input_mutated" for r, _ in findings):
            _flag(ctx, "input_mutated", True)  # the harness records it as a warning only
        ctx.notes["custom_launches"] = dynamic.STATE.last_launches[:20]


PARENT_CHECKS = [StaticGates, ReferenceDegeneracy]
WORKER_CHECKS = [DynamicGates]
