"""The worker process: load the handler once, then answer tasks until the pipe closes.

    python -m curate.isolation.worker IN_FD OUT_FD HANDLER [SETUP [FD_SOCK]]

HANDLER and SETUP are `module:function`. SETUP() runs once; HANDLER(task) runs per task and
returns a JSON-able dict. An exception in the handler is an answer ({"error": ...}), not a crash.
FD_SOCK, a Unix socket, carries file descriptors beside the messages: those sent with a task
(`task_fds()`), and those a handler hands back with its answer (`reply_fds()`).
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import traceback

from .protocol import ProtocolError, recv, recv_fds, send, send_fds

_FD_SOCK: socket.socket | None = None
_TASK_FDS: list[int] = []   # came with the task being answered; closed once it is
_REPLY_FDS: list[int] = []  # go with the answer; closed here once sent


def task_fds() -> list[int]:
    return list(_TASK_FDS)


def reply_fds(fds: list[int]) -> None:
    if _FD_SOCK is None:
        raise RuntimeError("this worker has no socket for file descriptors")
    _REPLY_FDS.extend(fds)


def _load(spec: str):
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


def main(argv: list[str]) -> int:
    # this file runs as __main__: the handlers' `curate.isolation.worker` must be the module
    # that serves, so that task_fds() and reply_fds() see its state
    from curate.isolation import worker
    return worker.serve(int(argv[0]), int(argv[1]), argv[2], argv[3] if len(argv) > 3 else "",
                        int(argv[4]) if len(argv) > 4 and argv[4] else None)


def serve(in_fd: int, out_fd: int, handler_spec: str, setup_spec: str = "",
          fd_sock: int | None = None) -> int:
    """Answer tasks from `in_fd` on `out_fd` until the pipe closes (also the body of a worker
    forked by curate.isolation.zygote)."""
    global _FD_SOCK
    if fd_sock is not None:
        _FD_SOCK = socket.socket(fileno=fd_sock)
    handler = _load(handler_spec)
    if setup_spec:
        _load(setup_spec)()
    send(out_fd, {"ready": True, "pid": os.getpid()})
    while True:
        try:
            task = recv(in_fd)
        except EOFError:
            return 0
        try:
            n = task.pop("_fds", 0) if isinstance(task, dict) else 0
            if n:
                if _FD_SOCK is None:
                    raise ProtocolError("file descriptors came to a worker without a socket")
                _TASK_FDS[:] = recv_fds(_FD_SOCK, int(n), 30.0)
            result = {"value": handler(task)}
        except BaseException as exc:  # noqa: BLE001 - the task failed, the worker did not
            if isinstance(exc, KeyboardInterrupt):
                raise
            tb = traceback.format_exc(limit=20)
            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": tb[-8000:]}
        finally:
            for fd in _TASK_FDS:
                _close(fd)
            _TASK_FDS.clear()
        sys.stdout.flush()
        sys.stderr.flush()
        out = list(_REPLY_FDS)
        _REPLY_FDS.clear()
        if out and "value" in result:
            result["_fds"] = len(out)
        send(out_fd, result)
        if out and "value" in result:
            send_fds(_FD_SOCK, out)
        for fd in out:
            _close(fd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
