"""An input set made again straight into the buffers every call uses, instead of beside them:
for a row whose sets are made again at each call (multi-GiB problems), a second whole set on
the device is most of what a worker holds beyond its buffers and outputs.

`get_inputs()` runs as it always does; while it runs, a factory call (`torch.randn`, `rand`,
`randint`, `zeros`, `ones`, `full`) for the buffers' device whose result has the shape and
dtype of a buffer not yet filled fills that buffer through the call's `out=` form: the same
kernel on the same generator state, so the same bits as the plain call (and as `pristine`, which
makes the set as usual), in the judge as in the candidate's worker. `empty` is left alone:
what it holds is whatever the memory held, which a buffer would answer differently. What
`get_inputs()` returns is then settled position by position: a buffer itself stays; anything
else (a value computed from a factory's result) is copied into its position's buffer,
through a copy of its own where it lies in a buffer's memory. The buffers keep their addresses,
so a cache keyed by pointer still sees the same pointers with new values."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from .calls import overlaps

FILLS = frozenset({torch.randn, torch.rand, torch.randint, torch.zeros, torch.ones, torch.full})
# what the `out=` form takes from the tensor it fills
_FROM_OUT = ("dtype", "device", "layout", "pin_memory", "memory_format")


class IntoBuffers(TorchFunctionMode):
    """While active, factory calls fill the free buffer of their result's shape and dtype."""

    def __init__(self, bufs: list):
        super().__init__()
        self.free = [b for b in bufs if isinstance(b, torch.Tensor)]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in FILLS and "out" not in kwargs and not kwargs.get("requires_grad"):
            buf = self._claim(func, args, kwargs)
            if buf is not None:
                rest = {k: v for k, v in kwargs.items() if k not in _FROM_OUT}
                try:   # the buffer's own device named: an outer device context adds none
                    return func(*args, **rest, device=buf.device, out=buf)
                except Exception:  # noqa: BLE001 - a form `out=` refuses: made as usual
                    self.free.append(buf)
        return func(*args, **kwargs)

    def _claim(self, func, args, kwargs) -> torch.Tensor | None:
        try:   # the result's shape and dtype without making it (meta: nothing allocated)
            like = func(*args, **{**kwargs, "device": "meta"})
        except Exception:  # noqa: BLE001 - a call the meta device cannot take: made as usual
            return None
        asked = kwargs.get("device")   # none: the worker's own (the buffers' device)
        for i, b in enumerate(self.free):
            if asked is not None and torch.device(asked) != b.device:
                continue   # another device's generator: other bits
            if b.shape == like.shape and b.dtype == like.dtype and b.is_contiguous():
                return self.free.pop(i)
        return None


def distinct(bufs: list) -> bool:
    """Whether no two buffers share memory (a set that returned one tensor twice cannot be
    written into itself position by position)."""
    ts = [b for b in bufs if isinstance(b, torch.Tensor)]
    return not any(overlaps(a, b) for i, a in enumerate(ts) for b in ts[i + 1:])


def settle(got: list, bufs: list) -> list | None:
    """`got` (what get_inputs returned) written into `bufs`, position by position; the buffers
    themselves where they are tensors. None when the layouts differ (the caller makes the set
    as usual)."""
    if len(got) != len(bufs):
        return None
    for x, b in zip(got, bufs):
        if isinstance(x, torch.Tensor) != isinstance(b, torch.Tensor) or (
                isinstance(b, torch.Tensor) and (x.shape != b.shape or x.dtype != b.dtype
                                                 or x.device != b.device)):
            return None
    moved = [j for j, (x, b) in enumerate(zip(got, bufs))
             if isinstance(b, torch.Tensor) and x is not b]
    # a value in a buffer's memory is read before any buffer is written
    got = [x.clone() if j in moved and any(overlaps(x, b) for b in bufs
                                           if isinstance(b, torch.Tensor)) else x
           for j, x in enumerate(got)]
    for j in moved:
        bufs[j].copy_(got[j])
    return [b if isinstance(b, torch.Tensor) else x for x, b in zip(got, bufs)]
