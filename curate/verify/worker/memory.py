"""Device and host memory of a worker between tasks: what an idle worker keeps on the device is
given back (and reported), and host memory is allocated alike in the judge and the candidate."""

from __future__ import annotations

import gc

import torch

from ..messages import Reply
from . import transport

KEEP_IDLE_GB = 1.0   # device memory an idle worker may keep beyond what it exported


def release_device_memory(reply: Reply, keep_gb: float | None = KEEP_IDLE_GB) -> Reply:
    """After a task, once its locals are gone: the cached blocks go back to the driver, so an
    idle worker holds no device memory that the parent's memory gate cannot see (compile
    workers that kept their blocks made later rows run out of memory). What is still kept is
    reported (`memory_kept_gb`); a worker keeping more than `keep_gb` beyond what it exported
    asks to be replaced (None: never, only report). Not between a row's timed batches: they
    would allocate afresh inside the clock."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return reply
    gc.collect()                # the task's reference cycles (modules, models) die here
    torch.cuda.ipc_collect()    # exported blocks the judge has let go of (CUDA IPC "limbo")
    torch.cuda.empty_cache()
    kept = torch.cuda.memory_reserved() - transport.held_bytes()
    if reply.memory_kept_gb is None:
        reply.memory_kept_gb = round(max(kept, 0) / 2**30, 2)
    if keep_gb is not None and kept > keep_gb * 2**30:
        reply.recycle = True
    return reply


def same_allocator_settings() -> None:
    """The judge and the candidate's worker allocate host memory alike: the candidate's gates
    keep freed blocks in glibc's heap (no trimming, no mmap below 32 MiB), and a judge left at
    glibc's defaults paid page faults on every call instead, which made honest rows look
    faster than they are."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    except Exception:  # noqa: BLE001 - not glibc
        pass
