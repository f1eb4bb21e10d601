"""Integrity of what the harness measures and compares with: timers and comparison functions
snapshotted at install(), checked and put back at the end of a row; the audit trail per row."""

from __future__ import annotations

import builtins
import math
import os
import sys
import time
from typing import Any

from .state import FAIL, STATE


def integrity_targets() -> dict[str, Any]:
    import json
    import struct

    import torch
    out: dict[str, Any] = {}

    def take(label, owner, names):
        for n in names:
            try:
                out[f"{label}.{n}"] = getattr(owner, n)
            except Exception:  # noqa: BLE001, S110
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
    except Exception:  # noqa: BLE001, S110
        pass
    try:
        from triton.runtime.interpreter import InterpretedFunction
        take("triton.InterpretedFunction", InterpretedFunction, ["run", "__getitem__"])
    except Exception:  # noqa: BLE001, S110
        pass
    return out

def restore_integrity() -> list[str]:
    """Put back every tracked timer/comparison function a candidate replaced (the worker lives on
    to run the next row). Returns the names restored; a worker that had any should be retired."""
    restored = []
    now = integrity_targets()
    for k, v in STATE.integrity.items():
        cur = now.get(k)
        if cur is v or (hasattr(v, "__func__") and getattr(cur, "__func__", None) is v.__func__):
            continue
        owner_path, _, attr = k.rpartition(".")
        owner = resolve(owner_path)
        if owner is None:
            continue
        try:
            raw = STATE.raw.get(k, v) if isinstance(owner, type) else v
            setattr(owner, attr, raw)
            restored.append(k)
        except Exception:  # noqa: BLE001, S110
            pass
    STATE.tainted = STATE.tainted or bool(restored)
    return restored

def resolve(path: str):
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
    except Exception:  # noqa: BLE001, S110
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
    now = integrity_targets()
    out = []
    for k, v in STATE.integrity.items():
        cur = now.get(k)
        if cur is not v and not (hasattr(v, "__func__") and
                                 getattr(cur, "__func__", None) is v.__func__):
            kind = "timer_patched" if k.startswith(("time.", "torch.cuda")) else \
                "harness_access:patch"
            out.append((f"{kind}:{k}", FAIL))
    return out

def begin_row() -> None:
    """Forget the audit findings of earlier rows (the taint of the worker stays)."""
    STATE.violations.clear()

def candidate_violations(since: int = 0) -> list[tuple[str, str]]:
    out = []
    for ph, r in STATE.violations[since:]:
        if ph == "candidate" and (r, FAIL) not in out:
            out.append((r, FAIL))
    return out
