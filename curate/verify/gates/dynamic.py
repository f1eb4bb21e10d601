"""Dynamic gates: checks that run inside the verify worker, around the candidate's real execution.

Call order in a worker (each piece also works on its own):

    dynamic.install()                      # once, BEFORE any candidate code is imported
    mod = <import the candidate>; model = mod.ModelNew(*init)
    dynamic.instrument(mod, model)         # wrap extension modules / compiled kernels it holds
    dynamic.poison_free_memory(device)     # before every candidate run: recycled memory is NaN
    ... the harness's correctness trials ...
    findings = dynamic.check_candidate(model, inputs_a, inputs_b, device=device)
    findings += dynamic.degeneracy_findings(ref_outputs_per_trial, atol, rtol)   # reference side

Every finding is `(reason, severity)`, severity "fail" (status `deceptive`, or
`degenerate_reference` for the reference gates) or "warn".

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

import builtins
import math
import re
import os
import sys
import sysconfig
import threading
import time
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

FAIL, WARN = "fail", "warn"

# -- shared state of one worker ----------------------------------------------------------------


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
    trusted_roots: tuple = ()
    stdlib_roots: tuple = ()
    raw: dict = field(default_factory=dict)        # class __dict__ entries (classmethods)
    tainted: bool = False
    last_launches: list = field(default_factory=list)
    on_violation: Any = None      # called with each reason as it is recorded
    writable: tuple = ()


STATE = _State()
_tls = threading.local()


def _record_launch(name: str) -> None:
    if STATE.counting:
        STATE.launches.append(name)


# -- ghost: make a launch write garbage --------------------------------------------------------

def _tensors_in(values: Iterable[Any]):
    import torch
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors_in(v)


def _poison_tensor(t) -> None:
    import torch
    with torch.no_grad():
        if t.dtype.is_floating_point or t.dtype.is_complex:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.logical_not_()
        else:
            t.fill_(torch.iinfo(t.dtype).min if t.dtype != torch.uint8 else 255)


# aten allocations whose contents are undefined: in the ghost run they start poisoned
_UNINITIALIZED = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                  "empty_permuted"}


def _poison_fresh(func, out) -> None:
    """Poison what an uninitialized allocation returned: a block recycled from an earlier call
    must not already hold the values a launch is about to write (a write would then change
    nothing, and look like no write)."""
    name = getattr(getattr(func, "overloadpacket", None), "__name__", "")
    if name not in _UNINITIALIZED:
        return
    for t in _tensors_in(out if isinstance(out, (list, tuple)) else [out]):
        try:
            _poison_tensor(t)
        except Exception:  # noqa: BLE001 - sparse, quantized, meta: left as they are
            pass


def _ghost_call(fn: Callable, args: tuple, kwargs: dict, out_names: Iterable[str] = ()):
    """Run `fn`, then poison every tensor argument it changed (and those named like outputs)
    and every tensor it returned: what a launch that computed nothing would leave behind."""
    import torch
    named = dict(kwargs)
    tensors = list(_tensors_in(list(args) + list(kwargs.values())))
    before = []
    for t in tensors:
        try:
            before.append(t.detach().clone())
        except Exception:  # noqa: BLE001
            before.append(None)
    result = fn(*args, **kwargs)
    for t, b in zip(tensors, before):
        if b is None:
            continue
        try:
            changed = not torch.equal(t, b) if not (t.dtype.is_floating_point) else \
                not torch.equal(torch.nan_to_num(t, nan=1.2345), torch.nan_to_num(b, nan=1.2345))
        except Exception:  # noqa: BLE001
            changed = True
        if changed:
            _poison_tensor(t)
    for name in out_names:
        v = named.get(name)
        if isinstance(v, torch.Tensor):
            _poison_tensor(v)
    for t in _tensors_in(result if isinstance(result, (list, tuple)) else [result]):
        _poison_tensor(t)
    return result


def _out_params(arg_names, args) -> list[str]:
    """Positional Triton parameters named like outputs (inductor: out_ptr0, in_out_ptr0)."""
    return [n for n in (arg_names or [])[:len(args)]
            if n.startswith(("out", "in_out", "output", "dst"))]


def _wrap_triton_run(orig):
    def run(self, *args, grid, warmup, **kwargs):
        if warmup:
            return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
        name = getattr(getattr(self, "fn", None), "__name__", "triton_kernel")
        _record_launch(f"triton:{name}")
        if STATE.ghost:
            outs = _out_params(getattr(self, "arg_names", None), args)
            kw = dict(zip(getattr(self, "arg_names", []) or [], args))
            res = _ghost_call(lambda *a, **k: orig(self, *a, grid=grid, warmup=warmup, **k),
                              args, kwargs)
            import torch
            for n in outs:
                if isinstance(kw.get(n), torch.Tensor):
                    _poison_tensor(kw[n])
            return res
        return orig(self, *args, grid=grid, warmup=warmup, **kwargs)
    run.__curate_wrapped__ = True
    return run


def _register_ghost_tensors(values) -> None:
    """Tensors a raw-pointer (ctypes) kernel may be handed, by data pointer."""
    for t in _tensors_in(values if isinstance(values, (list, tuple)) else [values]):
        try:
            STATE.ghost_tensors[t.data_ptr()] = t
        except Exception:  # noqa: BLE001
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
            targets.append((t, t.detach().clone()))
    res = call(*args)
    for t, before in targets:
        same = _same(t, before)
        if not same:
            _poison_tensor(t)
    return res


def _count_ctypes_library(lib) -> None:
    """Make the functions of a candidate-built ctypes library count as launches."""
    base = lib._FuncPtr

    class _Counted(base):
        __curate_wrapped__ = True
        _flags_ = base._flags_
        _restype_ = base._restype_

        def __call__(fp, *args):
            _record_launch(f"ctypes:{getattr(fp, '__name__', 'kernel')}")
            if STATE.ghost:
                return _ghost_ctypes(lambda *a: base.__call__(fp, *a), args)
            return base.__call__(fp, *args)

    lib._FuncPtr = _Counted


class _KernelCallable:
    """A compiled kernel function: counted, and ghosted in the ghost run."""

    __curate_wrapped__ = True

    def __init__(self, fn, name):
        self._fn, self._name = fn, name

    def __call__(self, *args, **kwargs):
        _record_launch(f"ext:{self._name}")
        if STATE.ghost:
            return _ghost_call(self._fn, args, kwargs)
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
            return _KernelCallable(v, f"{self.__name__}.{item}")
        return v

    def __dir__(self):
        return dir(object.__getattribute__(self, "_mod"))


def _wrap_factory(orig, kind):
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


# -- custom operator namespaces (torch.ops.myext.fn) ---------------------------------------------

_TORCH_NAMESPACES = {"aten", "prims", "inductor", "_c10d_functional", "c10d", "profiler",
                     "quantized", "_quantized", "debugprims", "_inductor_test", "higher_order",
                     "_c10d_functional_autograd", "rngprims", "fsdp", "_dtensor", "mkldnn",
                     "mkl", "onednn", "xnnpack", "quantized_decomposed", "_test", "torchvision",
                     "_caffe2", "cuda", "vllm", "triton_kernel_wrapper"}


def _custom_op_mode():
    """A TorchDispatchMode that counts (and ghosts) operators of non-PyTorch namespaces."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class CustomOps(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            ns = getattr(func, "namespace", None) or str(func).split("::")[0].split(".")[0]
            if ns not in _TORCH_NAMESPACES:
                _record_launch(f"op:{func}")
                if STATE.ghost:
                    return _ghost_call(func, args, kwargs)
            out = func(*args, **kwargs)
            if STATE.ghost:
                _poison_fresh(func, out)
                _register_ghost_tensors(out)
            return out

    return CustomOps()


