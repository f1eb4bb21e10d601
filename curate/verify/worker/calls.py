"""The one way a model is called in verify, in the judge (reference) and in the candidate's
worker alike: so correctness calls and timed calls look the same to a candidate, and the
reference and the candidate are timed by the same code on the same inputs.

A call is `(set, scale)`: the inputs are trial input set `set` (made from its seed by
`get_inputs()`), with every floating-point tensor multiplied by `scale`, written in place into
the same buffers before every call. Values change from call to call, so no cache keyed by
pointer, by a checksum of a few elements or by call count can answer a later call with an
earlier result; both processes compute the same bits from the same rule, so the judge can
recompute any call the parent picks afterwards. One more set, `poked`, is set 0 with a single
element of each floating-point tensor moved: called right after set 0 in the same buffers,
it catches a cache keyed by the buffer and a few sampled elements, which takes it for set 0.

Worker side only (imported after the timers were captured). The gates call the model through
`CallRunner.inputs` too (CheckContext.call_inputs): same buffers, same writes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from .clock import reset_persisting_l2
from .compare import flatten_outputs
from .digest import digest


def poked(inputs: list, seed: int, in_place: bool = False) -> list:
    """`inputs` with each floating-point tensor's element picked by `seed` moved up by a quarter
    of its size plus a quarter (well past any tolerance, and never a fixed point; the same bits
    in the judge and the candidate's worker): a copy, or (`in_place`) the tensors themselves."""
    import random
    rng = random.Random(seed)
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 1:
            y = x if in_place else x.clone()
            at = tuple(int(i) for i in torch.unravel_index(
                torch.tensor(rng.randrange(y.numel())), y.shape))
            y[at] = y[at] + (y[at].abs() + 1) * 0.25
            out.append(y)
        else:
            out.append(x)
    return out


class OutputRefused(Exception):
    """The forward returned something that is not finished work (a tensor subclass, a lazy
    value) or an output that is the storage of an earlier call's output."""

    def __init__(self, reason: str, detail: str):
        super().__init__(detail)
        self.reason = reason


@dataclass
class Batch:
    ms: list[float] = field(default_factory=list)
    outputs: list[tuple[list, str]] = field(default_factory=list)   # (flat items, structure)
    # the harness's own milliseconds around the calls, summed over the batch (evidence only):
    # `before` writes the inputs, flushes and synchronizes; `after` checks and copies outputs
    harness_ms: dict = field(default_factory=lambda: {"before": 0.0, "after": 0.0})


def inputs_equal(a: list, b: list) -> bool:
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or not torch.equal(x, y):
                if not (x.is_floating_point() and torch.equal(torch.nan_to_num(x),
                                                              torch.nan_to_num(y))):
                    return False
    return True


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
    return x


def _same_layout(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype
                                            or x.device != y.device):
            return False
    return True


class CallRunner:
    """Calls `model` on variants of `base_sets` (models.InputSets: one list of inputs per trial
    seed, and the poked set)."""

    def __init__(self, model, base_sets, device: str, timers, flush=None):
        self.model, self.base, self.device = model, base_sets, device
        self.timers, self.flush = timers, flush
        # sets made again at each request are new tensors: no copy of them needed
        self.remade = bool(getattr(base_sets, "remade", False))
        self.bufs = base_sets[0] if self.remade else _clone(base_sets[0])
        self.calls = 0
        self.alive: dict[int, tuple] = {}

    def inputs(self, k: int, scale: float) -> list:
        """Write call `(k, scale)`'s inputs into the buffers (new buffers when set k's shapes
        differ) and return them. A set made again is made straight into the buffers where it
        can be (models.InputSets.write), not beside them."""
        write = getattr(self.base, "write", None) if self.remade else None
        src = write(k, self.bufs) if write is not None else None
        if src is None:
            src = self.base[k]
            if not _same_layout(self.bufs, src):
                self.bufs = src if self.remade else _clone(src)
        out = []
        for buf, x in zip(self.bufs, src):
            if isinstance(buf, torch.Tensor):
                if scale != 1.0 and buf.is_floating_point():
                    # one pass writing the scaled values (a copy then a scaling in place read
                    # and wrote the buffer twice: the same bits, twice the harness's cost);
                    # `x` is the buffer itself where the set was made into it
                    torch.mul(x, scale, out=buf)
                elif x is not buf:
                    buf.copy_(x)
                out.append(buf)
            else:
                out.append(x)
        return out

    def fresh(self, k: int, scale: float, keep: list = ()) -> list:
        """Call `(k, scale)`'s inputs for a pass that reads them and keeps none of them (the
        judge's float64 checks): for sets made again, the buffers written again, not a second
        set beside them, unless a tensor of `keep` lies in their memory; else `pristine`."""
        if self.remade and not _shares(list(keep), self.bufs):
            return self.inputs(k, scale)
        return self.pristine(k, scale)

    def unchanged(self, k: int, scale: float, args: list, keep: list = ()) -> bool:
        """Whether `args`, the buffers as a call left them, still hold call `(k, scale)`'s
        inputs. For sets made again: their digest against the digest of the buffers written
        again (no second set on the device), unless a tensor of `keep` (the call's outputs)
        lies in their memory; else a comparison with `pristine`."""
        mine = [x for x in args if isinstance(x, torch.Tensor)]
        bufs = [x for x in self.bufs if isinstance(x, torch.Tensor)]
        if self.remade and len(mine) == len(bufs) and all(a is b for a, b in zip(mine, bufs)) \
                and not _shares(list(keep), bufs):
            left = digest(mine)
            again = [x for x in self.inputs(k, scale) if isinstance(x, torch.Tensor)]
            return digest(again) == left
        return inputs_equal(args, self.pristine(k, scale))

    def pristine(self, k: int, scale: float) -> list:
        """A separate copy of call `(k, scale)`'s inputs (to see whether the call changed them)."""
        out = []
        for x in self.base[k]:
            if isinstance(x, torch.Tensor):
                if scale != 1.0 and x.is_floating_point():
                    y = x.mul_(scale) if self.remade else x * scale
                else:
                    y = x if self.remade else x.clone()
                out.append(y)
            else:
                out.append(x)
        return out

    def output(self, k: int, scale: float) -> tuple[list, str]:
        """Call `(k, scale)`'s outputs themselves, untimed (the judge's reference computed again
        to compare with: no copy beside them)."""
        args = self.inputs(int(k), float(scale))
        with torch.no_grad():
            out = self.model(*args)
        return flatten_outputs(out)

    def run(self, calls: list, keep: bool, after=None, first: int = 0) -> Batch:
        """Every call: inputs written, L2 flushed, device-wide synchronized, timed. `after(i,
        inputs, items, structure, kept copy or None)` runs between calls, outside the clock
        (`items` None where a copy was kept: the output is let go before the gates run).
        `first` > 0: these calls continue the last batch's sequence (correctness calls sent one
        at a time), whose outputs a call may not return again."""
        batch = Batch()
        cuda = self.device == "cuda"
        t = self.timers
        if first == 0:
            self.alive = {}   # storage pointer -> (call, weak reference to the output)
        alive = self.alive
        for i, (k, scale) in enumerate(calls, start=first):
            h0 = t.perf_counter()
            args = self.inputs(int(k), float(scale))
            if cuda:
                reset_persisting_l2()
                if self.flush is not None:
                    self.flush.run()
                t.cuda_synchronize()
                start, end = t.cuda_event(enable_timing=True), t.cuda_event(enable_timing=True)
                h1 = t.perf_counter()
                t.cuda_record(start)
                with torch.no_grad():
                    out = self.model(*args)
                t.cuda_synchronize()  # device-wide: side streams' work counts
                t.cuda_record(end)
                t.cuda_synchronize()
                ms = float(t.cuda_elapsed(start, end))
                h2 = t.perf_counter()
            else:
                t0 = h1 = t.perf_counter()
                with torch.no_grad():
                    out = self.model(*args)
                h2 = t.perf_counter()
                ms = (h2 - t0) * 1e3
            items, struct = flatten_outputs(out)
            del out
            plain_outputs(items)
            batch.ms.append(ms)
            self.calls += 1
            _refuse_reused(items, i, alive)
            copy = None
            if keep:
                # a copy is kept, made outside the clock; the output itself is let go, so the
                # next call allocates as it would in a loop that drops its results (keeping
                # them would make every call's allocations fresh memory, which costs eager
                # PyTorch more than a fused kernel). The batch's last output is kept itself
                # unless it lies in the inputs' memory: one output less at the worker's peak.
                last = i == first + len(calls) - 1 and not _shares(items, args)
                copy = [_kept(x, last) for x in items]
                batch.outputs.append((copy, struct))
            batch.harness_ms["before"] += (h1 - h0) * 1e3
            batch.harness_ms["after"] += (t.perf_counter() - h2) * 1e3
            if after is not None:
                if copy is not None:
                    items = None   # the gates see the kept copy: the output itself goes first
                after(i - first, args, items, struct, copy)
            del items, args  # the next call may reuse their memory, as in any loop
        return batch


def _kept(x, itself: bool):
    if not isinstance(x, torch.Tensor):
        return x
    return x.detach() if itself else x.detach().clone()


def _span(t) -> tuple[int, int] | None:
    try:
        if t.numel() == 0:
            return None
        start = t.untyped_storage().data_ptr()
        return start, start + t.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001 - not a tensor, or no storage to read
        return None


def overlaps(a, b) -> bool:
    """Whether tensors `a` and `b` lie in the same memory, in part."""
    sa, sb = _span(a), _span(b)
    return sa is not None and sb is not None and sa[0] < sb[1] and sb[0] < sa[1]


def _shares(items: list, inputs: list) -> bool:
    """Whether a tensor of `items` lies in the memory of a tensor of `inputs`."""
    return any(overlaps(x, y) for x in items if isinstance(x, torch.Tensor)
               for y in inputs if isinstance(y, torch.Tensor))


def _refuse_reused(items: list, i: int, alive: dict) -> None:
    """Call `i`'s outputs may not be the storage of an earlier call's output that is still
    alive (`alive`: storage pointer -> (call, weak reference), updated here)."""
    for x in items:
        if isinstance(x, torch.Tensor) and x.numel():
            ptr = x.untyped_storage().data_ptr()
            earlier = alive.get(ptr)
            if earlier is not None and earlier[1]() is not None and earlier[0] != i:
                raise OutputRefused(
                    "output_reused", f"call {i} returned the storage of call {earlier[0]}'s "
                    "output, still held by the candidate: outputs must be fresh work")
            alive[ptr] = (i, weakref.ref(x))


def plain_outputs(items: list) -> None:
    """Refuse outputs that are not plain, materialized tensors: a subclass or a wrapper can
    compute its values when they are read, after the clock stopped."""
    for x in items:
        if x is None or isinstance(x, (bool, int, float)):
            continue
        if type(x) is not torch.Tensor:
            raise OutputRefused("output_not_plain_tensor",
                                f"the forward returned a {type(x).__module__}."
                                f"{type(x).__qualname__}, not a torch.Tensor")
        if x.device.type == "meta" or x.layout != torch.strided:
            raise OutputRefused("output_not_plain_tensor",
                                f"the forward returned a {x.layout} tensor on {x.device}")


def output_bytes(items: list) -> int:
    return sum(x.numel() * x.element_size() for x in items if isinstance(x, torch.Tensor))
