"""The pieces of the gates' checks of one candidate (sequence.py runs them in order): the calls
the gates make, aliases, input mutation, side streams, the profiler's kernel names.

The gates call the model only through the worker's own input preparation (`GateCalls`: the
CallRunner's `inputs(k, scale)`, written in place into the buffers every call uses), never on
clones of their own: nothing in the arguments tells a gate's call from a compared or timed one.
Every gate call but the ghost run (whose outputs are garbage by design) is also compared with
the reference on the same inputs, where the reference is at hand: a candidate that computes
one way when watched and another way otherwise fails one of the two comparisons
(`gate_call_mismatch` here, the judge's comparison for the calls the parent picks).
"""

from __future__ import annotations

import time

from ..calls import overlaps
from .state import FAIL, STATE, flat, same, tensors_in


class Buffers:
    """CallRunner's preparation over given input lists (for a worker without a runner): one set
    of buffers, each call's values written into it in place (new buffers on a new layout)."""

    def __init__(self, sets: list[list]):
        self.sets = sets
        self.bufs = [_copy(x) for x in sets[0]]

    def inputs(self, k: int, scale: float = 1.0) -> list:
        import torch
        src = self.sets[k]
        if not _same_layout(self.bufs, src):
            self.bufs = [_copy(x) for x in src]
        for buf, x in zip(self.bufs, src):
            if isinstance(buf, torch.Tensor):
                buf.copy_(x)
                if scale != 1.0 and buf.is_floating_point():
                    buf.mul_(scale)
        return [b if isinstance(b, torch.Tensor) else x for b, x in zip(self.bufs, src)]

    def pristine(self, k: int, scale: float = 1.0) -> list:
        import torch
        out = []
        for x in self.sets[k]:
            y = _copy(x)
            if isinstance(y, torch.Tensor) and scale != 1.0 and y.is_floating_point():
                y.mul_(scale)
            out.append(y)
        return out


def _copy(x):
    import torch
    return x.detach().clone() if isinstance(x, torch.Tensor) else x


def _same_layout(a: list, b: list) -> bool:
    import torch
    if len(a) != len(b):
        return False
    return all(isinstance(x, torch.Tensor) == isinstance(y, torch.Tensor) and (
        not isinstance(x, torch.Tensor) or (x.shape == y.shape and x.dtype == y.dtype
                                            and x.device == y.device)) for x, y in zip(a, b))


class GateCalls:
    """The two calls the gates make, `a` and `b` as `(k, scale)`, through `inputs(k, scale)`
    (the buffers every call uses) and `pristine(k, scale)` (a separate copy)."""

    def __init__(self, inputs, pristine, a: tuple, b: tuple | None, unchanged=None):
        self._inputs, self._pristine, self._unchanged = inputs, pristine, unchanged
        self.calls = {"a": a, "b": b}

    @classmethod
    def of_lists(cls, inputs_a: list, inputs_b: list | None) -> GateCalls:
        bufs = Buffers([inputs_a] + ([inputs_b] if inputs_b is not None else []))
        return cls(bufs.inputs, bufs.pristine, (0, 1.0), (1, 1.0) if inputs_b is not None
                   else None)

    def has(self, which: str) -> bool:
        return self.calls.get(which) is not None

    def args(self, which: str) -> list:
        return self._inputs(*self.calls[which])

    def pristine(self, which: str) -> list:
        return self._pristine(*self.calls[which])

    def mutated(self, which: str, args: list, keep: list = ()) -> bool:
        """Whether call `which` changed its inputs (`args`, as the call left them): through the
        worker's `unchanged` where it has one (no second set on the device for large sets),
        else against a pristine copy."""
        if self._unchanged is not None:
            return not self._unchanged(*self.calls[which], args, keep)
        return bool(mutation_findings(self.pristine(which), args))


def alias_findings(outputs, inputs, params=(), earlier_outputs=(), ref_aliases_input=False
                   ) -> list[tuple[str, str]]:
    """Outputs must own their memory: not an input's, a parameter's, or an earlier call's."""
    out = []
    outs, ins = flat(outputs), list(tensors_in(inputs))
    if not ref_aliases_input and any(overlaps(o, i) for o in outs for i in ins):
        out.append(("output_aliases_input", FAIL))
    if any(overlaps(o, p) for o in outs for p in params):
        out.append(("output_aliases_parameter", FAIL))
    if any(overlaps(o, e) for o in outs for e in flat(list(earlier_outputs))):
        out.append(("output_reuses_earlier_output", FAIL))
    return out


def mutation_findings(before, after, ref_mutates=False) -> list[tuple[str, str]]:
    if ref_mutates:
        return []
    for b, a in zip(tensors_in(before), tensors_in(after)):
        if not same(b, a):
            return [("input_mutated", FAIL)]
    return []


def side_stream_findings(model, args_of, device, repeats=3, seen=None) -> list[tuple[str, str]]:
    """Work still running after the caller's stream finished: the output was handed back before
    it was computed (timing on the default stream would not see it). `args_of()` gives each
    call's inputs; `seen(out)` looks at each call's output."""
    import torch
    if not (str(device).startswith("cuda") and torch.cuda.is_available()):
        return []
    late = 0
    perf = STATE.integrity.get("time.perf_counter", time.perf_counter)
    for _ in range(repeats):
        x = args_of()
        torch.cuda.synchronize()
        t0 = perf()
        with torch.no_grad():
            out = model(*x)
        ev = torch.cuda.Event()
        ev.record()
        ev.synchronize()
        t1 = perf()
        torch.cuda.synchronize()
        t2 = perf()
        if (t2 - t1) > max(1e-3, 0.2 * (t1 - t0)):
            late += 1
        if seen is not None:
            seen(out)
    return [("side_stream_unsynced", FAIL)] if late == repeats else []


def profiled_kernels(model, args_of, device) -> list[str] | None:
    """Names of the device kernels one forward ran (CUDA only; None elsewhere)."""
    import torch
    if not (str(device).startswith("cuda") and torch.cuda.is_available()):
        return None
    from torch.profiler import ProfilerActivity, profile
    x = args_of()
    with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
        model(*x)
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        if getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type):
            names.append(e.name)
    return names
