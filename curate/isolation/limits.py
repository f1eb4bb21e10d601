"""Resource limits and the empty network namespace a worker runs under, applied in the worker
before it runs anything (preexec of a fresh interpreter, or the forked child's own set-up)."""

from __future__ import annotations

import ctypes
import dataclasses
import os
import resource
import sys
from dataclasses import dataclass

from . import confine

CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class Limits:
    """Resource limits of a worker. Address-space limits break CUDA (it maps huge ranges), so
    memory is bounded only on the CPU device, where `memory_gb` applies."""

    memory_gb: float | None = None
    file_size_gb: float = 4.0
    open_files: int = 4096
    output_bytes: int = 8 * 1024 * 1024  # stdout+stderr per task before the worker is killed
    isolate_network: bool = True
    # Landlock (curate/isolation/confine.py): writes only under the scratch dir, the cache dirs
    # named in the environment, `writable` and /dev; no TCP; home directories unreadable.
    confine: bool = False
    writable: tuple[str, ...] = ()
    hide_home: bool = True


def apply_limits(limits: dict, plan: dict | None = None, network: bool = False) -> None:
    """In the worker, before it runs anything: resource limits, (as root) an empty network
    namespace when `network`, and Landlock when `plan` is given. Limits come as a dict (JSON)
    because forked workers receive them from the fork server."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    fs = int(limits.get("file_size_gb", 4.0) * 2**30)
    resource.setrlimit(resource.RLIMIT_FSIZE, (fs, fs))
    try:
        n = int(limits.get("open_files", 4096))
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    except (ValueError, OSError):
        pass
    if limits.get("memory_gb"):
        m = int(limits["memory_gb"] * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (m, m))
    if network:
        unshare_net()
    if plan is not None:
        confine.apply(confine.Plan(**plan))  # best effort: no Landlock leaves writes open


def limits_dict(limits: Limits) -> dict:
    """The per-process part of `limits`, as the fork server's children receive it (JSON)."""
    return {"file_size_gb": limits.file_size_gb, "open_files": limits.open_files,
            "memory_gb": limits.memory_gb}


def preexec(limits: Limits, plan: confine.Plan | None = None):
    """A fresh interpreter's preexec_fn: everything decided here, nothing allocated after fork
    but the call."""
    d = limits_dict(limits)
    pd = dataclasses.asdict(plan) if plan is not None else None

    def run():
        apply_limits(d, pd, network=limits.isolate_network)
    return run


def unshare_net() -> None:
    """An empty network namespace (as root on Linux); best effort: loopback-only, down."""
    if os.geteuid() == 0 and sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)


def net_only(limits: Limits):
    """The fork server's own set-up: the network namespace, which its children inherit."""
    def run():
        if limits.isolate_network:
            unshare_net()
    return run
