"""How a candidate's outputs reach the judge, while the judge's reference outputs never enter
the candidate's process.

- `memfd` (the CPU device, and the GPU when CUDA IPC is not available, e.g. between two
  sandboxes): the candidate worker copies its outputs into memory files and seals them against
  any later write before their descriptors leave with its reply; the judge checks the seals
  and maps them read-only. Nothing passes through the parent's memory:
  the base64-in-JSON `inline` form of the same could not carry a KernelBench output of 2 GiB.
- `inline`: the bytes inside the reply (small outputs; no descriptors).
- `cuda_ipc` (the GPU): the candidate worker copies its outputs, right after the device-wide
  synchronize, into tensors the harness owns and hands the judge their CUDA IPC handles; the
  judge maps the same device memory. Nothing goes to the host and back: KernelBench outputs
  reach 8 GiB per trial, and a host round trip (copy, write, read, copy) of that size costs
  more than the row's timing. The row holds the candidate worker (`WorkerPool.hold`) until the
  judge is done, then asks it to `release()`. The judge opens only what the description
  allows: known dtypes, integer shapes, handles as bytes, the ref-counter name checked against
  torch's form.

The judge reads a description only by the transport the parent named (`receive(..., transport)`):
a candidate cannot pick another way of passing its outputs for itself.

Worker side only: nothing here runs in the parent.
"""

from __future__ import annotations

import base64
import math
import os
import re

import torch

TRANSPORTS = ("cuda_ipc", "cuda_fd", "memfd", "inline")

_HELD: list = []      # the candidate worker's exported tensors, until release()
_HELD_FD: list[tuple[int, int]] = []   # (driver handle, bytes) of cuda_fd exports, likewise

_DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.int16,
    torch.int32, torch.int64, torch.uint8, torch.bool, torch.complex64, torch.complex128)}
_RC_NAME = re.compile(rb"^/?[A-Za-z0-9_.-]{1,200}$")


def held_bytes() -> int:
    """Device memory this worker keeps on purpose (exported outputs the judge has not released)."""
    return sum(t.untyped_storage().nbytes() for t in _HELD) + sum(n for _, n in _HELD_FD)


def release(empty_cache: bool = True) -> int:
    """Drop what this worker exported (the judge has finished with it). Returns the count.
    `empty_cache` False (a fetch between timed rounds): torch's cached blocks stay, so the next
    timed batch allocates from the cache as the judge's does, not from the driver inside the
    clock, a cost the judge never pays and the parent's clock would charge to the candidate."""
    n = len(_HELD) + len(_HELD_FD)
    _HELD.clear()
    if _HELD_FD:
        from . import devicefd
        for handle, _ in _HELD_FD:
            devicefd.release(handle)
        _HELD_FD.clear()
    if n and torch.cuda.is_available():
        torch.cuda.synchronize()
        if empty_cache:
            torch.cuda.empty_cache()
    return n


def send_inline(items: list) -> dict:
    """Trial outputs as bytes inside the reply itself: they travel over the worker's own pipe
    to the parent and from it to the judge, so no file the candidate can reach is ever read."""
    specs = []
    for x in items:
        if x is None:
            specs.append({"kind": "none"})
        elif isinstance(x, torch.Tensor):
            t = x.detach().to("cpu").contiguous()
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            specs.append({"kind": "tensor", "dtype": str(t.dtype).removeprefix("torch."),
                          "shape": list(t.shape), "data": base64.b64encode(raw).decode()})
        else:
            raise ValueError(f"an output of type {type(x).__name__} cannot be compared")
    return {"transport": "inline", "items": specs}


MEMFD_CHUNK = 512 << 20  # one memory file's bytes at most (RLIMIT_FSIZE bounds each file)


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.uint8)


