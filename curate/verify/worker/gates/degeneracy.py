"""The reference's degeneracy, checked in the judge (hooks.JudgeCheck) on the outputs of the
reference's correctness calls: is the reference any test at all?"""

from __future__ import annotations

from ..compare import chunk_of, compare, tolerance

MOSTLY_BELOW = 0.99   # share of elements that would pass as zeros: the reference barely tests


class ReferenceDegeneracy:
    """The reference is no test when the same output passes for every call's inputs, or when
    all-zeros passes the very comparison the verdict uses (outputs below the tolerance); it
    barely tests when nearly every element would (a warning)."""

    name = "degeneracy"

    def after_reference(self, ctx) -> None:
        """One pass over the outputs (they may be computed as they are read): the first is
        kept to compare the others with; the rest is counted as it goes, chunk by chunk (no
        output-sized temporaries: multi-GiB outputs are most of the judge's memory)."""
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
            zeros_pass = zeros_pass and all(zero_passes(x) for x in t)
            for x in (x for x in t if x.is_floating_point() and x.numel()):
                total += x.numel()
                small += below_tolerance(x)
            x = t = None   # gone before the next output is computed (only `first` stays)
        if calls >= 2 and same:
            ctx.flag("reference_ignores_inputs", fatal=True, status="degenerate_reference")
        if total and zeros_pass:
            ctx.flag("reference_zero_passes_tolerance", fatal=True,
                     status="degenerate_reference")
        elif total and small / total > MOSTLY_BELOW:
            ctx.flag("reference_mostly_below_tolerance", status="degenerate_reference")


def zero_passes(x) -> bool:
    """All zeros would pass the verdict's comparison against `x`: with every relative-norm
    bound below 1 (compare.TOLERANCES), only when `x` holds nothing but zeros (a NaN or Inf the
    zeros cannot reproduce fails too)."""
    return x.numel() == 0 or not bool(x.any())


def below_tolerance(x) -> int:
    """Elements of `x` that zeros would match within the elementwise band."""
    import torch
    atol, rtol, _ = tolerance(x.dtype)
    # |x| <= atol + rtol |x|, solved for |x| (every rtol is below 1): two passes, not four;
    # an infinite element is not below it (zeros cannot reproduce it)
    bound = atol / (1.0 - rtol)
    flat, step = x.reshape(-1), chunk_of(x)
    n = torch.zeros((), dtype=torch.int64, device=x.device)   # read back once, at the end
    for i in range(0, flat.numel(), step):
        n += (flat[i:i + step].abs() <= bound).sum()
    return int(n)
