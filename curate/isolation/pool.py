"""WorkerPool: a fixed number of sandboxed workers, each driven by one thread of the parent."""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import queue
import re
import resource
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
from typing import Any, Iterable, Iterator

from . import confine
from .freeze import Freezer
from .sandbox import chown_tree, kill_uid, wait_uid_gone
from .zygote import Zygote
from .protocol import ProtocolError, drain_fds, recv, recv_fds, send, send_fds

# Environment variables a candidate must never see: anything named like a credential, and the
# variables of services that hold one.
SECRET_NAME = re.compile(r"TOKEN|KEY|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|CREDS|AUTH|"
                         r"COOKIE|SESSION|BEARER|PRIVATE|WEBHOOK|_DSN$", re.IGNORECASE)
SECRET_PREFIXES = ("HF_", "HUGGING", "OPENAI", "ANTHROPIC", "AWS_", "AZURE_", "GOOGLE_", "GH_",
                   "GITHUB_", "WANDB_", "SSH_", "GIT_")
CLONE_NEWNET = 0x40000000


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without credentials, plus `extra` (caller's settings win)."""
    env = {k: v for k, v in os.environ.items()
           if not SECRET_NAME.search(k) and not k.upper().startswith(SECRET_PREFIXES)}
    env.update(extra or {})
    return env


def secret_values() -> list[str]:
    """Credentials this process could leak to a worker that reads them from disk (token files)
    or that the parent holds (environment): what `redact` removes from everything a worker
    sends back, so that a candidate cannot publish them through an error message."""
    vals = {v for k, v in os.environ.items()
            if (SECRET_NAME.search(k) or k.upper().startswith(SECRET_PREFIXES)) and len(v) >= 8}
    home = os.path.expanduser("~")
    for f in (os.environ.get("HF_TOKEN_PATH"), os.path.join(home, ".cache/huggingface/token"),
              os.path.join(home, ".huggingface/token")):
        try:
            if f and os.path.isfile(f):
                tok = Path(f).read_text().strip()
                if len(tok) >= 8:
                    vals.add(tok)
        except OSError:
            pass
    return sorted(vals, key=len, reverse=True)


def hide_from_proc(values: list[str]) -> bool:
    """Overwrite `values` in this process's initial environment block, which other processes of
    the same user read as /proc/<pid>/environ (a worker can read its parent's: on kernels where
    Landlock does not scope ptrace-style access, root candidates can). `os.environ` is a copy
    and keeps them. Best effort: False where /proc/self/mem is not writable."""
    if not values or not sys.platform.startswith("linux"):
        return False
    try:
        stat = Path("/proc/self/stat").read_text()
        fields = stat[stat.rindex(")") + 2:].split()
        start, end = int(fields[47]), int(fields[48])  # env_start, env_end
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            block = mem.read(end - start)
            new = block
            for v in values:
                b = v.encode()
                new = new.replace(b, b"*" * len(b)) if b else new
            if new == block:
                return False
            mem.seek(start)
            mem.write(new)
        return True
    except (OSError, ValueError, IndexError):
        return False


def redact(obj: Any, secrets: list[str]) -> Any:
    """`obj` (str, or JSON-like containers of them) with every secret replaced."""
    if not secrets:
        return obj
    if isinstance(obj, str):
        for sec in secrets:
            if sec in obj:
                obj = obj.replace(sec, "[redacted]")
        return obj
    if isinstance(obj, list):
        return [redact(v, secrets) for v in obj]
    if isinstance(obj, dict):
        return {k: redact(v, secrets) for k, v in obj.items()}
    return obj


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


@dataclass
class TaskResult:
    """What happened to one task. `status` is ok, error (the handler raised), timeout, crashed
    (the process died or broke the protocol) or output_flood."""

    status: str
    value: Any = None
    error: str | None = None
    output: str = ""
    seconds: float = 0.0
    exit_code: int | None = None
    fds: list[int] = field(default_factory=list)  # came with the answer: the caller closes them

    @property
    def ok(self) -> bool:
        return self.status == "ok"


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
        _unshare_net()
    if plan is not None:
        confine.apply(confine.Plan(**plan))  # best effort: no Landlock leaves writes open


def _limits_dict(limits: Limits) -> dict:
    return {"file_size_gb": limits.file_size_gb, "open_files": limits.open_files,
            "memory_gb": limits.memory_gb}


def _preexec(limits: Limits, plan: "confine.Plan | None" = None):
    d = _limits_dict(limits)
    pd = dataclasses.asdict(plan) if plan is not None else None

    def run():
        apply_limits(d, pd, network=limits.isolate_network)
    return run


def _unshare_net() -> None:
    """An empty network namespace (as root on Linux); best effort: loopback-only, down."""
    if os.geteuid() == 0 and sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)


