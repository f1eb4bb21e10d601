"""The one door through which a process that will run untrusted code is started: a worker
forked from the fork server or a fresh interpreter, with its scratch folder, scrubbed
environment, uid, limits, Landlock plan and descriptors decided here, in the parent; and the
fork server itself (under the sandbox's argv)."""

from __future__ import annotations

import dataclasses
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import confine
from .deadline import Deadline
from .env import CACHE_DIR_VARS, scrubbed_env, with_package_root
from .limits import Limits, limits_dict, net_only, preexec
from .protocol import ProtocolError, drain_fds, recv, recv_fds, send, send_fds
from .sandbox import chown_tree, kill_uid, wait_uid_gone
from .zygote import Zygote


@dataclass(frozen=True)
class Spec:
    """What one worker process is started with. `env` holds the caller's settings (the pool's,
    then its session's), laid over the scrubbed parent environment."""

    handler: str
    setup: str | None = None
    index: int = 0
    env: dict[str, str] = field(default_factory=dict)
    limits: Limits = Limits()
    scratch_root: str | None = None
    uid: int | None = None   # None: the parent's


def worker_env(spec: Spec, scratch: Path) -> dict[str, str]:
    """The worker's whole environment: scrubbed, its scratch as HOME and TMPDIR, a compile
    cache folder of its own for every cache the caller did not name."""
    env = with_package_root(scrubbed_env({
        "HOME": str(scratch), "TMPDIR": str(scratch / "tmp"), "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1", **spec.env}))
    for var in CACHE_DIR_VARS:
        if var not in spec.env:
            # never the parent's own (torch sets TORCHINDUCTOR_CACHE_DIR in a process that
            # compiled once): one worker uid may not write into another's folders
            env[var] = str(scratch / "cache" / var.lower())
    if spec.uid is not None:
        # a uid with no passwd entry: getpass.getuser() (torch._inductor calls it on import)
        # reads these before it asks pwd, which raises KeyError for such a uid
        env["USER"] = env["LOGNAME"] = f"curate{spec.uid}"
    return env


def _hand_to_uid(spec: Spec, scratch: Path, env: dict[str, str]) -> None:
    """The worker's own uid owns its scratch and its row's cache folders, nothing else; the
    folders above them it may only pass through."""
    if spec.scratch_root:
        os.chmod(spec.scratch_root, os.stat(spec.scratch_root).st_mode | 0o111)
    for var in CACHE_DIR_VARS:
        if env.get(var):   # made by start_worker, uid or not
            chown_tree(env[var], spec.uid)
    chown_tree(str(scratch), spec.uid)