# -- the audit hook: harness access while candidate code runs -----------------------------------

_GC_EVENTS = {"gc.get_objects", "gc.get_referrers", "gc.get_referents"}
_FRAME_EVENTS = {"sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
                 "sys._getframemodulename", "object.__getattr__"}
_CTYPES_EVENTS = {"ctypes.cdata",
                  "ctypes.cdata/buffer", "ctypes.string_at", "ctypes.wstring_at",
                  "ctypes.addressof", "ctypes.PyObj_FromPtr", "ctypes.get_errno"}
_NET_PREFIX = ("socket.", "urllib.", "http.", "ftplib.", "smtplib.", "nntplib.", "poplib.",
               "imaplib.", "telnetlib.", "webbrowser.")
_PROC_EVENTS = {"os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
                "os.kill", "os.killpg", "subprocess.Popen", "pty.spawn", "os.startfile",
                "os.putenv", "os.unsetenv", "signal.pthread_kill", "resource.setrlimit",
                "resource.prlimit"}


def _trusted_roots() -> tuple[tuple[str, ...], tuple[str, ...]]:
    paths = sysconfig.get_paths()
    stdlib = tuple({os.path.realpath(paths[k]) for k in ("stdlib", "platstdlib") if k in paths})
    trusted = set(stdlib)
    for k in ("purelib", "platlib"):
        if k in paths:
            trusted.add(os.path.realpath(paths[k]))
    for m in ("torch", "triton", "numpy"):
        mod = sys.modules.get(m)
        if mod is not None and getattr(mod, "__file__", None):
            trusted.add(os.path.realpath(os.path.dirname(os.path.dirname(mod.__file__))))
    import site
    for p in list(getattr(site, "getsitepackages", lambda: [])()) + [site.getusersitepackages()]:
        trusted.add(os.path.realpath(p))
    here = os.path.realpath(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    trusted.add(here)  # the curate package itself
    return tuple(sorted(trusted)), stdlib


def _is_trusted(filename: str) -> bool:
    if filename.startswith("<"):
        return filename.startswith("<frozen")
    real = os.path.realpath(filename)
    return real.startswith(STATE.trusted_roots)


def _is_stdlib(filename: str) -> bool:
    """The standard library (site-packages sits inside it on most installs, and is not it)."""
    if filename.startswith("<frozen"):
        return True
    real = os.path.realpath(filename)
    return real.startswith(STATE.stdlib_roots) and "-packages" + os.sep not in real


def _writable_roots() -> tuple[str, ...]:
    """Where a candidate may write: its scratch dir (cwd), TMPDIR, HOME, the cache dirs the
    harness named, and /dev (null, shm, the GPU's device files)."""
    roots = {os.getcwd(), "/dev", "/proc/self"}
    for var in ("TMPDIR", "HOME", "TRITON_CACHE_DIR", "TORCH_EXTENSIONS_DIR",
                "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH", "XDG_CACHE_HOME",
                "CURATE_COMPILE_CACHE", "CURATE_WRITABLE"):
        for p in (os.environ.get(var) or "").split(os.pathsep):
            if p:
                roots.add(p)
    return tuple(sorted({os.path.realpath(r) for r in roots}))


def _write_outside(args) -> str | None:
    try:
        path, mode, flags = args[0], args[1], args[2]
    except Exception:  # noqa: BLE001
        return None
    if not isinstance(path, (str, bytes, os.PathLike)):
        return None  # an fd
    writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
        (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC))
    if not writes:
        return None
    real = os.path.realpath(os.fsdecode(path))
    if any(real == r or real.startswith(r + os.sep) for r in STATE.writable):
        return None
    return real


