"""Device and host memory of a worker between tasks: what an idle worker keeps on the device is
given back (and reported), host memory is allocated alike in the judge and the candidate, and
each row's peak is reported (on the GPU the caching allocator's own peaks, also by kind of
request; on the CPU the resident set's high-water mark, which the kernel resets on request
through /proc/self/clear_refs, so a worker reused for many rows reports each row's own peak).
The reservation rule (row.row_memory_gb) is calibrated against these peaks."""

from __future__ import annotations

import gc
import os
import re

import torch

from ..messages import Reply
from . import transport

KEEP_IDLE_GB = 1.0   # device memory an idle worker may keep beyond what it exported
GB = 2**30
# glibc serves requests of this size and more from fresh mappings (same_allocator_settings fixes
# the threshold here; it is also glibc's own ceiling) and unmaps them when freed: the next such
# block starts zeroed, never holding an earlier tensor's values
MMAP_THRESHOLD = 32 << 20


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
        libc.mallopt(-3, MMAP_THRESHOLD)  # M_MMAP_THRESHOLD
    except Exception:  # noqa: BLE001 - not glibc
        pass


# this row's allocator peaks on the GPU (allocated, reserved bytes), and the allocated peak of
# each kind of request: which of a row's requests holds the most copies (`peak_by_request_gb`)
_ROW_PEAK = [0, 0]
_BY_REQUEST: dict[str, float] = {}


# benchmarks only (gpu_all.py's memory_trace): with this variable set, a GPU worker records
# its allocations for each row and reports what was alive at the row's peak, by the line of
# curate that allocated it (`peak_holders`). Off in verify: recording costs every allocation.
TRACE = os.environ.get("CURATE_MEMORY_TRACE") == "1"
_TRACE_START = [0]


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
        _ROW_PEAK[:] = [0, 0]
        _BY_REQUEST.clear()
        if TRACE:
            _start_trace()
        return
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")   # 5: reset the peak resident set to the current one
    except OSError:
        pass   # no procfs here: the peak then counts from the worker's start


def request_peak(kind: str) -> None:
    """After a request on the GPU: its allocator peak, kept by kind, and the row's peak so far;
    the allocator's peak then counts from here, for the next request."""
    if not torch.cuda.is_initialized():
        return
    alloc, res = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    _BY_REQUEST[kind] = max(_BY_REQUEST.get(kind, 0.0), round(alloc / GB, 3))
    _ROW_PEAK[:] = [max(_ROW_PEAK[0], alloc), max(_ROW_PEAK[1], res)]
    torch.cuda.reset_peak_memory_stats()


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            m = re.search(rf"^{field}:\s+(\d+) kB", fh.read(), re.MULTILINE)
    except OSError:
        return None
    return int(m.group(1)) if m else None


def peak_notes(device: str, prefix: str = "") -> dict:
    """`peak_gb` and `peak_reserved_gb` on the GPU; `peak_rss_gb` (and `rss_gb`, what the worker
    holds at the end, mostly the libraries it imported) on the CPU."""
    if device == "cuda":
        alloc = max(_ROW_PEAK[0], torch.cuda.max_memory_allocated())
        res = max(_ROW_PEAK[1], torch.cuda.max_memory_reserved())
        notes = {f"{prefix}peak_gb": round(alloc / GB, 3),
                 f"{prefix}peak_reserved_gb": round(res / GB, 3),
                 f"{prefix}peak_by_request_gb": dict(_BY_REQUEST)}
        if TRACE:
            notes[f"{prefix}peak_holders"] = _trace_holders()
        return notes
    peak, now = _status_kb("VmHWM"), _status_kb("VmRSS")
    if peak is None or now is None:
        return {}
    return {f"{prefix}peak_rss_gb": round(peak * 1024 / GB, 3),
            f"{prefix}rss_gb": round(now * 1024 / GB, 3)}


def _start_trace() -> None:
    from torch.cuda import memory as cm
    cm._record_memory_history(None)     # the last row's events go
    _TRACE_START[0] = torch.cuda.memory_allocated()
    cm._record_memory_history("all", context="alloc", stacks="python", max_entries=1 << 20)


def _trace_holders() -> dict:
    from torch.cuda import memory as cm
    try:
        events = cm._snapshot()["device_traces"][torch.cuda.current_device()]
    except Exception as exc:  # noqa: BLE001 - a torch without the trace: say so
        return {"error": f"{type(exc).__name__}: {exc}"[:200]}
    return holders_at_peak(events, _TRACE_START[0])


def _label(frames: list) -> str:
    """Where an allocation came from: the innermost line of curate (this module left out) and,
    where one lies deeper, the innermost line outside torch (the row's own program)."""
    ours = next((f for f in frames if "/curate/" in f.get("filename", "")
                 and not f["filename"].endswith("worker/memory.py")), None)
    theirs = next((f for f in frames if "/torch/" not in f.get("filename", "")
                   and "/curate/" not in f.get("filename", "")
                   and not f.get("filename", "").startswith("<")), None)
    parts = [f"{os.path.basename(f['filename'])}:{f.get('line')} {f.get('name')}"
             for f in (ours, theirs) if f is not None]
    return " < ".join(parts) or "unknown"


def holders_at_peak(events: list, start_bytes: int = 0, top: int = 8) -> dict:
    """From a CUDA allocator trace (innermost frame first, as torch records them): the moment
    the most bytes were allocated, and what held them then, in GiB by `_label`. Blocks alive
    before the trace began count as `before`. Two passes: the peak's position, then the blocks
    alive there (labelled, and only those)."""
    now = best = start_bytes
    at = 0
    for n, (act, addr, size) in enumerate(_moves(events), start=1):
        now += size if act == "alloc" else -size
        if now > best:
            best, at = now, n
    live: dict = {}
    for ev in events[:at]:
        if ev.get("action") == "alloc":
            live[ev.get("addr")] = ev
        elif ev.get("action") == "free_requested":
            live.pop(ev.get("addr"), None)
    by: dict[str, float] = {}
    for ev in live.values():
        label = _label(ev.get("frames") or [])
        by[label] = by.get(label, 0.0) + int(ev.get("size") or 0)
    rows = sorted(by.items(), key=lambda kv: -kv[1])
    held = {k: round(v / GB, 3) for k, v in rows[:top]}
    rest = sum(v for _, v in rows[top:])
    return {"peak_gb": round(best / GB, 3), "before_gb": round(start_bytes / GB, 3),
            "held_gb": held, "rest_gb": round(rest / GB, 3)}


def _moves(events: list):
    """(action, address, bytes) of each allocation and each free of the trace, in order (a free
    of a block the trace never saw allocated is one from `before`)."""
    sizes: dict = {}
    for ev in events:
        act, addr = ev.get("action"), ev.get("addr")
        if act == "alloc":
            sizes[addr] = int(ev.get("size") or 0)
            yield act, addr, sizes[addr]
        elif act == "free_requested":
            yield act, addr, sizes.pop(addr, int(ev.get("size") or 0))
        else:
            yield act, addr, 0
