"""Counting custom kernel launches and the ghost run, in which every launch writes garbage.

What "a custom kernel ran" means here: a Triton `JITFunction.run` / interpreter launch that was not
a warm-up, or a call into a function of a compiled extension (`load_inline`, `cpp_extension.load`,
inductor's `cpp_pybinding`), or a call of an operator from a namespace that is not PyTorch's own
(`torch.ops.myext.fn`). The ghost run makes every such launch write garbage (NaN, or the
integer minimum) into whatever it wrote and into what it returned; an output that does not
change was not computed by the custom kernels. A write is seen as a change of contents, so in the
ghost run every `torch.empty*` allocation starts poisoned too: recycled memory (the CUDA caching
allocator hands out freed blocks as they are) could otherwise already hold the very values the
launch writes, and an honest launch would look unused.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from contextlib import contextmanager

from ..digest import digest
from .state import STATE, poison_tensor, record_launch, tensors_in

_UNINITIALIZED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                  "empty_permuted"}

def _poison_fresh(func, out) -> None:
    """Poison what an uninitialized allocation returned: a block recycled from an earlier call
    must not already hold the values a launch is about to write (a write would then change
    nothing, and look like no write)."""
    name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
    if name not in _UNINITIALIZED:
        return
    for t in tensors_in(out if isinstance(out, (list, tuple)) else [out]):
        try:
            poison_tensor(t)
        except Exception:  # noqa: BLE001, S110 - sparse, quantized, meta: left as they are
            pass

def _contents(t) -> int | None:
    """A tensor's bytes as one exact digest, to see whether a launch wrote it: a copy of every
    argument of every launch would hold a second input set and output on the device during the
    ghost run. A write that keeps all of the digest's sums goes unseen and the tensor keeps its
    values: the output then looks unused, which fails the candidate, never passes it."""
    try:
        return digest([t])
    except Exception:  # noqa: BLE001 - sparse, quantized, meta: left as they are
        return None


def ghost_call(fn: Callable, args: tuple, kwargs: dict, out_names: Iterable[str] = ()):
    """Run `fn`, then poison every tensor argument it changed (and those named like outputs)
    and every tensor it returned: what a launch that computed nothing would leave behind."""
    import torch
    named = dict(kwargs)
    tensors = list(tensors_in(list(args) + list(kwargs.values())))
    before = [_contents(t) for t in tensors]
    result = fn(*args, **kwargs)
    for t, b in zip(tensors, before):
        if b is not None and _contents(t) != b:
            poison_tensor(t)
    for name in out_names:
        v = named.get(name)
        if isinstance(v, torch.Tensor):
            poison_tensor(v)
    for t in tensors_in(result if isinstance(result, (list, tuple)) else [result]):
        poison_tensor(t)
    return result

def _out_params(arg_names, args) -> list[str]:
    """Positional Triton parameters named like outputs (inductor: out_ptr0, in_out_ptr0)."""
    return [n for n in (arg_names or [])[:len(args)]
            if n.startswith(("out", "in_out", "output", "dst"))]

def wrap_triton_run(orig):
    def run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        name = getattr(getattr(self, "fn", None), "__name__", "triton_kernel")
        record_launch(f"triton:{name}")
        if STATE.ghost:
            outs = _out_params(getattr(self, "arg_names", None), args)
            kw = dict(zip(getattr(self, "arg_names", []) or [], args))
            res = ghost_call(lambda *a, **k: orig(self, *a, grid=grid, warmup=warmup, **k),
                              args, kwargs)
            import torch
            for n in outs:
                if isinstance(kw.get(n), torch.Tensor):
                    poison_tensor(kw[n])
            return res
        return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
    run.__curate_wrapped__ = True
    return run

def register_ghost_tensors(values) -> None:
    """Tensors a raw-pointer (ctypes) kernel may be handed, by data pointer."""
    for t in tensors_in(values if isinstance(values, (list, tuple)) else [values]):
        try:
            STATE.ghost_tensors[t.data_ptr()] = t
        except Exception:  # noqa: BLE001, S110
            pass

def _ghost_ctypes(call, args):
    """The ghost run of a C function called with data pointers: the tensors behind the pointers
    it changed are poisoned afterwards."""
    import torch
    targets = []
    for a in args:
        v = getattr(a, "value", a)
        t = STATE.ghost_tensors.get(v) if isinstance(v, int) else None
        if isinstance(t, torch.Tensor):
            targets.append((t, _contents(t)))
    res = call(*args)
    for t, before in targets:
        if before is not None and _contents(t) != before:
            poison_tensor(t)
    return res

def count_ctypes_library(lib) -> None:
    """Make the functions of a candidate-built ctypes library count as launches."""
    base = lib._FuncPtr

    class _Counted(base):
        __curate_wrapped__ = True
        _flags_ = base._flags_
        _restype_ = base._restype_

        def __call__(fp, *args):
            record_launch(f"ctypes:{getattr(fp, '__name__', 'kernel')}")
            if STATE.ghost:
                return _ghost_ctypes(lambda *a: base.__call__(fp, *a), args)
            return base.__call__(fp, *args)

    lib._FuncPtr = _Counted

class _KernelCallable:
    """A compiled kernel function: counted, and ghosted in the ghost run."""

    __curate_wrapped__ = True

    def __init__(self, fn, name):
        self._fn, self._name, self._label = fn, name, f"ext:{name}"

    def __call__(self, *args, **kwargs):
        record_launch(self._label)
        if STATE.ghost:
            return ghost_call(self._fn, args, kwargs)
        return self._fn(*args, **kwargs)

    def __getattr__(self, item):
        return getattr(self._fn, item)

    def __repr__(self):
        return f"<kernel {self._name}>"

class _ExtensionProxy(types.ModuleType):
    """A compiled extension module whose functions are counted (and ghosted)."""

    __curate_wrapped__ = True

    def __init__(self, mod):
        super().__init__(getattr(mod, "__name__", "extension"))
        object.__setattr__(self, "_mod", mod)

    def __getattr__(self, item):
        v = getattr(object.__getattribute__(self, "_mod"), item)
        if callable(v) and not isinstance(v, type) and not item.startswith("__"):
            v = _KernelCallable(v, f"{self.__name__}.{item}")
            # kept: the next call finds it without this lookup (inside the timed forward,
            # a new wrapper per call cost 4 us, a tenth of a small C++ kernel's time)
            object.__setattr__(self, item, v)
        return v

    def __dir__(self):
        return dir(object.__getattribute__(self, "_mod"))

def wrap_factory(orig, kind):
    def factory(*args, **kwargs):
        res = orig(*args, **kwargs)
        return wrap_kernel_object(res, kind)
    factory.__curate_wrapped__ = True
    factory.__wrapped__ = orig
    return factory

def wrap_kernel_object(obj, name="kernel"):
    """Counted/ghosted stand-in for a compiled kernel or extension module (idempotent)."""
    if obj is None or getattr(obj, "__curate_wrapped__", False):
        return obj
    if isinstance(obj, types.ModuleType):
        return _ExtensionProxy(obj)
    if callable(obj):
        return _KernelCallable(obj, getattr(obj, "__name__", name))
    return obj

_TORCH_NAMESPACES = {"aten", "prims", "inductor", "_c10d_functional", "c10d", "profiler",
                     "quantized", "_quantized", "debugprims", "_inductor_test", "higher_order",
                     "_c10d_functional_autograd", "rngprims", "fsdp", "_dtensor", "mkldnn",
                     "mkl", "onednn", "xnnpack", "quantized_decomposed", "_test", "torchvision",
                     "_caffe2", "cuda", "vllm", "triton_kernel_wrapper"}

def custom_op_mode():
    """A TorchDispatchMode that counts (and ghosts) operators of non-PyTorch namespaces."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CustomOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            ns = getattr(func, "namespace", None) or str(func).split("::")[0].split(".")[0]
            if ns not in _TORCH_NAMESPACES:
                record_launch(f"op:{func}")
                if STATE.ghost:
                    return ghost_call(func, args, kwargs)
            out = func(*args, **kwargs)
            if STATE.ghost:
                _poison_fresh(func, out)
                register_ghost_tensors(out)
            return out

    return CustomOps()

@contextmanager
def phase(name: str):
    """Attribute audit events to `name` ('candidate' or 'reference') while the block runs."""
    prev = STATE.phase
    STATE.phase = name
    try:
        yield
    finally:
        STATE.phase = prev

@contextmanager
def watch(ghost: bool = False):
    """Count custom launches (and make them write garbage when `ghost`) inside the block."""
    launches: list = []
    prev = (STATE.counting, STATE.ghost, STATE.launches)
    STATE.counting, STATE.ghost, STATE.launches = True, ghost, launches
    mode = None
    try:
        try:
            mode = custom_op_mode()
            mode.__enter__()
        except Exception:  # noqa: BLE001
            mode = None
        yield launches
    finally:
        if mode is not None:
            mode.__exit__(None, None, None)
        STATE.counting, STATE.ghost, STATE.launches = prev
