"""WorkerPool: a fixed number of sandboxed workers, each driven by one thread of the parent.
Dispatch and bookkeeping only: how a worker process is started lives in backend.py, how long a
task may run in deadline.py."""

from __future__ import annotations

import contextlib
import queue
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from . import backend, deadline
from .backend import WorkerProcess
from .env import hide_from_proc, redact, secret_values
from .freeze import Freezer
from .limits import Limits
from .zygote import Zygote


_ALL, _FAILED = object(), object()  # map's markers: every task read; reading failed


@dataclass
class TaskResult:
    """What happened to one task. `status` is ok, error (the handler raised), timeout, crashed
    (the process died or broke the protocol) or output_flood. `compiler_s`: seconds of a
    compiler's run that did not count against the timeout (`compiler_grace`)."""

    status: str
    value: Any = None
    error: str | None = None
    output: str = ""
    seconds: float = 0.0
    exit_code: int | None = None
    fds: list[int] = field(default_factory=list)  # came with the answer: the caller closes them
    compiler_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class _Slot:
    """One worker process and the thread of the parent that feeds it."""

    def __init__(self, pool: "WorkerPool", index: int):
        self.pool, self.index = pool, index
        self.worker: WorkerProcess | None = None
        self.tasks_done = 0
        self.pending_kill = False
        self.session_env: dict[str, str] = {}   # this session's own settings (its row's caches)
        self.started_env: dict[str, str] = {}   # the session settings the worker started with
        self.uid = pool.uid_base + index if pool.uid_base is not None else None

    @property
    def proc(self):
        return self.worker.proc if self.worker is not None else None

    @property
    def pid(self) -> int | None:
        return self.worker.pid if self.worker is not None else None

    @property
    def alive(self) -> bool:
        return self.worker is not None and self.worker.poll() is None

    def output(self) -> str:
        return self.worker.output() if self.worker is not None else ""

    # -- process lifecycle ---------------------------------------------------------------
    def ensure_started(self) -> bool:
        """A live worker started with this session's settings (they must be in its environment
        before its setup runs: verify pins a worker to its GPU this way); True if one started."""
        if self.alive and self.started_env == self.session_env:
            return False
        self.kill()  # dead, or started for another session's settings
        self.start()
        return True

    def start(self) -> None:
        p = self.pool
        p.started += 1
        spec = backend.Spec(handler=p.handler, setup=p.setup, index=self.index,
                            env={**p.env_extra, **self.session_env}, limits=p.limits,
                            scratch_root=p.scratch_root, uid=self.uid)
        self.worker = backend.start_worker(spec, p.zygote() if p.fork_server is not None
                                           else None)
        self.started_env = dict(self.session_env)
        if p.freezer is not None:
            p.freezer.add(self.worker.pid)
        ready = self.worker.wait(self._deadline(p.setup_timeout))
        if not (isinstance(ready, dict) and ready.get("ready")):
            out = self.output()
            self.kill()
            raise RuntimeError(f"worker failed to start ({ready!r}): {out[-2000:]}")

    def _deadline(self, timeout: float, grace: float = 0.0) -> deadline.Deadline:
        freezer, pid = self.pool.freezer, self.pid
        return deadline.Deadline(
            timeout, frozen=(lambda: freezer.frozen_s(pid)) if freezer and pid else lambda: 0.0,
            grace=grace, observe=lambda: deadline.compiling(pid))

    def kill(self) -> None:
        """The worker's process group (and, under the sandbox, its uid) killed; frozen time
        accounting for it dropped."""
        if self.worker is None:
            return
        if self.pool.freezer is not None:
            self.pool.freezer.discard(self.worker.pid)
        self.worker.kill(keep_scratch=self.pool.keep_scratch)
        self.worker = None

    # -- tasks ---------------------------------------------------------------------------
    def run(self, task: Any, timeout: float, defer_recycle: bool = False,
            fds: list[int] | None = None, accept_fds: bool = False,
            compiler_grace: float = 0.0) -> TaskResult:
        """One task on this worker, with `fds` (the caller's, still open after) beside it;
        descriptors in the answer are kept (`TaskResult.fds`) only with `accept_fds`.
        With `defer_recycle`, a worker that asks to be replaced lives on until
        `kill_if_pending()` (what it handed out is still in use)."""
        self.ensure_started()
        worker = self.worker
        worker.reset_output()
        limit = self._deadline(timeout, compiler_grace)
        msg, came = worker.exchange(task, limit, fds, accept_fds)
        res, recycle = self._result(msg, limit.elapsed(), came)
        res.compiler_s = round(limit.compiler_s, 3)
        if res.status not in ("ok", "error"):
            self.kill()  # replaced on the next task; reaped, so its last output has come
        res.output = worker.output()[-8000:]
        if self.pool.secrets:
            res.output = redact(res.output, self.pool.secrets)
            res.error = redact(res.error, self.pool.secrets)
            res.value = redact(res.value, self.pool.secrets)
        self.tasks_done += 1
        if recycle or (self.pool.max_tasks_per_worker
                       and self.tasks_done >= self.pool.max_tasks_per_worker):
            self.pool.recycled += 1
            if defer_recycle and self.worker is not None:
                self.pending_kill = True
            else:
                self.kill()
                self.tasks_done = 0
        return res

    def _result(self, msg: Any, secs: float, came: list[int]) -> tuple[TaskResult, bool]:
        """The task's result, and whether its worker asked to be replaced."""
        if isinstance(msg, dict) and "value" in msg:
            # a handler may ask for a fresh process after a task that left it unusable or
            # tampered with (e.g. a poisoned CUDA context, patched library functions)
            recycle = isinstance(msg["value"], dict) and bool(msg["value"].get("_recycle"))
            return TaskResult("ok", value=msg["value"], seconds=secs, fds=came), recycle
        if isinstance(msg, dict) and "error" in msg:
            return TaskResult("error", error=str(msg["error"]) + "\n"
                              + str(msg.get("traceback", "")), seconds=secs), False
        flooded = self.worker is not None and self.worker.flooded
        status = "output_flood" if flooded else msg if isinstance(msg, str) else "crashed"
        code = None
        if status != "timeout" and self.worker is not None:
            try:
                code = self.worker.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        return TaskResult(status, seconds=secs, exit_code=code), False

    def kill_if_pending(self) -> None:
        if self.pending_kill:
            self.pending_kill = False
            self.kill()
            self.tasks_done = 0