def _net_only(limits: Limits):
    """The fork server's own set-up: the network namespace, which its children inherit."""
    def run():
        if limits.isolate_network:
            _unshare_net()
    return run


class _Slot:
    """One worker process and the thread of the parent that feeds it."""

    def __init__(self, pool: "WorkerPool", index: int):
        self.pool, self.index = pool, index
        self.proc = None  # subprocess.Popen, or zygote.ForkedChild
        self.scratch: Path | None = None
        self.tasks_done = 0
        self.pending_kill = False
        self.flooded = False
        self._out = bytearray()
        self._out_total = 0
        self._lock = threading.Lock()
        self.session_env: dict[str, str] = {}   # this session's own settings (its row's caches)
        self.uid = pool.uid_base + index if pool.uid_base is not None else None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    # -- process lifecycle ---------------------------------------------------------------
    def start(self) -> None:
        p = self.pool
        self.scratch = Path(tempfile.mkdtemp(prefix=f"curate-w{self.index}-", dir=p.scratch_root))
        (self.scratch / "tmp").mkdir()
        env = scrubbed_env({"HOME": str(self.scratch), "TMPDIR": str(self.scratch / "tmp"),
                            "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                            **p.env_extra, **self.session_env})
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PKG_ROOT, env.get("PYTHONPATH")]))
        for var in CACHE_DIR_VARS:  # named, so nothing falls back to a path the server cached
            if var not in p.env_extra and var not in self.session_env:
                # never the parent's own (torch sets TORCHINDUCTOR_CACHE_DIR in a process that
                # compiled once): one worker uid may not write into another's folders
                env[var] = str(self.scratch / "cache" / var.lower())
        if self.uid is not None:
            # a uid with no passwd entry: getpass.getuser() (torch._inductor calls it on import)
            # reads these before it asks pwd, which raises KeyError for such a uid
            env["USER"] = env["LOGNAME"] = f"curate{self.uid}"
            # the worker's own uid owns its scratch and its row's cache folders, nothing else;
            # the folders above them it may only pass through
            for d in (p.scratch_root,):
                if d:
                    os.chmod(d, os.stat(d).st_mode | 0o111)
            for var in CACHE_DIR_VARS:
                if env.get(var):
                    os.makedirs(env[var], exist_ok=True)
                    chown_tree(env[var], self.uid)
            chown_tree(str(self.scratch), self.uid)
        plan = confine.plan(str(self.scratch), env, tuple(p.limits.writable),
                            hide_home=p.limits.hide_home) if p.limits.confine else None
        # file descriptors beside the messages (sealed memory files of large outputs)
        self.fd_sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if p.fork_server is not None:
                zyg = p.zygote()
                self.proc, self.task_w, self.res_r = zyg.spawn(
                    cwd=str(self.scratch), env=env, handler=p.handler, setup=p.setup,
                    limits=_limits_dict(p.limits),
                    confine=dataclasses.asdict(plan) if plan is not None else None,
                    uid=self.uid, fd_sock=theirs.fileno())
            else:
                task_r, task_w = os.pipe()
                res_r, res_w = os.pipe()
                cmd = [sys.executable, "-m", "curate.isolation.worker", str(task_r),
                       str(res_w), p.handler, p.setup or "", str(theirs.fileno())]
                self.proc = subprocess.Popen(
                    cmd, cwd=self.scratch, env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    pass_fds=(task_r, res_w, theirs.fileno()), start_new_session=True,
                    preexec_fn=_preexec(p.limits, plan), close_fds=True)
                os.close(task_r)
                os.close(res_w)
                self.task_w, self.res_r = task_w, res_r
        finally:
            theirs.close()
        if p.freezer is not None:
            p.freezer.add(self.proc.pid)
        self._out, self._out_total = bytearray(), 0
        threading.Thread(target=self._drain, args=(self.proc,), daemon=True).start()
        ready = self._wait(p.setup_timeout)
        if not (isinstance(ready, dict) and ready.get("ready")):
            out = self.output()
            self.kill()
            raise RuntimeError(f"worker failed to start ({ready!r}): {out[-2000:]}")

    def _drain(self, proc) -> None:
        """Keep the tail of the worker's output; kill it when it floods."""
        assert proc.stdout is not None
        while True:
            try:
                chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else \
                    proc.stdout.read(65536)
            except (OSError, ValueError):
                return
            if not chunk:
                return
            with self._lock:
                self._out_total += len(chunk)
                self._out += chunk
                if len(self._out) > 65536:
                    del self._out[:-32768]
                flooded = self._out_total > self.pool.limits.output_bytes
            if flooded and proc is self.proc:
                self.flooded = True
                self._killpg(proc)

    def output(self) -> str:
        with self._lock:
            return self._out.decode("utf-8", "replace")

    def _wait(self, timeout: float):
        """The next message from the worker, or a failure tag. The limit counts only time the
        worker could run: seconds it spent frozen (another pair was being timed) are added
        back. A worker that died is noticed even when a child it left holds the pipe open."""
        t0 = time.monotonic()
        pid = self.pid
        frozen0 = self.pool.freezer.frozen_s(pid) if self.pool.freezer and pid else 0.0
        dead_since = None
        while True:
            r, _, _ = select.select([self.res_r], [], [], 0.1)
            if r:
                try:
                    return recv(self.res_r)
                except (EOFError, OSError, ProtocolError):
                    return "crashed"
            now = time.monotonic()
            frozen = (self.pool.freezer.frozen_s(pid) - frozen0) if self.pool.freezer and pid \
                else 0.0
            if now - t0 - frozen > timeout:
                return "timeout"
            if self.proc is None or self.proc.poll() is not None:
                dead_since = dead_since or now
                if now - dead_since > 0.5:  # what it wrote before dying has arrived by now
                    return "crashed"

    @staticmethod
    def _killpg(proc) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def kill(self) -> None:
        if self.proc is None:
            return
        if self.pool.freezer is not None:
            self.pool.freezer.discard(self.proc.pid)
        self._killpg(self.proc)
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
        if getattr(self, "fd_sock", None) is not None:
            self.fd_sock.close()
            self.fd_sock = None
        if self.scratch and not self.pool.keep_scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)
        self.proc = None

    # -- tasks ---------------------------------------------------------------------------
    def run(self, task: Any, timeout: float, defer_recycle: bool = False,
            fds: list[int] | None = None, accept_fds: bool = False) -> TaskResult:
        """One task on this worker, with `fds` (the caller's, still open after) beside it;
        descriptors in the answer are kept (`TaskResult.fds`) only with `accept_fds`.
        With `defer_recycle`, a worker that asks to be replaced lives on until
        `kill_if_pending()` (what it handed out is still in use)."""
        if self.proc is None or self.proc.poll() is not None:
            self.kill()
            self.start()
        self.flooded = False
        with self._lock:
            self._out, self._out_total = bytearray(), 0
        t0 = time.monotonic()
        came: list[int] = []
        try:
            drain_fds(self.fd_sock)
            if fds:
                task = dict(task, _fds=len(fds))
            send(self.task_w, task)
            if fds:
                send_fds(self.fd_sock, fds)
            msg = self._wait(timeout)
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
        secs = time.monotonic() - t0
        recycle = False
        if isinstance(msg, dict) and "value" in msg:
            res = TaskResult("ok", value=msg["value"], seconds=secs, fds=came)
            # a handler may ask for a fresh process after a task that left it unusable or
            # tampered with (e.g. a poisoned CUDA context, patched library functions)
            recycle = isinstance(msg["value"], dict) and bool(msg["value"].get("_recycle"))
        elif isinstance(msg, dict) and "error" in msg:
            res = TaskResult("error", error=str(msg["error"]) + "\n" + str(msg.get("traceback", "")),
                             seconds=secs)
        else:
            status = "output_flood" if self.flooded else msg if isinstance(msg, str) else "crashed"
            code = None
            if status != "timeout" and self.proc is not None:
                try:
                    code = self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            res = TaskResult(status, seconds=secs, exit_code=code)
            self.kill()  # replaced on the next task
        res.output = self.output()[-8000:]
        if self.pool.secrets:
            res.output = redact(res.output, self.pool.secrets)
            res.error = redact(res.error, self.pool.secrets)
            res.value = redact(res.value, self.pool.secrets)
        self.tasks_done += 1
        if recycle or (self.pool.max_tasks_per_worker
                       and self.tasks_done >= self.pool.max_tasks_per_worker):
            self.pool.recycled += 1
            if defer_recycle and self.proc is not None:
                self.pending_kill = True
            else:
                self.kill()
                self.tasks_done = 0
        return res

    def kill_if_pending(self) -> None:
        if self.pending_kill:
            self.pending_kill = False
            self.kill()
            self.tasks_done = 0