_COMPILER = re.compile(r"^(g\+\+|gcc|c\+\+|cc|clang\+\+|clang|nvcc|ld|[\w.-]*-(g\+\+|gcc))"
                       r"(-\d+)?$")


def _runs_compiler(event: str, args) -> bool:
    """A program that builds its own C++ kernels runs a compiler: that subprocess is fine."""
    if event not in ("subprocess.Popen", "os.posix_spawn", "os.exec"):
        return False
    try:
        exe = args[0]
        argv = args[1]
        first = exe if exe else (argv[0] if isinstance(argv, (list, tuple)) else argv)
        return bool(_COMPILER.match(os.path.basename(os.fsdecode(first))))
    except Exception:  # noqa: BLE001
        return False


def _own_library(args) -> bool:
    """A shared library the candidate built itself (under its scratch, TMPDIR or a cache)."""
    name = args[0] if args else None
    if not isinstance(name, (str, bytes, os.PathLike)):
        return False
    real = os.path.realpath(os.fsdecode(name))
    return any(real.startswith(r + os.sep) for r in STATE.writable)


def _callers(skip: int = 2):
    f = sys._getframe(skip)
    while f is not None:
        yield f
        f = f.f_back


def _audit(event: str, args) -> None:
    if getattr(_tls, "busy", False):
        return
    if event not in _GC_EVENTS and event not in _FRAME_EVENTS and event not in _CTYPES_EVENTS \
            and event not in _PROC_EVENTS and not event.startswith(_NET_PREFIX) \
            and event not in ("sys.addaudithook", "exec", "compile", "open", "ctypes.dlopen") \
            and \
            event != "object.__setattr__" and event != "object.__delattr__":
        return
    if STATE.phase == "idle":
        return
    if event == "open" and not _write_outside(args):
        return
    _tls.busy = True
    try:
        frames = list(_callers(2))
        direct = frames[0].f_code.co_filename if frames else ""
        # stdlib frames and this module's wrappers are transparent: who called *them*?
        nearest = next((f.f_code.co_filename for f in frames
                        if not _is_stdlib(f.f_code.co_filename)
                        and f.f_code.co_filename != __file__), "")
        untrusted_direct = not _is_trusted(direct)
        untrusted_near = bool(nearest) and not _is_trusted(nearest)
        reason = None
        if event in _GC_EVENTS and untrusted_near:
            reason = "harness_access:gc"
        elif event in _FRAME_EVENTS and event != "object.__getattr__" and untrusted_direct:
            reason = "harness_access:frames"
        elif event == "object.__getattr__" and untrusted_direct:
            reason = "harness_access:frames"
        elif event in _CTYPES_EVENTS and untrusted_near:
            reason = "harness_access:ctypes"
        elif event == "ctypes.dlopen" and untrusted_near and not _own_library(args):
            reason = "harness_access:ctypes"  # libc, libpython...: only libraries it built
        elif event.startswith(_NET_PREFIX) and untrusted_near:
            reason = "harness_access:network"
        elif event in _PROC_EVENTS and untrusted_near and not _runs_compiler(event, args):
            reason = "harness_access:process"
        elif event == "sys.addaudithook" and untrusted_near:
            reason = "harness_access:audit"
        elif event in ("exec", "compile") and untrusted_direct and direct:
            # the harness execs the candidate (trusted frame); the candidate exec-ing is not fine
            reason = "harness_access:dynamic_code"
        elif event in ("object.__setattr__", "object.__delattr__") and untrusted_near:
            obj = args[0] if args else None
            mod = getattr(obj, "__module__", "") or ""
            if isinstance(obj, type) and mod.split(".")[0] in (
                    "torch", "triton", "builtins", "time", "numpy", "math", "curate", "gc",
                    "threading", "json", "struct", "os", "sys"):
                reason = f"harness_access:patch:{mod}.{getattr(obj, '__name__', '?')}." \
                         f"{args[1] if len(args) > 1 else '?'}"
        elif event == "open" and untrusted_near and _write_outside(args):
            reason = "sandbox_escape:write"
        if reason:
            STATE.violations.append((STATE.phase, reason))
            STATE.tainted = STATE.tainted or STATE.phase == "candidate"
            if STATE.phase == "candidate" and STATE.on_violation is not None:
                try:
                    STATE.on_violation(reason)
                except Exception:  # noqa: BLE001
                    pass
            if event in _GC_EVENTS or event in ("sys._getframe", "sys._current_frames") or \
                    event.startswith(_NET_PREFIX) or event in _PROC_EVENTS or event == "open":
                raise PermissionError(f"curate: {event} is not allowed in a candidate")
    finally:
        _tls.busy = False