class HeldWorker:
    """A worker taken out of its pool by `WorkerPool.hold()`."""

    def __init__(self, pool: "WorkerPool", slot: _Slot):
        self.pool, self.slot = pool, slot
        self._served = False

    def call(self, task: Any, timeout: float | None = None, fds: list[int] | None = None,
             accept_fds: bool = False, compiler_grace: float = 0.0) -> TaskResult:
        """A worker of this session that died between two requests is a crash of the session,
        never replaced by a fresh process that knows nothing of it. `fds` go with the task;
        `compiler_grace` as in `WorkerPool.call`."""
        slot = self.slot
        if self._served and not slot.alive:
            code = slot.proc.returncode if slot.proc is not None else None
            out = slot.output()[-8000:]
            slot.kill()
            self.pool.replaced += 1
            return TaskResult("crashed", exit_code=code, output=out,
                              error="the worker died between two requests of its session"
                                    + self.pool.server_note())
        self._served = True
        return self.pool._run_on(slot, task, timeout, defer_recycle=True, fds=fds,
                                 accept_fds=accept_fds, compiler_grace=compiler_grace)

    @property
    def alive(self) -> bool:
        return self.slot.alive

    @property
    def pid(self) -> int | None:
        """The worker's process id (also its process group: each worker leads its own)."""
        return self.slot.pid

    def start(self) -> None:
        """Start the worker now (it starts on the first call otherwise)."""
        self.slot.ensure_started()


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
                self._zygote = backend.start_fork_server(
                    self.fork_server or [], self.env_extra, self.limits,
                    self.scratch_root or tempfile.gettempdir(), self.setup_timeout, self.sandbox)
            return self._zygote

    def call(self, task: Any, timeout: float | None = None, fds: list[int] | None = None,
             accept_fds: bool = False, compiler_grace: float = 0.0) -> TaskResult:
        """Run one task on whichever worker is free (blocking until one is); thread-safe, so
        many threads can drive the pool at once with tasks that depend on earlier results.
        Do not mix with a concurrent `map` on the same pool. `fds` as in `HeldWorker.call`.
        `compiler_grace`: up to this many seconds in which a descendant of the worker is a
        compiler (C++/CUDA builds) do not count against `timeout` (`TaskResult.compiler_s`)."""
        slot = self._free.get()
        try:
            return self._run_on(slot, task, timeout, fds=fds, accept_fds=accept_fds,
                                compiler_grace=compiler_grace)
        finally:
            if self.fresh:
                slot.kill()
            self._free.put(slot)

    def _run_on(self, slot: _Slot, task: Any, timeout: float | None,
                defer_recycle: bool = False, fds: list[int] | None = None,
                accept_fds: bool = False, compiler_grace: float = 0.0) -> TaskResult:
        try:
            res = slot.run(task, self.timeout if timeout is None else timeout, defer_recycle,
                           fds, accept_fds, compiler_grace)
        except Exception as exc:  # the worker could not even start
            res = TaskResult("crashed", error=f"worker start failed: {exc}")
            slot.kill()
        if res.status in ("timeout", "crashed", "output_flood"):
            self.replaced += 1
        return res

    @contextlib.contextmanager
    def hold(self, env: dict[str, str] | None = None) -> Iterator[HeldWorker]:
        """One worker kept for a sequence of tasks (e.g. while another process reads what it
        handed out); replaced, if it asked to be (or the pool is `fresh`), when the hold ends.
        `env`: settings of this session alone, in the worker's environment before its setup
        runs (a worker started for other settings is replaced)."""
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
        """(index, result) of every task as it finishes. `tasks` is read as it comes (a
        streaming build's rows arrive while earlier ones run): a worker takes the next task as
        soon as it is free, never waiting for a batch."""
        touts = iter(timeouts) if timeouts is not None else None
        todo: queue.Queue = queue.Queue()
        done: queue.Queue = queue.Queue()
        nslots = max(1, len(self.slots))
        if isinstance(tasks, (list, tuple)):  # no idle feeders for a short list
            nslots = max(1, min(nslots, len(tasks)))

        def produce():
            n = 0
            try:
                for t in tasks:
                    todo.put((n, t, next(touts) if touts is not None else self.timeout))
                    n += 1
            except BaseException as exc:  # handed to the caller, in its own thread
                done.put((_FAILED, exc))
            for _ in range(nslots):
                todo.put(None)
            done.put((_ALL, n))

        def feed(slot: _Slot):
            while (item := todo.get()) is not None:
                i, t, tout = item
                res = self._run_on(slot, t, tout)
                if self.fresh:
                    slot.kill()
                done.put((i, res))

        threads = [threading.Thread(target=produce, daemon=True)]
        threads += [threading.Thread(target=feed, args=(s,), daemon=True)
                    for s in self.slots[:nslots]]
        for th in threads:
            th.start()
        total, given = None, 0
        while total is None or given < total:
            i, res = done.get()
            if i is _ALL:
                total = res
            elif i is _FAILED:
                raise res
            else:
                given += 1
                yield i, res
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
