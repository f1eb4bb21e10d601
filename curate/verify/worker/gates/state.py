"""What the worker-side gates share inside one worker: the state of the launch counter, the
ghost run and the audit trail, and small tensor helpers."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

FAIL, WARN = "fail", "warn"


@dataclass
class _State:
    installed: bool = False
    counting: bool = False
    ghost: bool = False
    ghost_tensors: dict = field(default_factory=dict)
    phase: str = "idle"               # idle | reference | candidate
    launches: list = field(default_factory=list)
    violations: list = field(default_factory=list)   # (phase, reason)
    integrity: dict = field(default_factory=dict)
    raw: dict = field(default_factory=dict)        # class __dict__ entries (classmethods)
    tainted: bool = False
    last_launches: list = field(default_factory=list)
    on_violation: Any = None      # called with each reason as it is recorded


STATE = _State()
TLS = threading.local()


def record_launch(name: str) -> None:
    if STATE.counting:
        STATE.launches.append(name)


def tensors_in(values: Iterable[Any]):
    import torch
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from tensors_in(v)

def poison_tensor(t) -> None:
    import torch
    with torch.no_grad():
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.fill_(torch.iinfo(t.dtype).min if t.dtype != torch.uint8 else 255)

def flat(out) -> list:
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(flat(o))
        return res
    return []

def same(a, b) -> bool:
    """Bitwise-equal tensors (NaN equal to NaN). Equal tensors answer at once; otherwise NaN
    positions and values are compared a chunk at a time, so two multi-GiB outputs do not need
    full-size temporaries."""
    import torch

    from ..compare import chunk_of
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    if not a.dtype.is_floating_point:
        return False
    fa, fb, step = a.reshape(-1), b.reshape(-1), chunk_of(a)
    for i in range(0, fa.numel(), step):
        x, y = fa[i:i + step], fb[i:i + step]
        if not (torch.equal(torch.isnan(x), torch.isnan(y)) and
                torch.equal(torch.nan_to_num(x, nan=0.0), torch.nan_to_num(y, nan=0.0))):
            return False
    return True

def close(a, b, rtol=1e-3, atol=1e-4) -> bool:
    import torch

    from ..compare import chunk_of
    if a.shape != b.shape:
        return False
    try:  # fp32 or wider as is: a float64 copy of a multi-GB output can exhaust the GPU
        work = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
        if not (a.is_floating_point() and b.is_floating_point()):
            work = torch.float64
        fa, fb = a.reshape(-1), b.reshape(-1)   # a chunk at a time: no full-size temporaries
        step = chunk_of(fa)
        return all(bool(torch.allclose(fa[i:i + step].to(work), fb[i:i + step].to(work),
                                       rtol=rtol, atol=atol, equal_nan=True))
                   for i in range(0, fa.numel(), step))
    except Exception:  # noqa: BLE001
        return False

def sync(device):
    import torch
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()
