"""Length-prefixed JSON messages over pipes (JSON, not pickle: the peer is untrusted)."""

from __future__ import annotations

import json
import os
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