def _layout(items: list) -> tuple[list[dict], list[tuple[torch.Tensor, int, int]], int]:
    """The bytes of every output one after the other (64-byte aligned): their descriptions,
    the flat sources with their offsets and sizes, and the total."""
    specs, parts, total = [], [], 0
    for x in items:
        if x is None:
            specs.append({"kind": "none"})
            continue
        if not isinstance(x, torch.Tensor):
            raise ValueError(f"an output of type {type(x).__name__} cannot be compared")
        t = x.detach().contiguous()
        n = t.numel() * t.element_size()
        off = -(-total // 64) * 64
        specs.append({"kind": "tensor", "dtype": str(t.dtype).removeprefix("torch."),
                      "shape": list(t.shape), "offset": off, "nbytes": n})
        if n:
            parts.append((_flat_bytes(t), off, n))
        total = off + n
    return specs, parts, total


def send_memfd(items: list) -> tuple[dict, list[int]]:
    """Trial outputs in sealed memory files (candidate worker): the bytes of every output, one
    after the other, in files of MEMFD_CHUNK bytes at most, copied straight from the device
    and sealed before they leave; the descriptors go with the reply (worker.reply_fds). The
    judge checks the seals, so nothing can change them after the handover; no byte passes
    through the parent, whatever the outputs weigh."""
    from ...isolation.protocol import sealed_memfd
    specs, parts, total = _layout(items)
    fds: list[int] = []
    try:
        for start in range(0, total, MEMFD_CHUNK):
            size = min(MEMFD_CHUNK, total - start)

            def fill(m, start=start, size=size):
                dst = torch.frombuffer(m, dtype=torch.uint8, count=size)
                for src, off, n in parts:
                    a, b = max(off, start), min(off + n, start + size)
                    if a < b:
                        dst[a - start:b - start].copy_(src[a - off:b - off])
                del dst
            fds.append(sealed_memfd(f"curate-output-{len(fds)}", size, fill))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return {"transport": "memfd", "size": total, "chunk": MEMFD_CHUNK, "items": specs}, fds


def send_cuda_fd(items: list) -> tuple[dict, list[int]]:
    """Trial outputs in one device allocation handed over as a file descriptor (candidate
    worker, GPU): what memory files do, without the round trip through the host. Outputs
    that are not on the GPU go inline."""
    from . import devicefd
    if any(isinstance(x, torch.Tensor) and not x.is_cuda for x in items):
        return send_inline(items), []
    specs, parts, total = _layout(items)
    if not total:
        return {"transport": "cuda_fd", "size": 0, "items": specs}, []
    device = next(x.device.index for x in items if isinstance(x, torch.Tensor)) or 0
    try:
        fd, size, handle = devicefd.export(parts, total, device)
    except ValueError:
        # the driver's own allocation found the device full of torch's cached blocks: once
        # more without them, else this fetch goes by memory files (the description says so)
        torch.cuda.empty_cache()
        try:
            fd, size, handle = devicefd.export(parts, total, device)
        except ValueError:
            return send_memfd(items)
    _HELD_FD.append((handle, size))
    return {"transport": "cuda_fd", "size": size, "bytes": total, "items": specs}, [fd]


def _open_cuda_fd(desc: dict, fds: list[int], device: str) -> list:
    """The outputs that `send_cuda_fd` described (judge): one read-only mapping, copied into
    this process's own memory before anything is compared."""
    from . import devicefd
    size = _int(desc.get("size"))
    flat = None
    if size:
        if len(fds) != 1:
            raise ValueError("output memory does not match its description")
        total = _int(desc.get("bytes"))
        index = torch.device(device).index
        flat = devicefd.import_copy(fds[0], size, total, index or 0)
    elif fds:
        raise ValueError("output memory does not match its description")
    return _views(desc, flat, 0 if flat is None else flat.numel(), device)


def _item(spec, size: int) -> tuple[torch.dtype, list[int], int, int] | None:
    """One output's description in `_layout`'s form, checked against `size` bytes: (dtype,
    shape, offset, bytes), or None for an output that is None."""
    if not isinstance(spec, dict) or spec.get("kind") == "none":
        return None
    dtype = _DTYPES.get(spec.get("dtype"))
    if dtype is None:
        raise ValueError(f"unsupported dtype {spec.get('dtype')!r}")
    shape = [_int(v) for v in spec.get("shape") or []]
    off, n = _int(spec.get("offset")), _int(spec.get("nbytes"))
    if min(shape + [0]) < 0 or off < 0 or off + n > size \
            or n != math.prod(shape) * torch.empty(0, dtype=dtype).element_size():
        raise ValueError("an output does not match its bytes")
    return dtype, shape, off, n


def _views(desc: dict, flat: torch.Tensor | None, size: int, device: str) -> list:
    """Tensors over `flat` (the bytes of `_layout`), each checked against its description."""
    out = []
    for spec in desc.get("items") or []:
        item = _item(spec, size)
        if item is None:
            out.append(None)
            continue
        dtype, shape, off, n = item
        part = flat[off:off + n] if n else torch.empty(0, dtype=torch.uint8, device=device)
        out.append(part.view(dtype).reshape(shape))
    return out


def _open_memfd(desc: dict, fds: list[int], device: str) -> list:
    """The outputs that `send_memfd` described, from its sealed files (judge)."""
    import mmap
    import warnings

    from ...isolation.protocol import sealed_size
    size, chunk = _int(desc.get("size")), _int(desc.get("chunk"))
    if size < 0 or chunk <= 0 or len(fds) != -(-size // chunk):
        raise ValueError("output files do not match their description")
    sizes = [sealed_size(fd) for fd in fds]  # ValueError for a file anyone could still write
    if sizes != [min(chunk, size - k * chunk) for k in range(len(fds))]:
        raise ValueError("output files are not the size described")
    maps = [mmap.mmap(fd, n, prot=mmap.PROT_READ) for fd, n in zip(fds, sizes)]
    try:
        out = []
        for spec in desc.get("items") or []:
            item = _item(spec, size)
            if item is None:
                out.append(None)
                continue
            dtype, shape, off, n = item
            dst = torch.empty(n, dtype=torch.uint8, device=device)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the mapping is read-only, as it should be
                for k in range(off // chunk, -(-(off + n) // chunk) if n else off // chunk):
                    a, b = max(off, k * chunk), min(off + n, (k + 1) * chunk)
                    src = torch.frombuffer(maps[k], dtype=torch.uint8, count=b - a,
                                           offset=a - k * chunk)
                    dst[a - off:b - off].copy_(src)
                    del src
            out.append(dst.view(dtype).reshape(shape))
        return out
    finally:
        for m in maps:
            m.close()


def _open_inline(spec: dict, device: str) -> torch.Tensor:
    dtype = _DTYPES.get(spec.get("dtype"))
    if dtype is None:
        raise ValueError(f"unsupported dtype {spec.get('dtype')!r}")
    shape = [_int(v) for v in spec.get("shape") or []]
    raw = base64.b64decode(_str(spec.get("data")), validate=True)
    numel = 1
    for n in shape:
        numel *= n
    if len(raw) != numel * torch.empty(0, dtype=dtype).element_size():
        raise ValueError("output bytes do not match its shape")
    if not numel:
        return torch.empty(shape, dtype=dtype, device=device)
    t = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
    return t.to(device)


def send_cuda_ipc(items: list) -> dict:
    """Describe outputs for the judge by CUDA IPC handles (candidate worker): `items` are the
    flat outputs (tensors or None) after the device-wide synchronize; outputs that are not on
    the GPU, or empty, go inline inside the same description."""
    specs = []
    for x in items:
        if x is None:
            specs.append({"kind": "none"})
        elif isinstance(x, torch.Tensor) and x.is_cuda and x.numel() > 0:
            own = x.detach().clone()      # the worker's copy: later writes by the candidate
            _HELD.append(own)             # to its own buffers do not reach the judge
            specs.append(_ipc_spec(own))
        else:
            specs.extend(send_inline([x])["items"])
    torch.cuda.synchronize()
    return {"transport": "cuda_ipc", "items": specs}


def send(items: list, transport: str) -> tuple[dict, list[int]]:
    """Outputs described for the judge by `transport`, and the descriptors that go with the
    reply. cuda_fd falls back to memory files when the device is full and to inline when
    the outputs are not on the GPU: the description says which."""
    if transport == "cuda_ipc":
        return send_cuda_ipc(items), []
    if transport == "memfd":
        return send_memfd(items)
    if transport == "cuda_fd":
        return send_cuda_fd(items)
    if transport == "inline":
        return send_inline(items), []
    raise ValueError(f"unknown transport {transport!r}")


def _ipc_spec(t: torch.Tensor) -> dict:
    (device, handle, size, soffset, rc_handle, rc_offset, event_handle,
     event_sync) = t.untyped_storage()._share_cuda_()
    return {"kind": "cuda", "dtype": str(t.dtype).removeprefix("torch."),
            "shape": list(t.shape), "stride": list(t.stride()), "offset": t.storage_offset(),
            "device": int(device), "handle": bytes(handle).hex(), "size": int(size),
            "soffset": int(soffset), "rc_handle": bytes(rc_handle).hex(),
            "rc_offset": int(rc_offset),
            "event": bytes(event_handle).hex() if event_handle else "",
            "event_sync": bool(event_sync)}


def receive(desc, device: str, fds: list[int] | None, transport: str):
    """The candidate's outputs, on `device` (judge), from a description of kind `transport`
    only; `fds`: the descriptors that came with the task. Raises ValueError on a description
    that is not what the sender of that transport writes."""
    if not isinstance(desc, dict):
        raise ValueError("not an output description")
    if transport not in TRANSPORTS or desc.get("transport") != transport:
        raise ValueError(f"outputs described as {str(desc.get('transport'))[:40]!r} where "
                         f"{transport!r} was asked for")
    if transport == "memfd":
        return _open_memfd(desc, list(fds or []), device)
    if transport == "cuda_fd":
        return _open_cuda_fd(desc, list(fds or []), device)
    if not isinstance(desc.get("items"), list):
        raise ValueError("an output description without items")
    if transport == "inline":
        return [None if isinstance(s, dict) and s.get("kind") == "none" else
                _open_inline(s if isinstance(s, dict) else {}, device) for s in desc["items"]]
    out = []
    for spec in desc["items"]:
        kind = spec.get("kind") if isinstance(spec, dict) else None
        if kind == "none":
            out.append(None)
        elif kind == "cuda":
            out.append(_open_ipc(spec))
        elif kind == "tensor":
            out.append(_open_inline(spec, device))
        else:
            raise ValueError(f"unknown output kind {kind!r}")
    return out


def _int(v, lo: int = 0) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < lo:
        raise ValueError("bad integer in output description")
    return v


def _str(v) -> str:
    if not isinstance(v, str):
        raise ValueError("bad string in output description")
    return v


def _hex(v) -> bytes:
    try:
        return bytes.fromhex(_str(v))
    except ValueError as exc:
        raise ValueError("bad handle in output description") from exc


def _open_ipc(spec: dict) -> torch.Tensor:
    dtype = _DTYPES.get(spec.get("dtype"))
    if dtype is None:
        raise ValueError(f"unsupported dtype {spec.get('dtype')!r}")
    shape = [_int(v) for v in spec.get("shape") or []]
    stride = [_int(v) for v in spec.get("stride") or []]
    if len(shape) != len(stride):
        raise ValueError("shape and stride differ in length")
    rc = _hex(spec.get("rc_handle"))
    if not _RC_NAME.match(rc):
        raise ValueError("bad ref-counter name in output description")
    event = _hex(spec.get("event") or "")  # bytes, empty when no sync is required
    device = _int(spec.get("device"))
    storage = torch.UntypedStorage._new_shared_cuda(
        device, _hex(spec.get("handle")), _int(spec.get("size")), _int(spec.get("soffset")),
        rc, _int(spec.get("rc_offset")), event, bool(spec.get("event_sync")))
    offset = _int(spec.get("offset"))
    check_bounds(shape, stride, offset, dtype, storage.nbytes())
    t = torch.empty(0, dtype=dtype, device=f"cuda:{device}")
    t.set_(storage, offset, shape, stride)
    return t


def check_bounds(shape: list[int], stride: list[int], offset: int, dtype: torch.dtype,
                 nbytes: int) -> None:
    """`Tensor.set_` does not check that a view fits its storage: a forged description could
    make the judge read past the mapped memory."""
    if any(n == 0 for n in shape):
        return
    last = offset + sum((n - 1) * s for n, s in zip(shape, stride))
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if (last + 1) * itemsize > nbytes:
        raise ValueError("output view exceeds its storage")
