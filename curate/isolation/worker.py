"""The worker process: load the handler once, then answer tasks until the pipe closes.

    python -m curate.isolation.worker IN_FD OUT_FD HANDLER [SETUP]

HANDLER and SETUP are `module:function`. SETUP() runs once; HANDLER(task) runs per task and
returns a JSON-able dict. An exception in the handler is an answer ({"error": ...}), not a crash.
"""

from __future__ import annotations

import importlib
import os
import sys
import traceback

from .protocol import recv, send


def _load(spec: str):
    mod, _, attr = spec.partition(":")
    return getattr(importlib.import_module(mod), attr)


def main(argv: list[str]) -> int:
    return serve(int(argv[0]), int(argv[1]), argv[2], argv[3] if len(argv) > 3 else "")


def serve(in_fd: int, out_fd: int, handler_spec: str, setup_spec: str = "") -> int:
    """Answer tasks from `in_fd` on `out_fd` until the pipe closes (also the body of a worker
    forked by curate.isolation.zygote)."""
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
            result = {"value": handler(task)}
        except BaseException as exc:  # noqa: BLE001 - the task failed, the worker did not
            if isinstance(exc, KeyboardInterrupt):
                raise
            tb = traceback.format_exc(limit=20)
            result = {"error": f"{type(exc).__name__}: {exc}", "traceback": tb[-8000:]}
        sys.stdout.flush()
        sys.stderr.flush()
        send(out_fd, result)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
