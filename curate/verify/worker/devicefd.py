"""Device memory handed from one process to another as a file descriptor (the CUDA driver's
virtual memory API with POSIX file-descriptor handles), for the `cuda_fd` transport.

CUDA IPC handles fail between two sandboxes (each worker has a uid and PID namespace of its
own); a descriptor passes over the Unix socket that already carries the memory files, and the
outputs never leave the device. The exporter drops its own mapping before the descriptor
leaves; the importer maps it read-only and copies the bytes into memory of its own at once, so
that nothing the exporter does afterwards reaches what is compared.

Worker side only (the parent never initializes CUDA): ctypes over libcuda, no other package.
"""

from __future__ import annotations

import ctypes

import torch

_POSIX_FD = 1            # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_PINNED = 1              # CU_MEM_ALLOCATION_TYPE_PINNED
_ON_DEVICE = 1           # CU_MEM_LOCATION_TYPE_DEVICE
_READ, _READWRITE = 1, 3  # CU_MEM_ACCESS_FLAGS_PROT_*


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocProp(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("location", _Location), ("win32HandleMetaData", ctypes.c_void_p),
                ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


class _Raw:
    """A device address range as a flat uint8 array torch can view without copying."""

    def __init__(self, ptr: int, n: int):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "|u1", "data": (ptr, False),
                                         "version": 3, "strides": None}


_lib = None


def _cu():
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL("libcuda.so.1")
    return _lib


def _check(code: int, what: str) -> None:
    if code != 0:
        raise ValueError(f"{what} failed (CUDA driver error {code})")


def _prop(device: int) -> _AllocProp:
    p = _AllocProp()
    p.type, p.requestedHandleTypes = _PINNED, _POSIX_FD
    p.location.type, p.location.id = _ON_DEVICE, device
    return p


def granularity(device: int) -> int:
    g = ctypes.c_size_t(0)
    _check(_cu().cuMemGetAllocationGranularity(ctypes.byref(g), ctypes.byref(_prop(device)), 0),
           "cuMemGetAllocationGranularity")
    return int(g.value)


def _map(handle: ctypes.c_uint64, size: int, device: int, flags: int) -> int:
    cu = _cu()
    ptr = ctypes.c_uint64(0)
    _check(cu.cuMemAddressReserve(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(0),
                                  ctypes.c_uint64(0), ctypes.c_uint64(0)), "cuMemAddressReserve")
    code = cu.cuMemMap(ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), handle, ctypes.c_uint64(0))
    if code == 0:
        acc = _AccessDesc()
        acc.location.type, acc.location.id, acc.flags = _ON_DEVICE, device, flags
        code = cu.cuMemSetAccess(ptr, ctypes.c_size_t(size), ctypes.byref(acc), ctypes.c_size_t(1))
        if code != 0:
            cu.cuMemUnmap(ptr, ctypes.c_size_t(size))
    if code != 0:
        cu.cuMemAddressFree(ptr, ctypes.c_size_t(size))
        _check(code, "mapping device memory")
    return int(ptr.value)


def _unmap(ptr: int, size: int) -> None:
    cu = _cu()
    cu.cuMemUnmap(ctypes.c_uint64(ptr), ctypes.c_size_t(size))
    cu.cuMemAddressFree(ctypes.c_uint64(ptr), ctypes.c_size_t(size))


def export(parts: list[tuple[torch.Tensor, int, int]], total: int, device: int
           ) -> tuple[int, int, int]:
    """Copy flat uint8 tensors (`(bytes, offset, n)`) into one new allocation of `total` bytes
    or more; returns (its descriptor, its mapped size, its handle). This process keeps no
    mapping of it, only the handle, which keeps the memory alive until `release(handle)` (the
    judge is done with it by then)."""
    cu = _cu()
    torch.cuda.synchronize(device)  # the driver calls below run in torch's current context
    g = granularity(device)
    size = max(g, -(-total // g) * g)
    handle = ctypes.c_uint64(0)
    _check(cu.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(size),
                          ctypes.byref(_prop(device)), ctypes.c_uint64(0)), "cuMemCreate")
    try:
        ptr = _map(handle, size, device, _READWRITE)
        try:
            dst = torch.as_tensor(_Raw(ptr, size), device=f"cuda:{device}")
            for src, off, n in parts:
                dst[off:off + n].copy_(src)
            torch.cuda.synchronize(device)
            del dst
        finally:
            _unmap(ptr, size)
        fd = ctypes.c_int(-1)
        _check(cu.cuMemExportToShareableHandle(ctypes.byref(fd), handle, _POSIX_FD,
                                               ctypes.c_uint64(0)), "cuMemExportToShareableHandle")
    except BaseException:
        cu.cuMemRelease(handle)
        raise
    return int(fd.value), size, int(handle.value)


def release(handle: int) -> None:
    """Free an exported allocation on this side (an importer's own handle keeps it until it
    lets go)."""
    _cu().cuMemRelease(ctypes.c_uint64(handle))


def import_copy(fd: int, size: int, nbytes: int, device: int) -> torch.Tensor:
    """The first `nbytes` of the allocation behind `fd` (mapped `size` bytes, read-only), as a
    uint8 tensor of this process's own. Raises ValueError where `fd` is not such an allocation
    or is smaller than `size`."""
    if not 0 <= nbytes <= size:
        raise ValueError("an output is larger than its device memory")
    cu = _cu()
    torch.cuda.synchronize(device)
    handle = ctypes.c_uint64(0)
    _check(cu.cuMemImportFromShareableHandle(ctypes.byref(handle), ctypes.c_void_p(fd),
                                             _POSIX_FD), "cuMemImportFromShareableHandle")
    try:
        ptr = _map(handle, size, device, _READ)
        try:
            src = torch.as_tensor(_Raw(ptr, size), device=f"cuda:{device}")
            out = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
            out.copy_(src[:nbytes])
            torch.cuda.synchronize(device)
            del src
        finally:
            _unmap(ptr, size)
    finally:
        cu.cuMemRelease(handle)
    return out
