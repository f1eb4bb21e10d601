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
        """One pass over the outputs (they may be computed as they are read): the first is
        kept to compare the others with; the rest is counted as it goes."""
        import torch
        first, calls, same, zeros_pass = None, 0, True, True
        small = total = 0
        for t in ctx.ref_outputs or []:
            if not t or not all(isinstance(x, torch.Tensor) for x in t):
                continue
            calls += 1
            if first is None:
                first = t
            elif same:
                same = compare(first, t).ok
            if zeros_pass:
                zeros_pass = compare(t, [torch.zeros_like(x) for x in t]).ok
            for x in (x for x in t if x.is_floating_point() and x.numel()):
                atol, rtol, _ = tolerance(x.dtype)
                total += x.numel()
                small += int((x.abs() <= atol + rtol * x.abs()).sum())
        if calls >= 2 and same:
            ctx.flag("reference_ignores_inputs", fatal=True, status="degenerate_reference")
        if total and zeros_pass:
            ctx.flag("reference_zero_passes_tolerance", fatal=True,
                     status="degenerate_reference")
        elif total and small / total > MOSTLY_BELOW:
            ctx.flag("reference_mostly_below_tolerance", status="degenerate_reference")
