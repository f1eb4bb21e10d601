"""Length-prefixed JSON messages over pipes (JSON, not pickle: the peer is untrusted)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import struct

MAX_MESSAGE = 256 * 1024 * 1024


class ProtocolError(Exception):
    pass


def send(fd: int, obj) -> None:
    data = json.dumps(obj, default=str).encode()
    buf = struct.pack("<Q", len(data)) + data
    view = memoryview(buf)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def recv_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv(fd: int):
    (size,) = struct.unpack("<Q", recv_exact(fd, 8))
    if size > MAX_MESSAGE:
        raise ProtocolError(f"message of {size} bytes is over the limit")
    try:
        return json.loads(recv_exact(fd, size))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"garbled message: {exc}") from None


# -- file descriptors beside the messages ---------------------------------------------------
# Large outputs travel as sealed memory files (memfd): the worker writes them, seals them
# against every later write, and hands over the descriptor on a Unix socket of its own; the
# reader checks the seals before it maps a byte. Nothing is copied through the parent.
FD_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW


def send_fds(sock: socket.socket, fds: list[int]) -> None:
    socket.send_fds(sock, [b"F"], fds)


def recv_fds(sock: socket.socket, n: int, timeout: float) -> list[int]:
    """Exactly `n` descriptors sent with one `send_fds`, or ProtocolError (none kept open)."""
    sock.settimeout(timeout)
    try:
        msg, fds, flags, _ = socket.recv_fds(sock, 1, max(n, 1))
    except (socket.timeout, OSError) as exc:
        raise ProtocolError(f"no file descriptors came: {exc}") from None
    if not msg or len(fds) != n or flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise ProtocolError(f"{len(fds)} file descriptors came where {n} were announced")
    return list(fds)


def drain_fds(sock: socket.socket) -> None:
    """Close whatever a worker sent unasked (it would be taken for the next answer's)."""
    sock.setblocking(False)
    try:
        while True:
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 1, 253)
            except (BlockingIOError, OSError):
                return
            for fd in fds:
                os.close(fd)
            if not msg:
                return
    finally:
        sock.setblocking(True)


def sealed_size(fd: int) -> int:
    """The size of a memory file that no one can write, shrink or grow any more; ValueError
    for anything else (a regular file, a pipe, a memfd left writable)."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
    except OSError:
        raise ValueError("not a sealed memory file") from None
    if seals & FD_SEALS != FD_SEALS:
        raise ValueError("a memory file that is still writable")
    return os.fstat(fd).st_size


def sealed_memfd(name: str, size: int, fill) -> int:
    """A memory file of `size` bytes, filled by `fill(mmap)` and then sealed."""
    import mmap
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, size)
        if size:
            with mmap.mmap(fd, size) as m:
                fill(m)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, FD_SEALS | fcntl.F_SEAL_SEAL)
    except BaseException:
        os.close(fd)
        raise
    return fd
