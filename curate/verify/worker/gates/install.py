"""Putting the gates in place in the candidate's worker: launch counters on Triton, compiled
extensions, ctypes libraries the candidate built and inductor's C++ kernels; the snapshot of
timers and comparison functions; the audit hook. Then, after the candidate is imported,
`instrument` wraps compiled kernels it reached by a path the hooks did not see."""

from __future__ import annotations

import os
import sys
import types

from ..memory import same_allocator_settings
from . import trust
from .audit import make_audit
from .ghost import (
    count_ctypes_library,
    wrap_factory,
    wrap_kernel_object,
    wrap_triton_run,
)
from .integrity import integrity_targets, resolve
from .state import STATE


def _hook_triton() -> None:
    try:
        from triton.runtime.jit import JITFunction
        if not getattr(JITFunction.run, "__curate_wrapped__", False):
            JITFunction.run = wrap_triton_run(JITFunction.run)
    except Exception:  # noqa: BLE001, S110 - no triton here
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        if not getattr(InterpretedFunction.run, "__curate_wrapped__", False):
            InterpretedFunction.run = wrap_triton_run(InterpretedFunction.run)
    except Exception:  # noqa: BLE001, S110
        pass


def _hook_ctypes() -> None:
    import ctypes
    if getattr(ctypes.CDLL.__init__, "__curate_wrapped__", False):
        return
    orig_init = ctypes.CDLL.__init__

    def cdll_init(self, name, *a, **k):
        orig_init(self, name, *a, **k)
        if name and trust.own_library([name], trust.WRITABLE[0]):
            count_ctypes_library(self)
    cdll_init.__curate_wrapped__ = True
    ctypes.CDLL.__init__ = cdll_init


def _hook_extensions() -> None:
    import torch.utils.cpp_extension as cx
    for name in ("load_inline", "load"):
        f = getattr(cx, name)
        if not getattr(f, "__curate_wrapped__", False):
            setattr(cx, name, wrap_factory(f, name))
    try:
        from torch._inductor import codecache as cc
        cls = cc.CppPythonBindingsCodeCache
        orig_sync = cls.load_pybinding.__func__
        orig_async = cls.load_pybinding_async.__func__

        def load_pybinding(klass, *a, **k):
            return wrap_kernel_object(orig_sync(klass, *a, **k), "cpp_kernel")

        def load_pybinding_async(klass, *a, **k):
            get = orig_async(klass, *a, **k)
            return lambda: wrap_kernel_object(get(), "cpp_kernel")

        cls.load_pybinding = classmethod(load_pybinding)
        cls.load_pybinding_async = classmethod(load_pybinding_async)
    except Exception:  # noqa: BLE001, S110
        pass


def install() -> None:
    """Hook kernel launches, the audit trail and the integrity snapshot. Idempotent.
    Must run before any candidate code is imported (timers are captured here); the trusted
    code was captured earlier, in the worker's setup (or here, in a worker without one)."""
    if STATE.installed:
        return
    import torch  # noqa: F401
    trust.capture()
    _hook_triton()
    _hook_ctypes()
    _hook_extensions()
    same_allocator_settings()
    STATE.integrity = integrity_targets()
    for k in STATE.integrity:
        owner_path, _, attr = k.rpartition(".")
        owner = resolve(owner_path)
        if isinstance(owner, type) and attr in owner.__dict__:
            STATE.raw[k] = owner.__dict__[attr]
    trust.set_writable(trust.writable_roots())
    sys.addaudithook(make_audit())
    STATE.installed = True


def _is_compiled_extension(obj) -> bool:
    if not isinstance(obj, types.ModuleType) or getattr(obj, "__curate_wrapped__", False):
        return False
    f = getattr(obj, "__file__", None) or ""
    if not f.endswith((".so", ".pyd")):
        return False
    return not trust.is_trusted(os.path.realpath(f))


def _is_compiled_function(obj) -> bool:
    if getattr(obj, "__curate_wrapped__", False):
        return False
    if isinstance(obj, types.BuiltinFunctionType):
        owner = getattr(obj, "__self__", None)
        if _is_compiled_extension(owner):
            return True
        modname = getattr(obj, "__module__", None) or ""
        mod = sys.modules.get(modname)
        return _is_compiled_extension(mod) if mod is not None else False
    try:
        import ctypes
        return isinstance(obj, ctypes._CFuncPtr)  # inductor's older CDLL kernels
    except Exception:  # noqa: BLE001
        return False

def instrument(module, model=None) -> int:
    """Wrap compiled kernels that the candidate holds in its globals or on its modules (loaded
    through a path the install() hooks did not see). Returns how many were wrapped."""
    n = 0

    def fix(container: dict):
        nonlocal n
        for k, v in list(container.items()):
            if _is_compiled_extension(v) or _is_compiled_function(v):
                container[k] = wrap_kernel_object(v, k)
                n += 1

    if module is not None:
        fix(module.__dict__ if isinstance(module, types.ModuleType) else vars(module))
    if model is not None:
        mods = list(model.modules()) if hasattr(model, "modules") else [model]
        for m in mods:
            fix(m.__dict__)
    return n
