"""What the worker measures with: the timers, captured when this module is first imported (by
the worker's main module, before any program exists), the L2 flush, and the persisting-L2 reset.

A candidate that later replaces `time.perf_counter`, `torch.cuda.Event` or
`torch.cuda.synchronize` does not change what the worker measures with; one that replaces the
captured timers themselves is found by the candidate's closing checks (session.tampered_harness).
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class Timers:
    perf_counter: Callable[[], float]
    cuda_event: Callable | None = None
    cuda_synchronize: Callable | None = None
    cuda_elapsed: Callable | None = None
    cuda_record: Callable | None = None

    def functions(self) -> tuple:
        return (self.perf_counter, self.cuda_event, self.cuda_synchronize, self.cuda_elapsed,
                self.cuda_record)


def capture_timers() -> Timers:
    t = Timers(perf_counter=time.perf_counter)
    try:
        ev = torch.cuda.Event
        t.cuda_event = ev
        t.cuda_synchronize = torch.cuda.synchronize
        t.cuda_elapsed = ev.elapsed_time
        t.cuda_record = ev.record
    except Exception:  # noqa: BLE001 - a torch without CUDA bindings times on the CPU
        pass
    return t


TIMERS = capture_timers()
TIMER_FUNCTIONS = TIMERS.functions()   # what TIMERS must still hold when a row finishes


def sync(device: str) -> None:
    if device == "cuda":
        TIMERS.cuda_synchronize()


class L2Flush:
    """A device buffer of at least twice the L2 size; `run()` reads all of it."""

    def __init__(self, device: str = "cuda"):
        props = torch.cuda.get_device_properties(device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 50 * 2**20)
        n = max(2 * l2, 64 * 2**20) // 4
        self.buf = torch.ones(n, dtype=torch.float32, device=device)
        self.sink = torch.empty((), dtype=torch.float32, device=device)

    def run(self) -> None:
        torch.sum(self.buf, dim=0, out=self.sink)


_flush: L2Flush | None = None


def flush_for(device: str) -> L2Flush | None:
    """The worker's one L2 flush buffer on the GPU (made at first use), None on the CPU."""
    global _flush
    if device != "cuda":
        return None
    if _flush is None:
        _flush = L2Flush("cuda")
    return _flush


# -- persisting L2 ------------------------------------------------------------------------------
_cudart = None
_cudart_tried = False
_limit_set = False
_LIMIT_PERSISTING_L2 = 0x06


def _runtime():
    global _cudart, _cudart_tried
    if not _cudart_tried:
        _cudart_tried = True
        for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"):
            try:
                _cudart = ctypes.CDLL(name)
                break
            except OSError:
                continue
    return _cudart


def reset_persisting_l2() -> bool:
    """No L2 lines kept resident across the flush: the persisting carve-out set to zero and
    persisting lines reset (a kernel could set an access-policy window on its stream so that
    its data survives the flush). False where the runtime library cannot be reached."""
    rt = _runtime()
    if rt is None:
        return False
    global _limit_set
    try:
        if not _limit_set:
            rt.cudaDeviceSetLimit(ctypes.c_int(_LIMIT_PERSISTING_L2), ctypes.c_size_t(0))
            _limit_set = True
        rt.cudaCtxResetPersistingL2Cache()
        return True
    except (AttributeError, OSError):
        return False