# -- integrity of what the harness measures and compares with ----------------------------------

def _integrity_targets() -> dict[str, Any]:
    import json
    import struct

    import torch
    out: dict[str, Any] = {}

    def take(label, owner, names):
        for n in names:
            try:
                out[f"{label}.{n}"] = getattr(owner, n)
            except Exception:  # noqa: BLE001
                pass

    take("time", time, ["perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
                        "monotonic_ns", "process_time", "sleep"])
    take("torch", torch, ["allclose", "isclose", "equal", "manual_seed", "randn", "rand",
                          "randint", "empty", "empty_like", "zeros", "clone", "abs", "max",
                          "isnan", "isinf", "isfinite", "nan_to_num", "linalg", "testing",
                          "compile"])
    take("torch.Tensor", torch.Tensor, ["__eq__", "__ne__", "__sub__", "__abs__", "abs", "max",
                                        "min", "sum", "allclose", "isnan", "isinf", "clone",
                                        "copy_", "float", "double", "cpu", "to", "item",
                                        "tolist", "numpy", "data_ptr", "detach", "equal",
                                        "norm", "__torch_function__", "contiguous"])
    take("torch.nn.Module", torch.nn.Module, ["__call__", "_call_impl"])
    take("torch.cuda", torch.cuda, ["synchronize", "Event", "Stream", "current_stream",
                                    "default_stream", "manual_seed", "manual_seed_all",
                                    "is_available", "set_stream"])
    take("torch.cuda.Event", torch.cuda.Event, ["record", "synchronize", "elapsed_time",
                                                "query", "wait", "__init__", "__new__"])
    take("torch.testing", torch.testing, ["assert_close"])
    take("builtins", builtins, ["isinstance", "abs", "max", "min", "float", "len", "open",
                                "print", "sum", "any", "all", "range", "zip", "round"])
    take("math", math, ["isclose", "isfinite", "isnan", "inf"])
    take("os", os, ["write", "read", "getpid", "_exit", "environ"])
    take("struct", struct, ["pack", "unpack"])
    take("json", json, ["dumps", "loads"])
    take("sys", sys, ["stdout", "stderr", "exit"])
    try:
        from triton.runtime.jit import JITFunction
        take("triton.JITFunction", JITFunction, ["run", "__getitem__"])
    except Exception:  # noqa: BLE001
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        take("triton.InterpretedFunction", InterpretedFunction, ["run", "__getitem__"])
    except Exception:  # noqa: BLE001
        pass
    return out


def restore_integrity() -> list[str]:
    """Put back every tracked timer/comparison function a candidate replaced (the worker lives on
    to run the next row). Returns the names restored; a worker that had any should be retired."""
    restored = []
    now = _integrity_targets()
    for k, v in STATE.integrity.items():
        cur = now.get(k)
        if cur is v or (hasattr(v, "__func__") and getattr(cur, "__func__", None) is v.__func__):
            continue
        owner_path, _, attr = k.rpartition(".")
        owner = _resolve(owner_path)
        if owner is None:
            continue
        try:
            raw = STATE.raw.get(k, v) if isinstance(owner, type) else v
            setattr(owner, attr, raw)
            restored.append(k)
        except Exception:  # noqa: BLE001
            pass
    STATE.tainted = STATE.tainted or bool(restored)
    return restored


