"""Let Triton programs that call libdevice run under the Triton interpreter (TRITON_INTERPRET=1).

Triton's `triton.language.extra.libdevice` holds stubs that a GPU backend fills in at compile
time; the interpreter (triton 3.x) leaves them empty, so an inductor kernel that calls
`libdevice.erf` or `libdevice.tanh` returns None on the CPU. `patch_libdevice()` fills the stubs
with element-wise torch implementations for the interpreter only. Call it in the process that
runs candidates on the CPU (the tests, the verify worker), before they launch; it changes nothing
on a GPU run since it refuses to act unless TRITON_INTERPRET=1.
"""

from __future__ import annotations

import os

# libdevice name -> torch function (element-wise, same semantics)
_ALIASES = {"fabs": "abs", "nearbyint": "round", "rint": "round", "llrint": "round",
            "fmod": "fmod", "pow": "pow", "powf": "pow", "div_rn": "div", "fdiv_rn": "div",
            "sqrt_rn": "sqrt", "isfinited": "isfinite", "finitef": "isfinite",
            "isinf": "isinf", "isnan": "isnan", "signbit": "signbit", "rsqrt": "rsqrt",
            "erfcinv": None, "cyl_bessel_i0": "special.i0", "cyl_bessel_i1": "special.i1",
            "j0": "special.bessel_j0", "j1": "special.bessel_j1", "y0": "special.bessel_y0",
            "y1": "special.bessel_y1", "lgamma": "lgamma", "erfinv": "erfinv", "ndtri": "special.ndtri",
            "log_ndtr": "special.log_ndtr", "gamma": None}
_INT_RESULT = {"llrint": "int64", "lrint": "int64", "ilogb": "int32"}
_done = [False]


def _torch_fn(name: str):
    import torch
    target = _ALIASES.get(name, name)
    if target is None:
        return None
    obj = torch
    for part in target.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if obj is None:
        obj = getattr(torch.special, target, None)
    if name == "cbrt":
        return lambda x: torch.sign(x) * torch.abs(x).pow(1.0 / 3.0)
    if name in ("fmax", "fmin"):
        return getattr(torch, name)
    return obj


def _wrap(name: str, fn):
    import numpy as np
    import torch
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def as_torch(v):
        if isinstance(v, tl.tensor):
            return torch.from_numpy(np.asarray(v.handle.data).copy()), v.handle.dtype
        if isinstance(v, tl.constexpr):
            v = v.value
        return torch.tensor(v), None

    def op(*args, **_):
        vals = [as_torch(a) for a in args]
        dtype = next((d for _, d in vals if d is not None), tl.float32)
        res = fn(*[v for v, _ in vals])
        if res.dtype == torch.bool:
            out_ty, data = tl.int1, res.numpy()
        elif name in _INT_RESULT:
            out_ty = getattr(tl, _INT_RESULT[name])
            data = res.numpy().astype(_INT_RESULT[name])
        else:
            out_ty = dtype
            data = res.numpy().astype(np.asarray(args[0].handle.data).dtype
                                      if isinstance(args[0], tl.tensor) else np.float32)
        data = np.ascontiguousarray(data)
        handle = TensorHandle(data, out_ty)
        shape = list(data.shape)
        block = any(isinstance(a, tl.tensor) and a.type.is_block() for a in args)
        ty = tl.block_type(out_ty, shape) if block else out_ty
        return tl.tensor(handle, ty)
    op.__name__ = name
    return op


def patch_libdevice() -> bool:
    """Fill libdevice's stubs for the interpreter; True when it did (TRITON_INTERPRET=1)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    if _done[0]:
        return True
    import inspect

    import triton.language.extra.libdevice as libdevice
    for name, stub in list(vars(libdevice).items()):
        if name.startswith("_") or not inspect.isfunction(stub):
            continue
        fn = _torch_fn(name)
        if fn is not None:
            setattr(libdevice, name, _wrap(name, fn))
    _done[0] = True
    return True
