"""The trusted side of verify: start (placement, devices and their pools), verify (a thread per
row in flight, results as rows finish), close.

    with Verifier(device="cpu") as v:
        for index, result in v.verify(rows):     # as rows finish, in any order
            print(index, result.status, result.speedup)
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..isolation.freeze import Freezer
from ..isolation.sandbox import SandboxUnavailable  # noqa: F401 - where callers import it
from .budget import Budget
from .config import VerifyConfig, visible_gpus
from .findings import Finding
from .gates import static_findings
from .opinion import close as close_opinion
from .placement import UID_COMPILE, UID_DEVICES, UID_PER_DEVICE, Placement, decide
from .record import assemble
from .result import STATUSES, VerifyResult, infer_backend  # noqa: F401 - re-exported
from .row import RowRun, WholeDevice
from .scheduler import GPU_SHARE, Device, MemoryGate, Scheduler
from .watch import InFlight, Watchdog

log = logging.getLogger("curate.verify")


class Verifier:
    """Verify pairs on `device` ("cpu" or "cuda"; on the GPU every device in `devices`, default
    all visible). Every row gets a VerifyResult; nothing raises for a bad pair. Options: see
    `VerifyConfig` (`timeout` bounds every phase of a row, `compile_timeout` what a compiler may
    add)."""

    def __init__(self, device: str = "cpu", **options):
        self.cfg = VerifyConfig(device=device, **options)
        self.budget = Budget(self.cfg.timeout, self.cfg.compile_timeout)
        self.secret = os.urandom(16)   # which calls are checked, their scales: no worker sees it
        self.freezer = Freezer()
        self.inflight = InFlight()
        self.placement: Placement | None = None
        self.scheduler: Scheduler | None = None
        self.compile_pool = None
        self.tmp: Path | None = None
        self.stats: Counter = Counter()
        self.phase_s: Counter = Counter()
        self.second_shape: Counter = Counter()   # verified rows: checked, or why not
        self.timed_wall_s = 0.0
        self.startup_s = 0.0     # placement's probes and the pools, before the first row
        self._env_info = _local_versions()
        self._lock = threading.Lock()
        self._watchdog: Watchdog | None = None
        # what a closed verifier still reports (stats.json is written after close)
        self._closed: dict = {"devices": [], "replaced": 0}
        # on the GPU, an out-of-memory row may only have met other rows' tensors: run it again
        # alone on its device at the end (on the CPU the limit is the worker's own)
        self.retry_oom_alone = self.cfg.device == "cuda"

    # -- what callers read -------------------------------------------------------------------
    device = property(lambda self: self.cfg.device)
    workers = property(lambda self: self.cfg.workers)
    trials = property(lambda self: self.cfg.trials)
    timeout = property(lambda self: self.cfg.timeout)
    cpu_threads = property(lambda self: self.cfg.cpu_threads)
    sandbox = property(lambda self: self.placement.sandbox if self.placement else None)
    sandbox_probe = property(lambda self: self.placement.sandbox_probe if self.placement
                             else None)
    transport = property(lambda self: self.placement.transport if self.placement
                         else self.cfg.transport)
    confined = property(lambda self: self.placement.confined if self.placement else None)
    retimed = property(lambda self: self.stats["retimed"])

    def config(self) -> dict:
        return self.cfg.key()

    @property
    def devices(self) -> list[Device]:
        return self.scheduler.devices if self.scheduler else self._closed["devices"]

    @property
    def replaced(self) -> int:
        """Workers replaced so far, those of pools already closed included."""
        return self._closed["replaced"] + sum(p.replaced for p in self._pools())

    def device_report(self) -> dict:
        """Per device: the rows it finished and where its time went (stats.json)."""
        return {"devices": [d.name for d in self.devices],
                "rows_per_device": {d.name: d.done for d in self.devices},
                "device_gate": {d.name: d.gate.report() for d in self.devices}}

    def _pools(self):
        pools = [p for d in self.devices for p in d.pools.values()]
        return pools + ([self.compile_pool] if self.compile_pool else [])

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self) -> None:
        if self.scheduler is not None:
            return
        cfg, t0 = self.cfg, time.monotonic()
        self.tmp = Path(tempfile.mkdtemp(prefix="curate-verify-"))
        os.chmod(self.tmp, 0o711)  # workers of their own uids pass through to their scratch
        for sub in ("", "ext", "triton", "inductor"):
            d = cfg.cache_dir / sub
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, os.stat(d).st_mode | 0o111)   # pass through to a row's folder, list none
        scratch = str(self.tmp / "scratch")
        os.makedirs(scratch, exist_ok=True)
        gpus = (cfg.devices or visible_gpus()) if cfg.device == "cuda" else [None]
        if not gpus:
            raise RuntimeError("verify --device cuda found no GPU: use --device cpu")
        self.placement = p = decide(cfg, scratch, gpus[0])
        devices = []
        for n, index in enumerate(gpus):
            dev = Device(index=index)
            dev.memory = MemoryGate(p.total_gb * GPU_SHARE if p.total_gb else
                                    dev.memory.capacity, slots=cfg.workers)
            off = UID_DEVICES + n * UID_PER_DEVICE
            dev.pools = {"candidate": p.pool(cfg, cfg.workers, off, self.freezer, dev.env()),
                         "judge": p.pool(cfg, cfg.workers, off + UID_PER_DEVICE // 2,
                                         self.freezer, dev.env())}
            devices.append(dev)
        self.scheduler = Scheduler(devices)
        # the probes' fork server, already up, serves every pool (one import of torch a run)
        first = p.server or devices[0].pools["judge"]
        for dev in devices:
            for pool in dev.pools.values():
                if pool is not first:
                    pool.share_server(first)
        if cfg.compile_ahead:
            self.compile_pool = p.pool(cfg, cfg.compile_workers, UID_COMPILE, self.freezer,
                                       devices[0].env())
            self.compile_pool.share_server(first)
        self._watchdog = Watchdog(self.inflight)
        self._watchdog.start()
        self.startup_s = time.monotonic() - t0

    def close(self) -> None:
        close_opinion()
        if self._watchdog is not None:
            self._watchdog.stop()
        if self.scheduler is not None:
            self._closed = {"devices": self.scheduler.devices, "replaced": self.replaced}
            self.scheduler.close()
            self.scheduler = None
        if self.compile_pool is not None:
            self.compile_pool.close()
            self.compile_pool = None
        if self.placement is not None and self.placement.server is not None:
            self.placement.server.close()
            self.placement.server = None
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self) -> Verifier:
        self.start()
        return self

    def __exit__(self, *_):
        self.close()

    # -- the work -----------------------------------------------------------------------------
    def verify(self, rows: Iterable[dict]) -> Iterator[tuple[int, VerifyResult]]:
        """Yield `(index, VerifyResult)` for every row as it finishes. `rows` is read as it
        comes (a streaming build's rows arrive while earlier ones run): each row starts as soon
        as it arrives."""
        it = iter(rows)
        first = next(it, None)
        if first is None:
            return
        self.start()
        self.inflight.restart()
        threads = max(2 * self.cfg.workers * len(self.devices) + self.cfg.compile_workers + 1,
                      256 if not isinstance(rows, list) else min(len(rows), 256))
        seen: list[dict] = []
        alone, retried = [], set()
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="verify-row") as ex:
            for i, res in self._as_finished(ex, itertools.chain([first], it), seen):
                if res is None:
                    alone.append(i)     # too large to share its device
                elif self.retry_oom_alone and "out_of_memory" in res.reasons:
                    alone.append(i)     # the device was full of other rows' tensors
                    retried.add(i)
                else:
                    yield i, self._count(res)
        for i in sorted(alone):   # alone on its device, once the rows that share it are done
            res = self._one(i, seen[i], exclusive=True)
            res.notes["alone_retry" if i in retried else "alone"] = True
            yield i, self._count(res)

    def _as_finished(self, ex: ThreadPoolExecutor, rows: Iterator[dict], seen: list[dict]
                     ) -> Iterator[tuple[int, VerifyResult]]:
        """Every row started as it is read (into `seen`), its result given as it finishes."""
        done: queue.Queue = queue.Queue()

        def submit_all():
            try:
                for i, row in enumerate(rows):
                    seen.append(row)
                    ex.submit(self._one, i, row).add_done_callback(
                        lambda f, i=i: done.put((i, f)))
                done.put((None, len(seen)))
            except BaseException as exc:  # raised to the caller, in its thread
                done.put((None, exc))

        threading.Thread(target=submit_all, daemon=True, name="verify-feed").start()
        total, given = None, 0
        while total is None or given < total:
            i, f = done.get()
            if i is None:
                if isinstance(f, BaseException):
                    raise f
                total = f
                continue
            given += 1
            yield i, f.result()

    def verify_one(self, row: dict) -> VerifyResult:
        return next(self.verify([row]))[1]

    def _one(self, index: int, row: dict, exclusive: bool = False) -> VerifyResult | None:
        """The row's result; None where it must run alone on its device (`WholeDevice`)."""
        t0 = time.monotonic()
        run = None
        try:
            run = RowRun(self, index, row, exclusive)
            res = run.verify()
        except WholeDevice:
            return None
        except Exception as exc:  # a harness bug costs the row, loudly
            log.error("verify failed on row %s: %s", row.get("id"), traceback.format_exc())
            res = VerifyResult(status="runtime_error", reasons=["harness_error"],
                               error=f"{type(exc).__name__}: {exc}")
        finally:
            self.inflight.leave(index)
        res.seconds = time.monotonic() - t0
        res.sandbox = self.sandbox
        for k, v in self._env_info.items():
            if not k.startswith("_") and getattr(res, k) is None:
                setattr(res, k, v)
        if self.cfg.device == "cpu":
            res.gpu = None
        try:
            res.verification = assemble(self, row, run, res)
        except Exception:  # noqa: BLE001 - a record that cannot be written costs the record
            log.error("verify: no record for row %s: %s", row.get("id"), traceback.format_exc())
        return res

    def _count(self, res: VerifyResult) -> VerifyResult:
        with self._lock:
            self.stats[res.status] += 1
            self.timed_wall_s += res.timed_wall_s
            for k, v in (res.notes.get("phases_s") or {}).items():
                self.phase_s[k] += v
            shape = res.notes.get("second_shape")
            if shape:
                self.second_shape["checked" if shape.get("checked") else
                                  f"not_checked:{shape.get('why')}"] += 1
        return res

    @staticmethod
    def static_findings(kernel_code: str, pytorch_code: str) -> list[Finding]:
        """The static gates' findings (read from the code in this process; nothing runs). A
        gate that breaks fails the row closed: a gate that could not run has not passed."""
        try:
            return static_findings(kernel_code, pytorch_code)
        except Exception as exc:  # noqa: BLE001 - a broken gate costs its row, never the run
            log.error("verify: the static gates failed: %s", traceback.format_exc())
            return [Finding("check_failed:static", "fail", "runtime_error",
                            f"{type(exc).__name__}: {exc}"[:300])]

    def count(self, what: str) -> None:
        with self._lock:
            self.stats[what] += 1

    # -- shared by rows -----------------------------------------------------------------------
    def row_cache(self, row: dict) -> dict[str, str]:
        """Compile caches of this row's code alone (addressed by the row's id and its code):
        its compile and candidate workers may write there, and no other row's worker reads it.
        Two rows with the same code do not share one: their workers run under different uids,
        and one's build folder is not the other's to write (the second row's build ended
        `compile_error`, permission denied on torch's build lock)."""
        h = hashlib.sha256(f"{row.get('id') or ''}\0{row.get('kernel_code') or ''}\0"
                           f"{self.cfg.device}".encode()).hexdigest()[:20]
        root = self.cfg.cache_dir
        return {"TRITON_CACHE_DIR": str(root / "triton" / h),
                "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor" / h),
                "TORCH_EXTENSIONS_DIR": str(root / "ext" / h)}

    def break_stale_locks(self, row: dict) -> int:
        """A compiler killed mid-build leaves torch's build lock (`<ext>/<name>/lock`) behind,
        and every later build of the same code would wait on it until its own timeout. No live
        build holds one longer than the compile phase and the compiler's limit together, so an
        older lock is stale. Returns how many were removed."""
        oldest = time.time() - (self.budget.phase("compile") + self.budget.compiler_grace + 5)
        broken = 0
        for lock in Path(self.row_cache(row)["TORCH_EXTENSIONS_DIR"]).glob("*/lock"):
            with contextlib.suppress(OSError):
                if lock.stat().st_mtime < oldest:
                    lock.unlink()
                    broken += 1
        if broken:
            log.warning("verify: removed %d stale build lock(s) under %s", broken,
                        self.row_cache(row)["TORCH_EXTENSIONS_DIR"])
            self.count("stale_locks_broken")
        return broken

    def remember_env(self, env: dict | None) -> None:
        """The GPU's name and versions, as a worker saw them (the parent touches no device)."""
        if isinstance(env, dict) and not self._env_info.get("_from_worker"):
            with self._lock:
                self._env_info = {k: env.get(k) if isinstance(env.get(k), str) else None
                                  for k in ("gpu", "torch_version", "triton_version",
                                            "cuda_version")}
                self._env_info["_from_worker"] = True


def _local_versions() -> dict:
    """Versions of this install (workers run the same one); the GPU's name comes from a worker."""
    import importlib.metadata
    try:
        import torch
        tv, cv = torch.__version__, torch.version.cuda
    except Exception:  # noqa: BLE001
        tv = cv = None
    try:
        trv = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        trv = None
    return {"gpu": None, "torch_version": tv, "triton_version": trv, "cuda_version": cv}