def _resolve(path: str):
    import torch
    roots = {"time": time, "torch": torch, "builtins": builtins, "math": math, "os": os,
             "sys": sys}
    try:
        import json
        import struct
        roots.update(json=json, struct=struct)
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
        roots["triton.JITFunction"] = JITFunction
        roots["triton.InterpretedFunction"] = InterpretedFunction
    except Exception:  # noqa: BLE001
        pass
    if path in roots:
        return roots[path]
    head, *rest = path.split(".")
    obj = roots.get(head)
    for part in rest:
        obj = getattr(obj, part, None)
    return obj


def tainted() -> bool:
    """True once a candidate patched something or tripped the audit hook in this process: the
    harness should retire the worker after the current row."""
    return STATE.tainted or any(ph == "candidate" for ph, _ in STATE.violations)


def integrity_findings() -> list[tuple[str, str]]:
    """Names of timers and comparison functions that changed since install()."""
    now = _integrity_targets()
    out = []
    for k, v in STATE.integrity.items():
        cur = now.get(k)
        if cur is not v and not (hasattr(v, "__func__") and
                                 getattr(cur, "__func__", None) is v.__func__):
            kind = "timer_patched" if k.startswith(("time.", "torch.cuda")) else \
                "harness_access:patch"
            out.append((f"{kind}:{k}", FAIL))
    return out


# -- install / instrument ----------------------------------------------------------------------

def _keep_freed_memory_in_the_heap() -> None:
    """glibc: no trimming and no mmap below 32 MiB, so that a freed host block is handed out
    again (poisoned, see poison_free_memory) instead of as fresh zero pages. The judge sets the
    same (harness.same_allocator_settings), so both sides of a timed pair allocate alike."""
    from ..harness import same_allocator_settings
    same_allocator_settings()


def install() -> None:
    """Hook kernel launches, the audit trail and the integrity snapshot. Idempotent.
    Must run before any candidate code is imported (timers are captured here)."""
    if STATE.installed:
        return
    import torch  # noqa: F401
    STATE.trusted_roots, STATE.stdlib_roots = _trusted_roots()
    try:
        from triton.runtime.jit import JITFunction
        if not getattr(JITFunction.run, "__curate_wrapped__", False):
            JITFunction.run = _wrap_triton_run(JITFunction.run)
    except Exception:  # noqa: BLE001 - no triton here
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        if not getattr(InterpretedFunction.run, "__curate_wrapped__", False):
            InterpretedFunction.run = _wrap_triton_run(InterpretedFunction.run)
    except Exception:  # noqa: BLE001
        pass
    import ctypes
    if not getattr(ctypes.CDLL.__init__, "__curate_wrapped__", False):
        orig_init = ctypes.CDLL.__init__

        def cdll_init(self, name, *a, **k):
            orig_init(self, name, *a, **k)
            if name and _own_library([name]):
                _count_ctypes_library(self)
        cdll_init.__curate_wrapped__ = True
        ctypes.CDLL.__init__ = cdll_init
    import torch.utils.cpp_extension as cx
    for name in ("load_inline", "load"):
        f = getattr(cx, name)
        if not getattr(f, "__curate_wrapped__", False):
            setattr(cx, name, _wrap_factory(f, name))
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
    except Exception:  # noqa: BLE001
        pass
    _keep_freed_memory_in_the_heap()
    STATE.integrity = _integrity_targets()
    for k in STATE.integrity:
        owner_path, _, attr = k.rpartition(".")
        owner = _resolve(owner_path)
        if isinstance(owner, type) and attr in owner.__dict__:
            STATE.raw[k] = owner.__dict__[attr]
    STATE.writable = _writable_roots()
    sys.addaudithook(_audit)
    STATE.installed = True


def _is_compiled_extension(obj) -> bool:
    if not isinstance(obj, types.ModuleType) or getattr(obj, "__curate_wrapped__", False):
        return False
    f = getattr(obj, "__file__", None) or ""
    if not f.endswith((".so", ".pyd")):
        return False
    return not os.path.realpath(f).startswith(STATE.trusted_roots or _trusted_roots()[0])


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


# -- running the candidate under watch ---------------------------------------------------------

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
            mode = _custom_op_mode()
            mode.__enter__()
        except Exception:  # noqa: BLE001
            mode = None
        yield launches
    finally:
        if mode is not None:
            mode.__exit__(None, None, None)
        STATE.counting, STATE.ghost, STATE.launches = prev