class WorkerProcess:
    """A started worker: its process (`subprocess.Popen` or `zygote.ForkedChild`), the parent's
    ends of its pipes, and the tail of its output, drained by a thread that kills the worker
    when it writes more than `output_bytes`."""

    def __init__(self, proc, task_w: int, res_r: int, fd_sock: socket.socket, scratch: Path,
                 uid: int | None, output_bytes: int):
        self.proc, self.task_w, self.res_r, self.fd_sock = proc, task_w, res_r, fd_sock
        self.scratch, self.uid, self.output_bytes = scratch, uid, output_bytes
        self.flooded = False
        self._out = bytearray()
        self._out_total = 0
        self._lock = threading.Lock()
        threading.Thread(target=self._drain, daemon=True).start()

    @property
    def pid(self) -> int:
        """Also its process group: each worker leads its own session."""
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def _drain(self) -> None:
        stream = self.proc.stdout
        while True:
            try:
                chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            with self._lock:
                self._out_total += len(chunk)
                self._out += chunk
                if len(self._out) > 65536:
                    del self._out[:-32768]
                flooded = self._out_total > self.output_bytes
            if flooded:
                self.flooded = True
                killpg(self.pid)

    def output(self) -> str:
        with self._lock:
            return self._out.decode("utf-8", "replace")

    def reset_output(self) -> None:
        """A new task: its output (and its flood allowance) starts from nothing."""
        self.flooded = False
        with self._lock:
            self._out, self._out_total = bytearray(), 0

    def wait(self, limit: Deadline):
        """The next message from the worker, or a failure tag. The limit counts only time the
        worker could run (see `Deadline`). A worker that died is noticed even when a child it
        left holds the pipe open."""
        dead_since = None
        while True:
            r, _, _ = select.select([self.res_r], [], [], 0.1)
            if r:
                try:
                    return recv(self.res_r)
                except (EOFError, OSError, ProtocolError):
                    return "crashed"
            if limit.expired():
                return "timeout"
            if self.poll() is not None:
                now = time.monotonic()
                dead_since = dead_since or now
                if now - dead_since > 0.5:  # what it wrote before dying has arrived by now
                    return "crashed"

    def exchange(self, task: Any, limit: Deadline, fds: list[int] | None,
                 accept_fds: bool) -> tuple[Any, list[int]]:
        """Send the task (and `fds`), wait for the answer (and the descriptors it announces)."""
        came: list[int] = []
        try:
            drain_fds(self.fd_sock)
            if fds:
                task = dict(task, _fds=len(fds))
            send(self.task_w, task)
            if fds:
                send_fds(self.fd_sock, fds)
            msg = self.wait(limit)
            if isinstance(msg, dict) and "value" in msg and msg.get("_fds"):
                n = msg["_fds"]
                if not isinstance(n, int) or not 0 < n <= 253:
                    raise ProtocolError(f"an answer announced {n!r} file descriptors")
                came = recv_fds(self.fd_sock, n, 10.0)
                if not accept_fds:
                    for fd in came:
                        os.close(fd)
                    came = []
        except (BrokenPipeError, OSError, ProtocolError):
            msg = "crashed"
        return msg, came

    def kill(self, keep_scratch: bool = False) -> None:
        """The worker's process group and (under the sandbox) every process of its uid, reaped;
        its pipes closed and its scratch removed."""
        killpg(self.pid)
        if self.uid is not None:
            kill_uid(self.uid)  # whatever it started, in any session: daemons included
            wait_uid_gone(self.uid)  # reaped, so the next worker of this uid is found alone
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.task_w, self.res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.stdout.close()
        except Exception:  # noqa: BLE001
            pass
        self.fd_sock.close()
        if not keep_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def start_worker(spec: Spec, server: Zygote | None = None) -> WorkerProcess:
    """Start one worker for `spec`: forked by `server`, or a fresh interpreter without one."""
    scratch = Path(tempfile.mkdtemp(prefix=f"curate-w{spec.index}-", dir=spec.scratch_root))
    (scratch / "tmp").mkdir()
    try:
        env = worker_env(spec, scratch)
        for var in CACHE_DIR_VARS:
            # made before the worker starts, with or without a uid of its own: Landlock can
            # only let a worker write under folders that exist when its rules are made (with
            # no bubblewrap, every C++ row ended compile_error, denied its build folder)
            if env.get(var):
                os.makedirs(env[var], exist_ok=True)
        if spec.uid is not None:
            _hand_to_uid(spec, scratch, env)
        plan = confine.plan(str(scratch), env, tuple(spec.limits.writable),
                            hide_home=spec.limits.hide_home) if spec.limits.confine else None
        # file descriptors beside the messages (sealed memory files of large outputs)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if server is not None:
                proc, task_w, res_r = server.spawn(
                    cwd=str(scratch), env=env, handler=spec.handler, setup=spec.setup,
                    limits=limits_dict(spec.limits),
                    confine=dataclasses.asdict(plan) if plan is not None else None,
                    uid=spec.uid, fd_sock=theirs.fileno())
            else:
                proc, task_w, res_r = _interpreter(spec, scratch, env, plan, theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return WorkerProcess(proc, task_w, res_r, ours, scratch, spec.uid,
                         spec.limits.output_bytes)


def _interpreter(spec: Spec, scratch: Path, env: dict[str, str], plan, fd_sock: int):
    """A fresh `python -m curate.isolation.worker` in a session of its own, limits applied
    before it runs anything."""
    task_r, task_w = os.pipe()
    res_r, res_w = os.pipe()
    cmd = [sys.executable, "-m", "curate.isolation.worker", str(task_r), str(res_w),
           spec.handler, spec.setup or "", str(fd_sock)]
    try:
        proc = subprocess.Popen(
            cmd, cwd=scratch, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, pass_fds=(task_r, res_w, fd_sock), start_new_session=True,
            preexec_fn=preexec(spec.limits, plan), close_fds=True)
    except BaseException:
        os.close(task_w)
        os.close(res_r)
        raise
    finally:
        os.close(task_r)
        os.close(res_w)
    return proc, task_w, res_r


def start_fork_server(preload: list[str], env: dict[str, str], limits: Limits, root: str,
                      start_timeout: float, sandbox: list[str] | None) -> Zygote:
    """The fork server: scrubbed `env` (every child's /proc/<pid>/environ is the server's), its
    `preload` imports, the network namespace its children inherit, under `sandbox` (argv)."""
    env = with_package_root(scrubbed_env({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                                          "HOME": root, **env}))
    return Zygote(preload, env, root, preexec=net_only(limits), start_timeout=start_timeout,
                  wrap=sandbox)