_PKG_ROOT = str(Path(__file__).resolve().parents[2])
CACHE_DIR_VARS = ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TORCH_EXTENSIONS_DIR")


class HeldWorker:
    """A worker taken out of its pool by `WorkerPool.hold()`."""

    def __init__(self, pool: "WorkerPool", slot: _Slot):
        self.pool, self.slot = pool, slot
        self._served = False

    def call(self, task: Any, timeout: float | None = None,
             fds: list[int] | None = None, accept_fds: bool = False) -> TaskResult:
        """A worker of this session that died between two requests is a crash of the session,
        never replaced by a fresh process that knows nothing of it. `fds` go with the task."""
        slot = self.slot
        if self._served and (slot.proc is None or slot.proc.poll() is not None):
            code = slot.proc.returncode if slot.proc is not None else None
            out = slot.output()[-8000:]
            slot.kill()
            self.pool.replaced += 1
            return TaskResult("crashed", exit_code=code, output=out,
                              error="the worker died between two requests of its session"
                                    + self.pool.server_note())
        self._served = True
        return self.pool._run_on(slot, task, timeout, defer_recycle=True, fds=fds,
                                 accept_fds=accept_fds)

    @property
    def alive(self) -> bool:
        return self.slot.proc is not None and self.slot.proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The worker's process id (also its process group: each worker leads its own)."""
        return self.slot.pid

    def start(self) -> None:
        """Start the worker now (it starts on the first call otherwise)."""
        if not self.alive:
            self.slot.kill()
            self.pool.started += 1
            self.slot.start()