def begin_row() -> None:
    """Forget the audit findings of earlier rows (the taint of the worker stays)."""
    STATE.violations.clear()


def candidate_violations(since: int = 0) -> list[tuple[str, str]]:
    out = []
    for ph, r in STATE.violations[since:]:
        if ph == "candidate" and (r, FAIL) not in out:
            out.append((r, FAIL))
    return out


# -- memory poisoning --------------------------------------------------------------------------

def poison_free_memory(device: str = "cuda", like: Iterable[Any] = (), max_bytes: int = 8 << 30
                       ) -> int:
    """Fill memory the candidate could be handed uninitialized with NaN, so that an output read
    from recycled memory (e.g. the reference's freed output) shows up as NaN.

    CUDA: every free block cached by the allocator is claimed at its exact size, filled and given
    back. CPU: blocks of the sizes of `like` (the reference's outputs and inputs) are allocated,
    filled and freed, which is what malloc would hand out next for those sizes.
    Returns the bytes poisoned."""
    import torch
    held = []
    total = 0
    if str(device).startswith("cuda") and torch.cuda.is_available():
        try:
            snap = torch.cuda.memory_snapshot()
        except Exception:  # noqa: BLE001
            snap = []
        sizes = []
        for seg in snap:
            for blk in seg.get("blocks", []):
                if blk.get("state") == "inactive" and blk.get("size", 0) > 0:
                    sizes.append(int(blk["size"]))
        for size in sorted(sizes, reverse=True):
            if total + size > max_bytes:
                continue
            try:
                t = torch.empty(size // 4, dtype=torch.float32, device=device)
            except Exception:  # noqa: BLE001
                continue
            t.fill_(float("nan"))
            held.append(t)
            total += size
        torch.cuda.synchronize()
        del held
        return total
    for ref in like:
        for t in _tensors_in([ref]):
            nbytes = t.numel() * t.element_size()
            if nbytes == 0:
                continue
            for _ in range(4):
                buf = torch.empty(max(1, nbytes // 4), dtype=torch.float32)
                buf.fill_(float("nan"))
                held.append(buf)
                total += nbytes
    del held
    return total


# -- the candidate checks ----------------------------------------------------------------------

def _clone(inputs):
    import torch
    return [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def _flat(out) -> list:
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        res = []
        for o in out:
            res.extend(_flat(o))
        return res
    return []


def _same(a, b) -> bool:
    """Bitwise-equal tensors (NaN equal to NaN)."""
    import torch
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.is_floating_point:
        return bool(torch.equal(torch.isnan(a), torch.isnan(b)) and
                    torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0)))
    return bool(torch.equal(a, b))


def _close(a, b, rtol=1e-3, atol=1e-4) -> bool:
    import torch
    if a.shape != b.shape:
        return False
    try:  # fp32 or wider as is: a float64 copy of a multi-GB output can exhaust the GPU
        work = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
        if not (a.is_floating_point() and b.is_floating_point()):
            work = torch.float64
        return bool(torch.allclose(a.to(work), b.to(work), rtol=rtol, atol=atol, equal_nan=True))
    except Exception:  # noqa: BLE001
        return False


def _storage_span(t):
    try:
        if t.numel() == 0:
            return None
        start = t.untyped_storage().data_ptr()
        return start, start + t.untyped_storage().nbytes()
    except Exception:  # noqa: BLE001
        return None


def _overlaps(a, b) -> bool:
    sa, sb = _storage_span(a), _storage_span(b)
    if sa is None or sb is None:
        return False
    return sa[0] < sb[1] and sb[0] < sa[1]


def alias_findings(outputs, inputs, params=(), earlier_outputs=(), ref_aliases_input=False
                   ) -> list[tuple[str, str]]:
    """Outputs must own their memory: not an input's, a parameter's, or an earlier call's."""
    out = []
    outs, ins = _flat(outputs), list(_tensors_in(inputs))
    if not ref_aliases_input and any(_overlaps(o, i) for o in outs for i in ins):
        out.append(("output_aliases_input", FAIL))
    if any(_overlaps(o, p) for o in outs for p in params):
        out.append(("output_aliases_parameter", FAIL))
    if any(_overlaps(o, e) for o in outs for e in _flat(list(earlier_outputs))):
        out.append(("output_reuses_earlier_output", FAIL))
    return out


def mutation_findings(before, after, ref_mutates=False) -> list[tuple[str, str]]:
    if ref_mutates:
        return []
    for b, a in zip(_tensors_in(before), _tensors_in(after)):
        if not _same(b, a):
            return [("input_mutated", FAIL)]
    return []


def _sync(device):
    import torch
    if str(device).startswith("cuda") and torch.cuda.is_available():
        torch.cuda.synchronize()


def side_stream_findings(model, inputs, device, repeats=3) -> list[tuple[str, str]]:
    """Work still running after the caller's stream finished: the output was handed back before
    it was computed (timing on the default stream would not see it)."""
    import torch
    if not (str(device).startswith("cuda") and torch.cuda.is_available()):
        return []
    late = 0
    perf = STATE.integrity.get("time.perf_counter", time.perf_counter)
    for _ in range(repeats):
        x = _clone(inputs)
        torch.cuda.synchronize()
        t0 = perf()
        with torch.no_grad():
            model(*x)
        ev = torch.cuda.Event()
        ev.record()
        ev.synchronize()
        t1 = perf()
        torch.cuda.synchronize()
        t2 = perf()
        if (t2 - t1) > max(1e-3, 0.2 * (t1 - t0)):
            late += 1
    return [("side_stream_unsynced", FAIL)] if late == repeats else []


def profiled_kernels(model, inputs, device) -> list[str] | None:
    """Names of the device kernels one forward ran (CUDA only; None elsewhere)."""
    import torch
    if not (str(device).startswith("cuda") and torch.cuda.is_available()):
        return None
    from torch.profiler import ProfilerActivity, profile
    x = _clone(inputs)
    with profile(activities=[ProfilerActivity.CUDA]) as prof, torch.no_grad():
        model(*x)
        torch.cuda.synchronize()
    names = []
    for e in prof.events():
        if getattr(e, "device_type", None) is not None and "CUDA" in str(e.device_type):
            names.append(e.name)
    return names


def check_candidate(model, inputs_a, inputs_b=None, *, device="cpu", params=None,
                    reference=None, ref_aliases_input=None, ref_mutates_input=None,
                    ref_outputs_differ=None, cuda_kernel_names=()) -> list[tuple[str, str]]:
    """All worker-side gates on one instantiated candidate. `inputs_a`/`inputs_b` are two
    different input sets (fresh seeds); they are cloned, never consumed. `reference` (the
    reference model, callable) is run only when a finding needs it to be excused (the reference
    also mutates or aliases its inputs, or ignores them); `ref_*` give those answers directly."""
    import torch
    findings: list[tuple[str, str]] = []
    since = len(STATE.violations)
    ref_runs: dict = {}

    def add(items):
        for it in items:
            if it not in findings:
                findings.append(it)

    def ref_run(which):
        if reference is None:
            return None
        if which not in ref_runs:
            x = _clone(inputs_a if which == "a" else inputs_b)
            with phase("reference"):
                out = reference(*x)
            ref_runs[which] = (x, out)
        return ref_runs[which]

    def ref_mutates() -> bool:
        if ref_mutates_input is not None:
            return ref_mutates_input
        r = ref_run("a")
        return bool(r and mutation_findings(inputs_a, r[0]))

    def ref_aliases() -> bool:
        if ref_aliases_input is not None:
            return ref_aliases_input
        r = ref_run("a")
        return bool(r and alias_findings(r[1], r[0]))

    def refs_differ() -> bool:
        if ref_outputs_differ is not None:
            return ref_outputs_differ
        ra, rb = ref_run("a"), ref_run("b")
        if ra is None or rb is None:
            return True
        fa, fb = _flat(ra[1]), _flat(rb[1])
        return not (len(fa) == len(fb) and all(_same(p, q) for p, q in zip(fa, fb)))

    params = list(params) if params is not None else \
        (list(model.parameters()) + list(model.buffers()) if hasattr(model, "parameters") else [])
    with torch.no_grad(), phase("candidate"):
        # 1. which kernels ran
        xa = _clone(inputs_a)
        poison_free_memory(device, like=xa)
        with watch() as launches:
            out_a = model(*xa)
        _sync(device)
        STATE.last_launches = list(dict.fromkeys(launches))
        if not launches:
            add([("no_custom_kernel_ran", FAIL)])
        if mutation_findings(inputs_a, xa) and not ref_mutates():
            add([("input_mutated", FAIL)])
        for f in alias_findings(out_a, xa, params, ()):
            if f[0] != "output_aliases_input" or not ref_aliases():
                add([f])
        flat_a = [t.detach().clone() for t in _flat(out_a)]

        if str(device).startswith("cuda") and cuda_kernel_names:
            try:
                names = profiled_kernels(model, inputs_a, device) or []
            except Exception:  # noqa: BLE001 - no profiler here (CUPTI missing): no verdict
                names = []
            # an empty list means the profiler saw no device work at all: it is not working
            if names and not any(k in n for n in names for k in cuda_kernel_names):
                add([("cuda_kernel_not_launched", FAIL)])

        # 2. ghost run: custom launches write garbage; the output must change. out_a and
        # flat_a stay alive through it, so the allocator cannot hand their blocks (which hold
        # the right values) to the ghost run's outputs; free blocks of their sizes are poisoned,
        # and so is every uninitialized allocation made during the run (_poison_fresh)
        if launches:
            xg = _clone(inputs_a)
            poison_free_memory(device, like=list(xg) + flat_a)
            STATE.ghost_tensors = {}
            _register_ghost_tensors(list(xg) + list(params))
            with watch(ghost=True):
                out_g = model(*xg)
            _sync(device)
            flat_g = _flat(out_g)
            if flat_a and len(flat_g) == len(flat_a) and all(
                    _same(g, a) for g, a in zip(flat_g, flat_a)):
                add([("kernel_output_unused", FAIL)])
            del out_g, flat_g, xg
            STATE.ghost_tensors = {}

        # 3. stale outputs: a second input set, then its values written into the first buffers
        if inputs_b is not None:
            xb = _clone(inputs_b)
            poison_free_memory(device, like=xb)
            with watch():
                out_b = model(*xb)
            _sync(device)
            for f in alias_findings(out_b, xb, params, [out_a]):
                if f[0] != "output_aliases_input" or not ref_aliases():
                    add([f])
            flat_b = [t.detach().clone() for t in _flat(out_b)]
            inputs_differ = any(not _same(p, q) for p, q in
                                zip(_tensors_in(inputs_a), _tensors_in(inputs_b)))
            if inputs_differ and flat_a and flat_b and all(
                    _same(p, q) for p, q in zip(flat_a, flat_b)) and refs_differ():
                add([("stale_output", FAIL)])
            # same buffers as the first call, new values: a cache keyed by pointer answers
            # with the old result
            same_layout = all(not isinstance(d, torch.Tensor) or (
                isinstance(s_, torch.Tensor) and d.shape == s_.shape and d.dtype == s_.dtype)
                for d, s_ in zip(xa, xb))
            if inputs_differ and same_layout and flat_b:
                for dst, src in zip(xa, xb):
                    if isinstance(dst, torch.Tensor):
                        dst.copy_(src)
                with watch():
                    out_c = model(*xa)
                _sync(device)
                flat_c = _flat(out_c)
                if len(flat_c) == len(flat_b) and not all(
                        _close(c, b) for c, b in zip(flat_c, flat_b)) and refs_differ():
                    if all(_close(c, a) for c, a in zip(flat_c, flat_a)):
                        add([("stale_output", FAIL)])
                    else:
                        add([("output_depends_on_history", WARN)])

        # 4. side streams (CUDA)
        add(side_stream_findings(model, inputs_a, device))
    # 5. timers and comparison functions untouched; no audit violations
    add(integrity_findings())
    add(candidate_violations(since))
    return findings


# -- the reference's degeneracy ----------------------------------------------------------------

def degeneracy_findings(ref_outputs: list, atol: float, rtol: float,
                        inputs: list | None = None) -> list[tuple[str, str]]:
    """The reference is no test if its output ignores the inputs, or if all-zeros would pass the
    tolerance check against it. `ref_outputs` holds one output (tensor or tuple) per trial, each
    trial on different inputs (`inputs`, the matching input lists, when known)."""
    import torch
    trials = [[t.detach().double().cpu() for t in _flat(o)] for o in ref_outputs]
    trials = [t for t in trials if t]
    out: list[tuple[str, str]] = []
    if not trials:
        return out
    if len(trials) >= 2:
        inputs_differ = True
        if inputs is not None and len(inputs) >= 2:
            a, b = list(_tensors_in(inputs[0])), list(_tensors_in(inputs[1]))
            inputs_differ = any(not _same(x, y) for x, y in zip(a, b)) or not a
        same = all(len(t) == len(trials[0]) and all(
            x.shape == y.shape and torch.allclose(x, y, rtol=1e-6, atol=1e-9, equal_nan=True)
            for x, y in zip(t, trials[0])) for t in trials[1:])
        if same and inputs_differ:
            out.append(("reference_ignores_inputs", FAIL))
    zeros_pass = True
    for t in trials:
        for x in t:
            if x.numel() == 0:
                continue
            finite = x[torch.isfinite(x)]
            if finite.numel() and bool((finite.abs() > atol + rtol * finite.abs()).any()):
                zeros_pass = False
    if zeros_pass:
        out.append(("reference_zero_passes_tolerance", FAIL))
    else:
        # outputs whose size sits near the tolerance: most elements would pass as zeros
        small = 0
        total = 0
        for t in trials:
            for x in t:
                total += x.numel()
                small += int((x.abs() <= atol + rtol * x.abs()).sum())
        if total and small / total > 0.99:
            out.append(("reference_mostly_below_tolerance", WARN))
    return out
