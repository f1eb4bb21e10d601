"""A fork server: one process that has imported the heavy libraries (torch, the harness) but has
run no untrusted code and initialized no device, and forks a fresh child for every session.

No process that ran a candidate may serve another row (what it patched, hooked or left running
would carry over), and a fresh interpreter costs seconds of imports. A fork costs tens of
milliseconds. The server stays single-threaded and touches no device, so every child starts
from the same clean state and initializes CUDA itself.

    python -m curate.isolation.zygote CONTROL_FD PRELOAD[,PRELOAD...]

The parent (`Zygote`) sends `{"op": "fork", ...}` with the child's task, result and output
pipes attached (SCM_RIGHTS); the server answers `{"pid": N}` and later `{"exit": N, "code": C}`
(negative C: killed by signal -C), the way `subprocess.Popen.returncode` reads.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

_MSG = 1 << 20


# -- server side (its own process) ----------------------------------------------------------------
def _reap(ctrl: socket.socket) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        ctrl.send(json.dumps({"exit": pid, "code": code}).encode())


def _child(req: dict, fds: list[int], ctrl: socket.socket) -> None:
    """In the forked child: a session of its own, the pipes as stdio, then the worker loop."""
    code = 70
    try:
        ctrl.close()
        os.setsid()
        task_r, res_w, out_w = fds[:3]
        fd_sock = fds[3] if len(fds) > 3 else None
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        os.close(out_w)
        uid = req.get("uid")
        if uid is not None:  # a uid of its own: siblings cannot signal or ptrace it
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        import tempfile
        tempfile.tempdir = None  # the server's was cached before this child had its TMPDIR
        from .limits import apply_limits
        apply_limits(req.get("limits") or {}, req.get("confine"))
        from .worker import serve
        code = serve(task_r, res_w, req["handler"], req.get("setup") or "", fd_sock)
    except BaseException:  # noqa: BLE001 - a child never returns into the server's loop
        import traceback
        try:
            traceback.print_exc()
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass
    finally:
        os._exit(code)


def _kill_namespace() -> None:
    """Every process of this PID namespace but its init and this server: workers and whatever
    they started, daemons included (the namespace's init then ends, and the sandbox with it)."""
    try:
        os.kill(-1, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _refuse_initialized_cuda(preload: str) -> None:
    """A server whose imports initialized CUDA forks children that cannot use it ("Cannot
    re-initialize CUDA in forked subprocess" in every row): fail at start, naming the imports."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise RuntimeError(f"the fork server's imports ({preload}) initialized CUDA, so no forked "
                           "worker could use it: preload only what leaves CUDA uninitialized")


def main(argv: list[str]) -> int:
    ctrl = socket.socket(fileno=int(argv[0]))
    # "ns": started by bubblewrap in a PID namespace of its own, where kill(-1) reaches only the
    # sandbox (the pid check keeps it from ever reaching a host's processes)
    in_namespace = len(argv) > 2 and argv[2] == "ns" and os.getpid() < 100
    for spec in filter(None, (argv[1] if len(argv) > 1 else "").split(",")):
        optional = spec.startswith("?")  # "?triton": imported where installed
        mod, _, fn = spec.lstrip("?").partition(":")
        try:
            m = importlib.import_module(mod)
        except ImportError:
            if optional:
                continue
            raise
        if fn:
            getattr(m, fn)()
    _refuse_initialized_cuda(argv[1] if len(argv) > 1 else "")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    ctrl.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        r, _, _ = select.select([ctrl], [], [], 0.05)
        _reap(ctrl)
        if not r:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(ctrl, _MSG, 8)
        except OSError:
            data, fds = b"", []
        if not data:  # the parent went away (exited, or was killed)
            if in_namespace:
                _kill_namespace()
            return 0  # unsandboxed children are killed by their pool
        req = json.loads(data)
        if req.get("op") != "fork" or len(fds) not in (3, 4):
            for fd in fds:
                os.close(fd)
            ctrl.send(json.dumps({"error": "bad request"}).encode())
            continue
        pid = os.fork()
        if pid == 0:
            _child(req, fds, ctrl)
        for fd in fds:
            os.close(fd)
        ctrl.send(json.dumps({"pid": pid}).encode())


def _host_pid(uid: int, timeout: float = 10.0) -> int:
    """The pid, in this (the parent's) namespace, of the one process of `uid` (a fresh worker
    in a sandbox's PID namespace, whose own pid means nothing here). The pool waits for every
    earlier process of the uid to be gone before it forks the next."""
    from .sandbox import uid_pids
    deadline = time.monotonic() + timeout
    while True:
        found = uid_pids(uid)
        if found:
            return min(found)
        if time.monotonic() > deadline:
            raise RuntimeError(f"no process of uid {uid} after the fork")
        time.sleep(0.005)


# -- parent side --------------------------------------------------------------------------------
class ForkedChild:
    """A `subprocess.Popen`-like handle on a child of the fork server (which reaps it and
    reports its exit code)."""

    def __init__(self, server: "Zygote", pid: int, stdout):
        self.server, self.pid, self.stdout = server, pid, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(getattr(self, "ns_pid", self.pid))
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked child", timeout)
            self.server.wait_exit(0.05)
        return self.returncode


class Zygote:
    """Start the fork server with `env` (already scrubbed: every child's /proc/<pid>/environ is
    the server's), `preload` imports and the process-wide part of `limits` (network namespace);
    `spawn()` forks one child."""

    def __init__(self, preload: list[str], env: dict[str, str], cwd: str, preexec=None,
                 start_timeout: float = 300.0, wrap: list[str] | None = None):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = parent
        self.wrapped = bool(wrap)  # in a PID namespace: children's pids are the server's own
        cmd = list(wrap or []) + [sys.executable, "-m", "curate.isolation.zygote",
                                  str(child.fileno()), ",".join(preload)] + (["ns"] if wrap else [])
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     pass_fds=(child.fileno(),), start_new_session=True,
                                     preexec_fn=preexec, close_fds=True)
        child.close()
        self._err = bytearray()  # the server's own stderr, drained (a full pipe would stall it)
        self._exits: dict[int, int] = {}
        self._replies: list[dict] = []
        self._cond = threading.Condition()
        self._spawn_lock = threading.Lock()
        self.closed = False
        r, _, _ = select.select([self.sock], [], [], start_timeout)
        msg = self._read() if r else None
        if not (isinstance(msg, dict) and "ready" in msg):
            err = b""
            try:
                self.proc.kill()
                err = self.proc.communicate(timeout=10)[1] or b""
            except Exception:  # noqa: BLE001
                pass
            raise RuntimeError(f"fork server failed to start: {err.decode(errors='replace')[-2000:]}")
        threading.Thread(target=self._listen, daemon=True, name="zygote-listen").start()
        threading.Thread(target=self._drain_stderr, daemon=True, name="zygote-stderr").start()

    def _drain_stderr(self) -> None:
        while True:
            try:
                chunk = self.proc.stderr.read1(65536)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            self._err += chunk
            del self._err[:-8192]

    def stderr_tail(self) -> str:
        return bytes(self._err).decode("utf-8", "replace")

    def _read(self) -> Any:
        try:
            data = self.sock.recv(_MSG)
        except OSError:
            return None
        return json.loads(data) if data else None

    def _listen(self) -> None:
        while True:
            msg = self._read()
            with self._cond:
                if msg is None:
                    self.closed = True
                    self._cond.notify_all()
                    return
                if "exit" in msg:
                    self._exits[int(msg["exit"])] = int(msg["code"])
                else:
                    if "pid" in msg:
                        # a new child has this pid: an exit recorded for the pid is an earlier
                        # child's (pids are reused, soon in a sandbox's PID namespace, where
                        # inductor's compile subprocesses use thousands), not this one's
                        self._exits.pop(int(msg["pid"]), None)
                    self._replies.append(msg)
                self._cond.notify_all()

    @property
    def alive(self) -> bool:
        return not self.closed and self.proc.poll() is None

    def spawn(self, *, cwd: str, env: dict[str, str], handler: str, setup: str | None,
              limits: dict, confine: dict | None, uid: int | None = None,
              timeout: float = 30.0, fd_sock: int | None = None) -> tuple[ForkedChild, int, int]:
        """Fork a worker; returns (child, task_w, res_r), the parent's ends of its pipes.
        `fd_sock`: the worker's end of its socket for file descriptors (the caller's)."""
        task_r, task_w = os.pipe()
        res_r, res_w = os.pipe()
        out_r, out_w = os.pipe()
        req = {"op": "fork", "cwd": cwd, "env": env, "handler": handler, "setup": setup,
               "limits": limits, "confine": confine, "uid": uid}
        try:
            with self._spawn_lock:
                socket.send_fds(self.sock, [json.dumps(req).encode()],
                                [task_r, res_w, out_w] + ([fd_sock] if fd_sock is not None else []))
                reply = self._reply(timeout)
        except BaseException:
            for fd in (task_w, res_r, out_r):
                os.close(fd)
            raise
        finally:
            for fd in (task_r, res_w, out_w):
                os.close(fd)
        if not isinstance(reply, dict) or "pid" not in reply:
            for fd in (task_w, res_r, out_r):
                os.close(fd)
            raise RuntimeError(f"fork server refused: {reply!r}")
        ns_pid = int(reply["pid"])
        host_pid = ns_pid if not self.wrapped or uid is None else _host_pid(uid)
        child = ForkedChild(self, host_pid, os.fdopen(out_r, "rb", buffering=0))
        child.ns_pid = ns_pid
        return child, task_w, res_r

    def _reply(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        with self._cond:
            while not self._replies:
                left = deadline - time.monotonic()
                if self.closed or left <= 0:
                    return None
                self._cond.wait(left)
            return self._replies.pop(0)

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            if pid in self._exits:
                return self._exits[pid]
            return -9 if self.closed else None

    def wait_exit(self, timeout: float) -> None:
        with self._cond:
            self._cond.wait(timeout)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
