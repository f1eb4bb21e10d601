"""The reference's degeneracy, checked in the judge (hooks.JudgeCheck) on the outputs of the
reference's correctness calls: is the reference any test at all?"""

from __future__ import annotations

from ..compare import compare, tolerance

MOSTLY_BELOW = 0.99   # share of elements that would pass as zeros: the reference barely tests


class ReferenceDegeneracy:
    """The reference is no test when the same output passes for every call's inputs, or when
    all-zeros passes the very comparison the verdict uses (outputs below the tolerance); it
    barely tests when nearly every element would (a warning)."""

    name = "degeneracy"

    def after_reference(self, ctx) -> None:
        import torch
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
        elif floating and _share_below_tolerance(floating) > MOSTLY_BELOW:
            ctx.flag("reference_mostly_below_tolerance", status="degenerate_reference")


def _share_below_tolerance(outputs) -> float:
    small = total = 0
    for x in outputs:
        atol, rtol, _ = tolerance(x.dtype)
        total += x.numel()
        small += int((x.abs() <= atol + rtol * x.abs()).sum())
    return small / total if total else 0.0