class WorkerPool:
    """`workers` sandboxed processes running `handler` (`module:function`) on tasks.

    `map(tasks)` yields `(index, TaskResult)` as tasks finish, in any order. With `fresh`, no
    process serves more than one task, or one `hold()`: untrusted code never meets a later
    row's work. With `fork_server` (a list of `module[:function]` to import first), workers are
    forked from a server that imported them once, instead of starting a new interpreter.
    `freezer` (shared between pools) lets a timed pair stop every other worker.
    """

    def __init__(self, handler: str, *, workers: int = 1, timeout: float = 120.0,
                 setup: str | None = None, setup_timeout: float = 300.0,
                 env: dict[str, str] | None = None, limits: Limits = Limits(),
                 scratch_root: str | None = None, keep_scratch: bool = False,
                 max_tasks_per_worker: int | None = None, fresh: bool = False,
                 fork_server: list[str] | None = None, freezer: Freezer | None = None,
                 sandbox: list[str] | None = None, uid_base: int | None = None):
        self.handler, self.setup = handler, setup
        self.workers, self.timeout, self.setup_timeout = max(1, workers), timeout, setup_timeout
        self.env_extra = dict(env or {})
        self.limits, self.scratch_root, self.keep_scratch = limits, scratch_root, keep_scratch
        self.max_tasks_per_worker = max_tasks_per_worker
        self.fresh, self.fork_server, self.freezer = fresh, fork_server, freezer
        # `sandbox`: a command prefix (bubblewrap) the fork server runs under; `uid_base`: the
        # uid of slot 0 (slot i gets uid_base + i), None to keep the parent's
        self.sandbox, self.uid_base = sandbox, uid_base
        self.slots = [_Slot(self, i) for i in range(self.workers)]
        self.replaced = 0   # workers that died, hung or flooded
        self.recycled = 0   # workers replaced on purpose (asked to be, or max_tasks_per_worker)
        self.started = 0    # worker processes started
        self.secrets = secret_values()
        hide_from_proc(self.secrets)
        self._zygote: Zygote | None = None
        self._server_of: WorkerPool | None = None
        self._zygote_lock = threading.Lock()
        self._free: queue.Queue = queue.Queue()
        for s in self.slots:
            self._free.put(s)

    def share_server(self, other: "WorkerPool") -> None:
        """Fork this pool's workers from `other`'s server (same environment and limits): one
        server's imports instead of one per pool."""
        self._server_of = other

    def server_note(self) -> str:
        """Why the fork server is gone, where it is ('' while it runs)."""
        zyg = self._server_of._zygote if self._server_of is not None else self._zygote
        if zyg is None or zyg.alive:
            return ""
        return f" (its fork server exited, code {zyg.proc.poll()}: {zyg.stderr_tail()[-300:]})"

    def zygote(self) -> Zygote:
        """The fork server, started on first use (and again if it died)."""
        if self._server_of is not None:
            return self._server_of.zygote()
        with self._zygote_lock:
            if self._zygote is None or not self._zygote.alive:
                if self._zygote is not None:
                    self._zygote.close()
                root = self.scratch_root or tempfile.gettempdir()
                env = scrubbed_env({"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1",
                                    "HOME": root, **self.env_extra})
                env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PKG_ROOT,
                                                                  env.get("PYTHONPATH")]))
                self._zygote = Zygote(self.fork_server or [], env, root,
                                      preexec=_net_only(self.limits),
                                      start_timeout=self.setup_timeout, wrap=self.sandbox)
            return self._zygote

    def call(self, task: Any, timeout: float | None = None,
             fds: list[int] | None = None, accept_fds: bool = False) -> TaskResult:
        """Run one task on whichever worker is free (blocking until one is); thread-safe, so
        many threads can drive the pool at once with tasks that depend on earlier results.
        Do not mix with a concurrent `map` on the same pool. `fds` as in `HeldWorker.call`."""
        slot = self._free.get()
        try:
            return self._run_on(slot, task, timeout, fds=fds, accept_fds=accept_fds)
        finally:
            if self.fresh:
                slot.kill()
            self._free.put(slot)

    def _run_on(self, slot: "_Slot", task: Any, timeout: float | None,
                defer_recycle: bool = False, fds: list[int] | None = None,
                accept_fds: bool = False) -> TaskResult:
        if slot.proc is None:
            self.started += 1
        try:
            res = slot.run(task, self.timeout if timeout is None else timeout, defer_recycle,
                           fds, accept_fds)
        except Exception as exc:  # the worker could not even start
            res = TaskResult("crashed", error=f"worker start failed: {exc}")
            slot.kill()
        if res.status in ("timeout", "crashed", "output_flood"):
            self.replaced += 1
        return res

    @contextlib.contextmanager
    def hold(self, env: dict[str, str] | None = None) -> Iterator["HeldWorker"]:
        """One worker kept for a sequence of tasks (e.g. while another process reads what it
        handed out); replaced, if it asked to be (or the pool is `fresh`), when the hold ends.
        `env`: settings of this session alone (a fresh pool's worker starts with them)."""
        slot = self._free.get()
        slot.session_env = dict(env or {})
        try:
            yield HeldWorker(self, slot)
        finally:
            if self.fresh:
                slot.kill()
            else:
                slot.kill_if_pending()
            slot.session_env = {}
            self._free.put(slot)

    def map(self, tasks: Iterable[Any], timeouts: Iterable[float] | None = None
            ) -> Iterator[tuple[int, TaskResult]]:
        tasks = list(tasks)
        touts = list(timeouts) if timeouts is not None else [self.timeout] * len(tasks)
        todo: queue.Queue = queue.Queue()
        for i, t in enumerate(tasks):
            todo.put((i, t))
        done: queue.Queue = queue.Queue()

        def feed(slot: _Slot):
            while True:
                try:
                    i, t = todo.get_nowait()
                except queue.Empty:
                    return
                res = self._run_on(slot, t, touts[i])
                if self.fresh:
                    slot.kill()
                done.put((i, res))

        threads = [threading.Thread(target=feed, args=(s,), daemon=True)
                   for s in self.slots[:max(1, min(len(self.slots), len(tasks)))]]
        for th in threads:
            th.start()
        for _ in range(len(tasks)):
            yield done.get()
        for th in threads:
            th.join()

    def run(self, task: Any, timeout: float | None = None) -> TaskResult:
        return next(self.map([task], None if timeout is None else [timeout]))[1]

    def close(self) -> None:
        for s in self.slots:
            s.kill()
        if self._zygote is not None:
            self._zygote.close()
            self._zygote = None

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *_):
        self.close()
