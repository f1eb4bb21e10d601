"""The trusted side of verify: schedules compile, reference and candidate tasks on sandboxed
worker pools, compares outputs and turns timings into speedups with intervals.

    with Verifier(device="cpu") as v:
        for index, result in v.verify(rows):     # as rows finish, in any order
            print(index, result.status, result.speedup)
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import logging
import os
import random
import shutil
import statistics
import tempfile
import threading
import time
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from ..isolation import Limits, TaskResult, WorkerPool
from ..isolation.freeze import Freezer, cpu_seconds
from ..isolation.sandbox import SandboxUnavailable  # noqa: F401 - where callers import it
from ..isolation.sandbox import MODES as SANDBOX_MODES, choose as choose_sandbox, uid_block
from ..isolation.sandbox import label as sandbox_label
from ..record import row_key
from .hooks import CheckContext, load_checks, run_hook
from .timing import speedup_ci
from curate import pyast

OUTPUT_FILE_LIMIT_GB = 256.0  # a worker may write files this large (candidate outputs)
# A row's device memory, as a multiple of the compile worker's peak (model, inputs and one
# forward): the candidate keeps several input and output sets alive for the gates, the judge
# three reference outputs. Rows enter while their estimates fit in GPU_SHARE of the device.
ROW_MEMORY_FACTOR = 9.0   # H200, 49 KernelBench pairs: candidate peak / warm-up peak, median 7.6, max 16.6
GPU_SHARE = 0.8


def warm_estimate_gb(size_gb: dict | None) -> float:
    """Device memory a compile worker's warm-up forward needs, from the reference's shapes
    (`harness.meta_sizes`): inputs, outputs and parameters, with room for intermediates."""
    if not size_gb:
        return 2.0
    return 1.5 * (size_gb.get("inputs", 0) + size_gb.get("outputs", 0)) + \
        size_gb.get("params", 0) + 0.25

log = logging.getLogger("curate.verify")

STATUSES = ("verified", "incorrect", "deceptive", "compile_error", "runtime_error", "timeout",
            "crashed", "degenerate_reference", "reference_error", "unsupported")
BACKENDS = ("triton", "cuda", "cpp")
HANDLER, SETUP = "curate.verify.harness:handle", "curate.verify.harness:setup"
# what the fork server imports once (no device is touched before the fork)
PRELOAD = ["torch", "torch._dynamo", "curate.verify.harness", "?triton"]
KEEP_OUTPUT_BYTES = {"cuda": 2 * 2**30, "cpu": 256 * 2**20}  # a timed batch's kept outputs
FETCHES = 6                  # timed calls whose outputs the judge checks, per row
# the candidate's per-call time implied by the trusted batch wall times may exceed the one it
# reported by xA + B ms: wide, because the untimed work around a call (writing inputs, freeing
# outputs) differs between the two processes by up to ~2 ms on the CPU examples (honest inductor
# C++ rows reached 4.7x + 0 ms at 1.5x); it catches reports that hide most of the work
TIMING_SLACK = {"cpu": (3.0, 2.0), "cuda": (3.0, 0.5)}
IDLE_CPU = (0.02, 0.10)      # a candidate idle while the reference runs: < 20 ms or 10% of it
BATCH_S = {"cpu": 0.025, "cuda": 0.01}   # a timed batch lasts at least this long (seconds)
SETTLE_S = 0.03              # CPU: pause between a candidate's batch and the reference's
# CPU: the threads every worker's OpenMP (the reference's ATen ops, the kernels' parallel
# loops) runs on. With one a core, speedups moved several times more between identical runs
# than on one (docs/verify.md): a thread that waits for a busy core stalls the whole loop
CPU_TIMING_THREADS = 1
# CPU: a row's speed carries a factor of the process pair that timed it (5-10% at the median on
# 2-core machines, up to 30%; docs/verify.md), so a row whose interval low lies within
# RETIME_BAND of the build's threshold is timed again in RETIME_PAIRS more fresh pairs, and its
# figures are those of the median pair: one slow or fast process no longer decides it
RETIME_BAND, RETIME_PAIRS = 0.2, 2


@dataclass
class VerifyResult:
    """The columns verify writes for one row (plus a few figures for benchmarks)."""

    status: str = "runtime_error"
    correct: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    speedup: float | None = None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    ref_ms: float | None = None
    kernel_ms: float | None = None
    reasons: list[str] = field(default_factory=list)
    gpu: str | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    cuda_version: str | None = None
    sandbox: str | None = None
    error: str | None = None
    # not columns: what the run cost
    seconds: float = 0.0
    timed_wall_s: float = 0.0
    timed_trials: int = 0
    notes: dict = field(default_factory=dict)

    COLUMNS = ("status", "correct", "max_abs_err", "max_rel_err", "speedup", "speedup_ci_low",
               "speedup_ci_high", "ref_ms", "kernel_ms", "gpu", "torch_version",
               "triton_version", "cuda_version", "sandbox", "error")

    def columns(self) -> dict:
        d = {k: getattr(self, k) for k in self.COLUMNS}
        return d

    def reason(self, *rs: str) -> None:
        for r in rs:
            if r and r not in self.reasons:
                self.reasons.append(r)


def infer_backend(code: str | None) -> str | None:
    if not code:
        return None
    if "load_inline" in code or "__global__" in code:
        return "cuda" if ("cuda_sources" in code or "__global__" in code) else "cpp"
    if "triton" in code:
        return "triton"
    if "cpp_pybinding" in code or "extern \"C\"" in code:
        return "cpp"
    return None


def default_cache_dir() -> Path:
    root = os.environ.get("CURATE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "curate")
    return Path(root) / "compile"


def _seed(*parts) -> int:
    h = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def _short(text: str | None, limit: int = 2000) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]


class Verifier:
    """Verify pairs on `device` ("cpu" or "cuda") with `workers` candidate workers.

    Every row gets a VerifyResult; nothing raises for a bad pair. `trials` correctness trials
    (>= 3 recommended; the last rewrites the inputs in place), per-task `timeout` seconds.
    """

    def __init__(self, device: str = "cpu", workers: int | None = None, timeout: float = 120.0,
                 trials: int = 3, seed: int = 0, time_budget: float | None = None,
                 min_timed: int = 20, max_timed: int = 1000,
                 reference_workers: int | None = None, compile_workers: int | None = None,
                 cache_dir: str | os.PathLike | None = None, memory_gb: float | None = None,
                 compile_ahead: bool = True, output_bytes: int = 8 * 2**20, gates: bool = True,
                 confine: bool | None = None, transport: str = "auto",
                 keep_idle_gb: float | None = 1.0, static_gates: bool = True,
                 sandbox: str = "auto", threshold: float | None = None):
        if device not in ("cpu", "cuda"):
            raise ValueError(f"device must be cpu or cuda, not {device!r}")
        cpus = os.cpu_count() or 2
        self.device, self.timeout, self.trials, self.seed = device, float(timeout), int(trials), seed
        if device == "cuda":
            self.workers = workers or min(8, max(2, cpus * 3 // 8))
            default_comp = max(2, cpus - self.workers - max(1, self.workers // 2))
        else:
            self.workers = workers or max(1, min(4, cpus))
            default_comp = max(1, cpus // 2)
        # judges recompute the reference; a row holds one for about a third of its time
        # a row holds a judge for as long as its candidate: one of each per row in flight
        self.ref_workers = self.workers
        if transport == "files":
            transport = "inline"  # the judge reads nothing a candidate can write
        if transport not in ("auto", "memfd", "inline", "cuda_ipc", "cuda_fd"):
            raise ValueError("transport must be auto, memfd, inline, cuda_ipc or cuda_fd, "
                             f"not {transport!r}")
        if transport.startswith("cuda") and device != "cuda":
            raise ValueError(f"transport {transport} needs device cuda")
        # auto: on the GPU, CUDA IPC or else device memory passed as a descriptor, whichever
        # a probe between two workers passes first (see start()); else sealed memory files
        self.transport = transport
        self.freezer = Freezer()     # a timed batch stops every other worker
        self._device = DeviceGate()  # timed batches alone on the device, other work shared
        self._phases: dict[int, str] = {}   # row thread -> what it waits on or runs (watchdog)
        self._spent = threading.local()     # a row thread's seconds per phase (notes.phases_s)
        self._last_done = time.monotonic()
        self._closing = threading.Event()
        self.compile_workers = compile_workers if compile_workers is not None else default_comp
        self.compile_ahead = compile_ahead and self.compile_workers > 0
        self.time_budget = time_budget if time_budget is not None else (
            0.5 if device == "cuda" else 1.0)
        self.min_timed, self.max_timed = min_timed, max_timed
        self.cache_dir = Path(cache_dir) if cache_dir else default_cache_dir()
        self.memory_gb = memory_gb if memory_gb is not None else (8.0 if device == "cpu" else None)
        self.output_bytes = output_bytes
        # device memory a worker may keep between tasks before it is replaced (None: never)
        self.keep_idle_gb = keep_idle_gb
        self.gates = gates  # False: the bare harness, without curate.verify.gates' checks
        # False: only the gates that watch the code run (benchmarks show the layers apart)
        self.static_gates = static_gates
        self.confine = confine  # None: Landlock where a probe says CUDA works under it
        self.confined: bool | None = None  # what start() decided
        self.confine_probe: str | None = None
        if sandbox not in SANDBOX_MODES:
            raise ValueError(f"sandbox must be auto, strict or off, not {sandbox!r}")
        self.sandbox_mode = sandbox
        self.sandbox: str | None = None        # what start() set up, recorded on every row
        self.sandbox_probe: str | None = None
        self.compile_timeout = max(self.timeout, 300.0)
        # the build's keep threshold (None: verify alone): on the CPU, rows near it are timed
        # in more process pairs
        self.threshold = float(threshold) if threshold else None
        self.retime_pairs = RETIME_PAIRS if device == "cpu" and self.threshold else 0
        self.retimed = 0   # rows that took the median of several process pairs
        self.pools: dict[str, WorkerPool] = {}
        self.tmp: Path | None = None
        self.stats = Counter()
        self.timed_wall_s = 0.0
        self._lock = threading.Lock()
        self._memory = MemoryGate(64.0)  # resized from the device in start()
        # on the GPU, an out-of-memory row may only have met other rows' tensors: run it again
        # alone at the end (on the CPU the limit is the worker's own, so a retry cannot help)
        self.retry_oom_alone = device == "cuda"
        self._env_info: dict = _local_versions()
        self._parent_checks = None

    # -- lifecycle -------------------------------------------------------------------------
    def config(self) -> dict:
        # how outputs travel and whether Landlock is on do not change a verdict: not part of
        # the configuration that keys the ledger (both are decided only in start())
        out = {"device": self.device, "trials": self.trials, "seed": self.seed,
               "time_budget": self.time_budget, "min_timed": self.min_timed, "gates": self.gates}
        if self.cpu_threads:  # a speed measured on other threads is another measurement
            out["cpu_threads"] = self.cpu_threads
        if self.retime_pairs:
            out["retime"] = {"threshold": self.threshold, "band": RETIME_BAND,
                             "pairs": self.retime_pairs}
        return out

    @property
    def cpu_threads(self) -> int | None:
        return CPU_TIMING_THREADS if self.device == "cpu" else None

    def start(self) -> None:
        if self.pools:
            return
        self.tmp = Path(tempfile.mkdtemp(prefix="curate-verify-"))
        os.chmod(self.tmp, 0o711)  # workers of their own uids pass through to their scratch
        for sub in ("", "ext", "triton", "inductor"):
            d = self.cache_dir / sub
            d.mkdir(parents=True, exist_ok=True)
            # workers of their own uids pass through to their row's folder, list nothing
            os.chmod(d, os.stat(d).st_mode | 0o111)
        # compile caches are per row's code (_row_cache): no row writes where another reads
        env = {"CURATE_VERIFY_DEVICE": self.device, "MAX_JOBS": "2"}
        if self.device == "cpu":
            threads = str(self.cpu_threads)
            env.update({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "",
                        "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads})
        scratch = str(self.tmp / "scratch")
        os.makedirs(scratch, exist_ok=True)

        def limits_for(confine: bool) -> Limits:
            # Outputs of KernelBench problems reach 8 GiB: a smaller file-size limit made
            # torch.save fail ("unexpected pos") on the H200 run.
            return Limits(memory_gb=self.memory_gb, output_bytes=self.output_bytes,
                          file_size_gb=OUTPUT_FILE_LIMIT_GB, confine=confine)
        # Landlock where the kernel has it: writes only to the worker's scratch, this run's
        # job directories and the compile cache; no TCP; home directories unreadable. On the
        # GPU only where a confined worker can run CUDA and Triton (a probe decides: on the
        # H200 machine of 2026-11 a confined worker failed cudaGetDeviceCount with error 304).
        wrap = self._decide_sandbox(env, limits_for(False), scratch)
        if self.confine is not None:
            confine = self.confine and self.sandbox_mode != "off"
        elif self.sandbox_mode == "off":
            confine = False
        elif self.device == "cpu":
            confine = True
        else:
            confine = self._probe_confined(env, limits_for(True), scratch, wrap)
        self.confined = confine
        self.sandbox = sandbox_label(wrap, confine)
        limits = limits_for(confine)
        log.info("verify: workers run under %s", self.sandbox)

        def pool(n, uid_offset):
            # fresh: no process that ran a row's code serves another row; forked from a server
            # that imported torch and the harness once (tens of ms instead of seconds)
            return WorkerPool(HANDLER, setup=SETUP, workers=n, timeout=self.timeout, env=env,
                              limits=limits, scratch_root=scratch, fresh=True,
                              fork_server=PRELOAD, freezer=self.freezer, sandbox=wrap,
                              uid_base=uid_block() + uid_offset if wrap else None)
        self.pools = {"judge": pool(self.workers, 0), "candidate": pool(self.workers, 256)}
        if self.compile_ahead:
            self.pools["compile"] = pool(self.compile_workers, 512)
        for p in list(self.pools.values())[1:]:
            p.share_server(self.pools["judge"])
        self._parent_checks = load_checks("parent") if self.gates else []
        if not self.static_gates:
            self._parent_checks = [c for c in self._parent_checks
                                   if getattr(c, "name", "") != "static"]
        if self.transport == "auto":
            self.transport = "memfd"
            if self.device == "cuda":
                self.transport = next((t for t in ("cuda_ipc", "cuda_fd")
                                       if self._probe_ipc(t)), "memfd")
        self._watchdog = threading.Thread(target=self._watch, daemon=True, name="verify-watchdog")
        self._watchdog.start()
        log.info("verify: outputs reach the judge by %s", self.transport)

    def _decide_sandbox(self, env: dict, limits: Limits, scratch: str) -> list[str] | None:
        """bubblewrap around the workers where it runs here (and, on the GPU, where a worker
        under it can run CUDA and a Triton kernel); `strict` refuses to go on without it."""
        check = (lambda wrap: self._probe_worker(env, limits, scratch, wrap)) \
            if self.device == "cuda" else None
        wrap, self.sandbox_probe = choose_sandbox(
            self.sandbox_mode, self.device, [scratch, str(self.cache_dir)], "verify", check)
        return wrap

    def _probe_worker(self, env: dict, limits: Limits, scratch: str, wrap: list[str] | None
                      ) -> tuple[bool, str | None]:
        """A worker under `wrap` and `limits` initializes CUDA and launches a Triton kernel."""
        pool = WorkerPool(HANDLER, setup=SETUP, workers=1, timeout=180, env=env, limits=limits,
                          scratch_root=scratch, setup_timeout=180, fresh=True,
                          fork_server=PRELOAD, sandbox=wrap,
                          uid_base=uid_block() + 768 if wrap else None)
        try:
            res = pool.call({"role": "probe_cuda", "device": self.device}, 180)
        finally:
            pool.close()
        ok = res.ok and isinstance(res.value, dict) and res.value.get("status") == "ok"
        return ok, None if ok else (res.error or res.output or res.status)[-300:]

    def _probe_confined(self, env: dict, limits: Limits, scratch: str,
                        wrap: list[str] | None = None) -> bool:
        """Can a Landlock-confined worker initialize CUDA and launch a Triton kernel here?"""
        from ..isolation import confine as landlock
        if not landlock.supported():
            self.confine_probe = "no Landlock"
            return False
        pool = WorkerPool(HANDLER, setup=SETUP, workers=1, timeout=180, env=env, limits=limits,
                          scratch_root=scratch, setup_timeout=180, fresh=True,
                          fork_server=PRELOAD, sandbox=wrap,
                          uid_base=uid_block() + 769 if wrap else None)
        try:
            res = pool.call({"role": "probe_cuda", "device": self.device}, 180)
        finally:
            pool.close()
        ok = res.ok and isinstance(res.value, dict) and res.value.get("status") == "ok"
        self.confine_probe = "ok" if ok else (res.error or res.output or res.status)[-300:]
        if not ok:
            log.warning("verify: workers run without Landlock on this GPU machine (a confined "
                        "worker could not run CUDA: %s)", self.confine_probe.strip()[-200:])
        return ok

    def _probe_ipc(self, transport: str = "cuda_ipc") -> bool:
        """One tensor from a candidate worker to a judge by `transport` (cuda_ipc, cuda_fd):
        where that fails (CUDA IPC between two sandboxes: each worker has a uid and PID
        namespace of its own), outputs take the next way."""
        try:
            with self.pools["candidate"].hold() as cw:
                sent = cw.call({"role": "probe_send", "device": self.device,
                                "transport": transport}, 120, accept_fds=True)
                try:
                    if not (sent.ok and isinstance(sent.value, dict) and "export" in sent.value):
                        log.info("%s probe: the sender failed: %s", transport,
                                 (sent.error or sent.status)[-300:])
                        return False
                    self._memory = MemoryGate(float(sent.value.get("total_gb") or 80.0)
                                              * GPU_SHARE)
                    got = self.pools["judge"].call(
                        {"role": "probe_receive", "device": self.device,
                         "export": sent.value["export"]}, 120, fds=sent.fds)
                finally:
                    for fd in sent.fds:
                        os.close(fd)
                cw.call({"role": "release"}, 60)
            ok = got.ok and isinstance(got.value, dict) and got.value.get("status") == "ok"
            if not ok:
                log.info("%s probe failed (%s)", transport,
                         (got.error or str(got.value))[-300:])
            return ok
        except Exception as exc:  # noqa: BLE001
            log.info("%s probe failed (%s)", transport, exc)
            return False

    def close(self) -> None:
        self._closing.set()
        for p in self.pools.values():
            p.close()
        self.pools = {}
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self) -> "Verifier":
        self.start()
        return self

    def __exit__(self, *_):
        self.close()

    @property
    def replaced(self) -> int:
        return sum(p.replaced for p in self.pools.values())

    @property
    def recycled(self) -> dict:
        """Workers replaced on purpose, per pool (a fresh process costs seconds on the GPU)."""
        return {name: p.recycled for name, p in self.pools.items()}

    # -- the work --------------------------------------------------------------------------
    def verify(self, rows: Iterable[dict]) -> Iterator[tuple[int, VerifyResult]]:
        """Yield `(index, VerifyResult)` for every row as it finishes."""
        rows = list(rows)
        if not rows:
            return
        self.start()
        # a thread per row: rows decided in the parent (static gates) never queue behind rows
        # that wait for memory or the device
        threads = max(2 * self.workers + self.compile_workers + 1, min(len(rows), 256))
        with ThreadPoolExecutor(max_workers=min(len(rows), threads),
                                thread_name_prefix="verify-row") as ex, \
                ThreadPoolExecutor(max_workers=max(1, self.compile_workers),
                                   thread_name_prefix="verify-compile") as cex:
            futs = {ex.submit(self._safe_row, row, cex): i for i, row in enumerate(rows)}
            crowded = []
            for f in as_completed(futs):
                res = f.result()
                if self.retry_oom_alone and "out_of_memory" in res.reasons:
                    crowded.append(futs[f])  # the device was full of other rows' tensors
                    continue
                yield futs[f], self._count(res)
            # once more, alone on the device: a row that cannot run then has its verdict
            for i in sorted(crowded):
                res = self._safe_row(rows[i], cex, exclusive=True)
                res.notes["alone_retry"] = True
                yield i, self._count(res)

    def _count(self, res: VerifyResult) -> VerifyResult:
        with self._lock:
            self.stats[res.status] += 1
            self.timed_wall_s += res.timed_wall_s
        return res

    def verify_one(self, row: dict) -> VerifyResult:
        return next(self.verify([row]))[1]

    def _safe_row(self, row: dict, cex: ThreadPoolExecutor, exclusive: bool = False
                  ) -> VerifyResult:
        t0 = time.monotonic()
        self._spent.by_phase, self._spent.current = Counter(), None
        try:
            res = self._row(row, cex, exclusive)
        except Exception as exc:  # a harness bug costs the row, loudly
            log.error("verify failed on row %s: %s", row.get("id"), traceback.format_exc())
            res = VerifyResult(status="runtime_error", reasons=["harness_error"],
                               error=f"{type(exc).__name__}: {exc}")
        res.seconds = time.monotonic() - t0
        res.sandbox = self.sandbox
        self._phase(None)
        res.notes["phases_s"] = {k: round(v, 3) for k, v in self._spent.by_phase.items()}
        self._phases.pop(threading.get_ident(), None)
        self._last_done = time.monotonic()
        for k, v in self._env_info.items():
            if not k.startswith("_") and getattr(res, k) is None:
                setattr(res, k, v)
        if self.device == "cpu":
            res.gpu = None
        return res

    def _compile(self, row: dict, warm: bool) -> TaskResult:
        """Compile ahead, in a fresh worker. A warm-up forward (Triton kernels compile at their
        first launch) runs only once device memory for it is reserved: the same worker first
        reports the reference's sizes from meta tensors, then warms up under the memory gate."""
        pool = self.pools["compile"]
        with pool.hold(env=self._row_cache(row)) as w:
            self._phase("compiling")
            sized = w.call(self._task(row, "compile", size=warm), self.compile_timeout)
            if not warm or not (sized.ok and isinstance(sized.value, dict)
                                and sized.value.get("status") == "compiled"):
                return sized
            need = self._memory.clamp(warm_estimate_gb(sized.value.get("size_gb")))
            self._phase("waiting for device memory (warm-up)")
            self._memory.acquire(need)
            try:
                res = self._on_device(w, self._task(row, "compile", warm=True),
                                      self.compile_timeout)
            finally:
                self._memory.release(need)
        if res.ok and isinstance(res.value, dict):
            res.value["size_gb"] = sized.value.get("size_gb")
            res.value["seconds"] = (res.value.get("seconds") or 0.0) + (
                sized.value.get("seconds") or 0.0)
        return res

    def _code_hash(self, row: dict) -> str:
        return hashlib.sha256(f"{row.get('kernel_code') or ''}\0{self.device}".encode()
                              ).hexdigest()[:20]

    def _row_cache(self, row: dict) -> dict[str, str]:
        """Compile caches of this row's code alone (content-addressed): its compile and
        candidate workers may write there, and no other row's worker reads it."""
        h = self._code_hash(row)
        return {"TRITON_CACHE_DIR": str(self.cache_dir / "triton" / h),
                "TORCHINDUCTOR_CACHE_DIR": str(self.cache_dir / "inductor" / h),
                "TORCH_EXTENSIONS_DIR": str(self.cache_dir / "ext" / h)}

    def _task(self, row: dict, role: str, **extra) -> dict:
        key = row_key(row)
        t = {"role": role, "device": self.device, "backend": row.get("backend"),
             "pytorch_code": row.get("pytorch_code"), "kernel_code": row.get("kernel_code"),
             "seed_init": _seed(self.seed, key, "init"),
             "seeds": [_seed(self.seed, key, "trial", i) for i in range(self.trials)],
             "poke": _seed(self.seed, key, "poke"),  # input set `trials`: set 0, one element moved
             "tag": key[:8], "gates": self.gates,
             "extensions_dir": self._row_cache(row)["TORCH_EXTENSIONS_DIR"],
             "keep_idle_gb": self.keep_idle_gb}
        t.update(extra)
        return t

    def _on_device(self, w, task: dict, timeout: float | None = None,
                   exclusive: bool = False, fds: list[int] | None = None,
                   accept_fds: bool = False) -> TaskResult:
        """A request that runs on the device: it waits for the device gate first, and its
        time limit starts only once it holds it."""
        self._phase(f"waiting for the device ({task.get('role')} {task.get('op', '')})")
        with (self._device.exclusive() if exclusive else self._device.shared()):
            self._phase(f"{task.get('role')} {task.get('op', '')}")
            return w.call(task, timeout, fds=fds, accept_fds=accept_fds)

    # -- one row, in named phases ----------------------------------------------------------
    def _row(self, row: dict, cex: ThreadPoolExecutor, exclusive: bool = False) -> VerifyResult:
        res = VerifyResult()
        backend = row.get("backend") or infer_backend(row.get("kernel_code"))
        ctx = CheckContext(role="parent", device=self.device, backend=backend,
                           pytorch_code=row.get("pytorch_code") or "",
                           kernel_code=row.get("kernel_code"), row=row)
        if not self._precheck(row, backend, ctx, res):
            return res
        row = {**row, "backend": backend}
        if not self._compile_phase(row, backend, cex, res):
            return res
        need_gb = self._memory.capacity if exclusive else self._memory.clamp(
            ROW_MEMORY_FACTOR * self._warm_peak(res.notes))
        self._phase("waiting for device memory")
        self._memory.acquire(need_gb)
        try:
            with self._workers(row) as (cw, jw):
                plan = self._pair(row, backend, cw, jw, ctx, res)
            if plan is not None and self._near_threshold(res):
                self._retime(row, ctx, res, plan)
        finally:
            self._memory.release(need_gb)
        return res

    @contextlib.contextmanager
    def _workers(self, row: dict):
        """A fresh candidate worker (with its row's compile caches) and a fresh judge, held
        for one pair of the row; both are killed and reaped when it ends."""
        self._phase("waiting for workers")
        with self.pools["candidate"].hold(env=self._row_cache(row)) as cw, \
                self.pools["judge"].hold() as jw:
            yield cw, jw
            self._phase("ending workers")

    def _near_threshold(self, res: VerifyResult) -> bool:
        low = res.speedup_ci_low
        return bool(self.retime_pairs and res.status == "verified" and low
                    and self.threshold / (1 + RETIME_BAND) <= low
                    <= self.threshold * (1 + RETIME_BAND))

    def _retime(self, row: dict, ctx: CheckContext, res: VerifyResult, plan: tuple) -> None:
        """Time the row again in fresh process pairs (load, the timing loop with its checks of
        timed outputs, the candidate's closing gates) and give it the figures of the median
        pair. A pair that fails, or a gate that fires, decides the row as in its first pair."""
        figures = ("speedup", "speedup_ci_low", "speedup_ci_high", "ref_ms", "kernel_ms")
        pairs = [{k: getattr(res, k) for k in figures}]
        for n in range(self.retime_pairs):
            again = VerifyResult()
            rng = random.Random(_seed(self.seed, row_key(row), "retime", n))
            with self._workers(row) as (cw, jw):
                if self._load(row, cw, jw, ctx, again):
                    again.status = "verified"
                    self._timing(row, cw, jw, ctx, again, rng, *plan)
                    fin = self._on_device(cw, {"role": "candidate", "op": "finish",
                                               "keep_idle_gb": self.keep_idle_gb})
                    if self._task_ok(fin, again, "candidate"):
                        self._flags(ctx, fin.value)
            res.timed_wall_s += again.timed_wall_s
            if self._fatal(ctx, res):
                return
            if again.status != "verified" or again.speedup is None:
                res.status, res.error = again.status, again.error
                res.reason(*again.reasons)
                return
            pairs.append({k: getattr(again, k) for k in figures})
        mid = sorted(pairs, key=lambda p: p["speedup"])[len(pairs) // 2]
        for k, v in mid.items():
            setattr(res, k, v)
        res.notes["pairs"] = pairs
        with self._lock:
            self.retimed += 1

    def _precheck(self, row: dict, backend: str | None, ctx: CheckContext,
                  res: VerifyResult) -> bool:
        """What the parent decides from the code alone (nothing runs)."""
        ref_code, code = row.get("pytorch_code"), row.get("kernel_code")
        if not ref_code:
            res.status = "reference_error"
            res.reason("no_reference")
            return False
        if not code:
            res.status = "unsupported"
            res.reason("no_candidate")
            return False
        try:
            pyast.parse(ref_code)
        except SyntaxError as exc:
            res.status, res.error = "reference_error", f"SyntaxError: {exc.msg} (line {exc.lineno})"
            res.reason("reference_syntax_error")
            return False
        try:
            pyast.parse(code)
        except SyntaxError as exc:
            res.status = "compile_error"
            res.error = f"SyntaxError: {exc.msg} (line {exc.lineno}): {(exc.text or '').strip()}"
            res.reason("syntax_error")
            return False
        if backend not in BACKENDS:
            res.status = "unsupported"
            res.reason(f"backend:{backend or 'unknown'}")
            return False
        run_hook(self._parent_checks or [], "before_run", ctx)  # static gates, any device
        if self._fatal(ctx, res):
            return False
        if backend == "cuda" and self.device == "cpu":
            res.status = "unsupported"
            res.reason("cuda_needs_gpu")
            return False
        return True

    def _compile_phase(self, row: dict, backend: str, cex: ThreadPoolExecutor,
                       res: VerifyResult) -> bool:
        """Build ahead (CUDA extensions, inductor C++, Triton's first launch) so the device's
        workers do not wait on compilers; only build failures end the row here."""
        if "compile" not in self.pools or (self.device == "cpu" and backend == "triton"):
            return True
        self._phase("compiling ahead")
        comp = cex.submit(self._compile, row, self.device == "cuda" and backend == "triton"
                          ).result()
        if not self._task_ok(comp, res, "compile"):
            return False
        if comp.value.get("status") != "compiled":
            self._worker_status(comp.value, res)
            return False
        res.notes["compile_s"] = comp.value.get("seconds")
        _note_kept(res, "compile", comp)
        for k in ("import_s", "warm_s"):
            if comp.value.get(k) is not None:
                res.notes[f"compile_{k}"] = comp.value[k]
        if (comp.value.get("notes") or {}).get("patched"):
            res.notes["compile_patched"] = comp.value["notes"]["patched"]
        if comp.value.get("peak_gb") is not None:
            res.notes["warm_peak_gb"] = comp.value["peak_gb"]
        if comp.value.get("size_gb"):
            res.notes["size_gb"] = comp.value["size_gb"]
        return True

    def _pair(self, row: dict, backend: str, cw, jw, ctx: CheckContext,
              res: VerifyResult) -> tuple | None:
        """Candidate and judge, each in a fresh worker of its own: load both, correctness
        calls judged by the reference, timing, verdict. Returns what the timing loop was
        planned from (per-call times, output bytes) where the row was timed."""
        rng = random.Random(_seed(self.seed, row_key(row), "plan"))
        t0 = time.monotonic()
        if not self._load(row, cw, jw, ctx, res):
            return
        # correctness: a varying number of calls on scaled inputs first, then every trial set
        # unscaled; the last ones rewrite the same buffers in place
        calls = [[rng.randrange(self.trials), _scale(rng)] for _ in range(rng.randint(0, 2))]
        calls += [[k, 1.0] for k in range(self.trials)]
        calls += [[0, 1.0], [self.trials, 1.0]]  # set 0, then set 0 poked in the same buffers
        ref = self._on_device(jw, {"role": "judge", "op": "reference", "calls": calls})
        if not self._judge_ok(ref, res):
            return
        self._flags(ctx, ref.value, default="degenerate_reference")
        if self._fatal(ctx, res, default="degenerate_reference"):
            return
        run = self._on_device(cw, {"role": "candidate", "op": "calls", "calls": calls,
                                   "check": len(calls), "keep": True})
        res.notes["correctness_s"] = round(run.seconds, 3)
        if not self._candidate_ok(run, res, ctx):
            return
        first_unscaled = next(i for i, c in enumerate(calls) if c[1] == 1.0 and c[0] == 0)
        timed = self.device == "cuda" or backend == "cpp"
        # correctness only: the timing loop's check of the candidate's idle CPU is made while
        # the judge compares instead
        idle = None if timed else {"cpu_s": 0.0, "wall_s": 0.0}
        for i, call in enumerate(calls):
            if not self._judge_call(cw, jw, i, call, res, precision=i == first_unscaled,
                                    idle=idle):
                break
        if idle is not None:
            res.notes["idle_cpu_s"] = round(idle["cpu_s"], 4)
            if idle["cpu_s"] > max(IDLE_CPU[0], IDLE_CPU[1] * idle["wall_s"]):
                ctx.flag("work_outside_call", fatal=True)
        plan = None
        if timed and res.status != "incorrect" and not any(f.fatal for f in ctx.flags):
            plan = (run.value.get("ms") or [], ref.value.get("ms") or [],
                    int(run.value.get("out_bytes") or 0))
            self._timing(row, cw, jw, ctx, res, rng, *plan)
        self._verdict(cw, jw, ctx, res)
        res.notes["pair_s"] = round(time.monotonic() - t0, 3)
        return plan if res.speedup is not None else None

    def _load(self, row: dict, cw, jw, ctx: CheckContext, res: VerifyResult) -> bool:
        """Start both workers and load the candidate, then the reference into the judge."""
        # loading is not gated (an import may hang for its whole limit); whatever it does
        # stops while other pairs are timed
        self._phase("starting the candidate worker")  # fork, then CUDA's start-up
        start = self._start(cw)
        self._phase("candidate load")
        cand = cw.call(self._task(row, "candidate", op="load"), self.compile_timeout) \
            if start is None else start
        if not self._task_ok(cand, res, "candidate"):
            return False
        self._remember_env(cand.value.get("env"))
        if cand.value.get("status") != "ok":
            self._worker_status(cand.value, res)
            self._flags(ctx, cand.value)
            self._fatal(ctx, res)
            return False
        self._phase("waiting for the device (judge start)")
        with self._device.shared():
            self._phase("starting the judge worker")
            start = self._start(jw)
        judge = self._on_device(jw, self._task(row, "judge", op="load")) \
            if start is None else start
        return self._judge_ok(judge, res)

    @staticmethod
    def _start(w) -> TaskResult | None:
        """Start a held worker before its first task (so that a row's phases show what start-up
        costs); a worker that cannot start is the row's crash, as its first call would be."""
        try:
            w.start()
        except Exception as exc:  # noqa: BLE001 - the worker could not even start
            return TaskResult("crashed", error=f"worker start failed: {exc}")
        return None

    def _judge_call(self, cw, jw, index: int, call: list, res: VerifyResult,
                    precision: bool = False, idle: dict | None = None) -> bool:
        """The candidate's output of call `index` of its last batch, compared by the judge with
        the reference's output of the same call. False when the row is over. With `idle`, the
        candidate's CPU time while the judge compares is added to it."""
        got = self._on_device(cw, {"role": "candidate", "op": "fetch", "index": index,
                                   "transport": self.transport}, accept_fds=True)
        if not self._task_ok(got, res, "candidate") or got.value.get("status") != "ok":
            if got.ok:
                self._worker_status(got.value, res)
            for fd in got.fds:
                os.close(fd)
            return False
        if idle is not None and self.device == "cpu":
            time.sleep(SETTLE_S)  # the candidate's OpenMP threads spin a few ms after its work
        cpu0 = cpu_seconds(cw.pid) if idle is not None else None
        t0 = time.perf_counter()
        try:  # the memory files of the outputs, if any, go on to the judge, who checks them
            cmp = self._on_device(jw, {"role": "judge", "op": "compare", "call": call,
                                       "outputs": got.value.get("outputs"),
                                       "structure": got.value.get("structure"),
                                       "precision": precision}, fds=got.fds)
        finally:
            for fd in got.fds:
                os.close(fd)
        cpu1 = cpu_seconds(cw.pid) if cpu0 is not None else None
        if cpu1 is not None:
            idle["cpu_s"] += max(0.0, cpu1 - cpu0)
            idle["wall_s"] += time.perf_counter() - t0
        if not self._judge_ok(cmp, res):
            return False
        if not cmp.value.get("ok"):
            res.status = "incorrect"
            return False
        return True

    def _timing(self, row: dict, cw, jw, ctx: CheckContext, res: VerifyResult,
                rng: random.Random, cand_ms: list, ref_ms: list, out_bytes: int) -> None:
        """Reference (in the judge) and candidate (in its worker) timed by the same loop on
        the same calls, alternating which goes first, each batch alone on the device with every
        other worker stopped. The parent checks what it can see from outside: each batch's
        wall time against the per-call times reported, the candidate's CPU use while the
        reference runs (leftover threads, deferred work), and the outputs of timed calls picked
        after the fact."""
        est = (_typical(cand_ms) + _typical(ref_ms)) / 1e3 + 2e-4
        n_total = int(min(self.max_timed, max(self.min_timed, self.time_budget / max(est, 1e-6))))
        # a batch long enough that its fixed cost (the round trip, the freeze) is noise beside
        # its calls, within what the worker may keep of its outputs
        slower = max(_typical(cand_ms), _typical(ref_ms), 1e-3) / 1e3
        keep = KEEP_OUTPUT_BYTES[self.device]
        per_batch = max(1, min(256, math.ceil(BATCH_S[self.device] / slower),
                               keep // max(out_bytes, 1) if out_bytes else 256))
        rounds = 1 + max(4, min(64, math.ceil(n_total / per_batch)))   # the first warms up
        fetch_rounds = set(rng.sample(range(1, rounds), min(FETCHES, rounds - 1)))
        pids = {cw.pid, jw.pid}
        samples = {"cand_ms": [], "ref_ms": [], "cand_wall": [], "ref_wall": [],
                   "idle_cpu": 0.0, "ref_wall_s": 0.0}
        t_wall = time.monotonic()
        for r in range(rounds):
            calls = [[rng.randrange(self.trials), _scale(rng)] for _ in range(per_batch)]
            order = ("candidate", "judge") if r % 2 == 0 else ("judge", "candidate")
            self._phase("waiting to time")
            with self._device.exclusive(), self._quiet(pids):
                self._phase("timing")
                for side in order:
                    w = cw if side == "candidate" else jw
                    if side == "judge" and self.device == "cpu":
                        # the candidate's OpenMP threads spin a few ms after its calls: let
                        # them go to sleep, so they neither slow the reference nor count as
                        # work done outside a call
                        time.sleep(SETTLE_S)
                    cpu0 = cpu_seconds(cw.pid) if side == "judge" else None
                    t0 = time.perf_counter()
                    # both keep their outputs (the same allocation pattern on both sides)
                    got = w.call({"role": side, "op": "calls", "calls": calls, "timed": True,
                                  "keep": True})
                    wall = time.perf_counter() - t0
                    ok = self._candidate_ok(got, res, ctx) if side == "candidate" \
                        else self._judge_ok(got, res)
                    if not ok:
                        return
                    if r == 0:
                        continue
                    key = "cand" if side == "candidate" else "ref"
                    samples[f"{key}_ms"].extend(got.value.get("ms") or [])
                    samples[f"{key}_wall"].append((wall, got.value.get("ms") or []))
                    if cpu0 is not None:
                        cpu1 = cpu_seconds(cw.pid)
                        if cpu1 is not None:
                            samples["idle_cpu"] += max(0.0, cpu1 - cpu0)
                            samples["ref_wall_s"] += wall
            if r in fetch_rounds:
                i = rng.randrange(per_batch)
                if not self._judge_call(cw, jw, i, calls[i], res):
                    res.reason("timed_output_mismatch")
                    return
        res.timed_wall_s = time.monotonic() - t_wall
        res.timed_trials = len(samples["ref_ms"])
        self._judge_timing(ctx, res, samples)
        sp = speedup_ci(samples["ref_ms"], samples["cand_ms"],
                        seed=_seed(self.seed, row_key(row), "boot"),
                        rounds=[(r[1], c[1]) for r, c in zip(samples["ref_wall"],
                                                             samples["cand_wall"])])
        for k, v in sp.items():
            setattr(res, k, v)
        res.notes["timing"] = {"rounds": rounds - 1, "per_batch": per_batch,
                               "fetched": len(fetch_rounds)}

    def _judge_timing(self, ctx: CheckContext, res: VerifyResult, samples: dict) -> None:
        """The trusted side's view of the timing: batch wall times seen by this process, and
        the candidate's CPU time while it should have been idle."""
        over = [(wall - sum(ms) / 1e3) / max(len(ms), 1) for wall, ms in samples["ref_wall"]]
        overhead_ms = 1e3 * statistics.median(over) if over else 0.0
        # how much the same fixed cost moves from batch to batch here (a loaded CPU wakes a
        # process late now and then): a disagreement must stand out of that too
        spread_ms = 1e3 * statistics.median([abs(o - overhead_ms / 1e3) for o in over]) \
            if over else 0.0
        implied = [1e3 * wall / max(len(ms), 1) - overhead_ms for wall, ms in samples["cand_wall"]]
        reported = [sum(ms) / max(len(ms), 1) for _, ms in samples["cand_wall"]]
        if implied and reported:
            imp, rep = statistics.median(implied), statistics.median(reported)
            res.notes["timing_check"] = {"reported_ms": round(rep, 5), "wall_ms": round(imp, 5),
                                         "overhead_ms": round(overhead_ms, 5),
                                         "overhead_spread_ms": round(spread_ms, 5)}
            ratio, extra = TIMING_SLACK[self.device]
            if imp > ratio * rep + extra + 4 * spread_ms:
                ctx.flag("timing_disagrees", fatal=True)
        idle, ref_s = samples["idle_cpu"], samples["ref_wall_s"]
        res.notes["idle_cpu_s"] = round(idle, 4)
        if idle > max(IDLE_CPU[0], IDLE_CPU[1] * ref_s):
            ctx.flag("work_outside_call", fatal=True)

    def _verdict(self, cw, jw, ctx: CheckContext, res: VerifyResult) -> None:
        fin = self._on_device(cw, {"role": "candidate", "op": "finish",
                                   "keep_idle_gb": self.keep_idle_gb})
        if self._task_ok(fin, res, "candidate"):
            self._flags(ctx, fin.value)
            res.notes.update(fin.value.get("notes") or {})
        elif res.status == "incorrect":
            pass
        else:
            return
        judged = self._on_device(jw, {"role": "judge", "op": "finish"})
        if not self._judge_ok(judged, res):
            return
        jv = judged.value
        self._remember_env(jv.get("env"))
        for k, v in (jv.get("notes") or {}).items():
            res.notes.setdefault(k, v)
        self._flags(ctx, jv, default="degenerate_reference")
        cmp = jv.get("comparison") or {}
        res.max_abs_err, res.max_rel_err = cmp.get("max_abs_err"), cmp.get("max_rel_err")
        if self._fatal(ctx, res, default="degenerate_reference") and any(
                f.fatal and (f.status or "degenerate_reference") == "degenerate_reference"
                for f in ctx.flags if f.reason.startswith("reference_")):
            return
        res.correct = bool(cmp.get("ok")) and res.status != "incorrect"
        run_hook(self._parent_checks or [], "after_candidate", ctx)
        if not res.correct:
            res.status = "incorrect"
            res.reason(*(cmp.get("reasons") or ["output_mismatch"]))
            res.error = _short(cmp.get("detail"))
            self._fatal(ctx, res)  # deception outranks plain incorrectness
            return
        if self._fatal(ctx, res):
            return
        res.status = "verified"

    def _candidate_ok(self, tr: TaskResult, res: VerifyResult, ctx: CheckContext) -> bool:
        if not self._task_ok(tr, res, "candidate"):
            return False
        self._flags(ctx, tr.value)
        if tr.value.get("status") != "ok":
            self._worker_status(tr.value, res)
            self._fatal(ctx, res)  # deception outranks the error it caused
            return False
        return True

    def _judge_ok(self, tr: TaskResult, res: VerifyResult) -> bool:
        if not tr.ok or not isinstance(tr.value, dict):
            res.status = "reference_error"
            res.reason(f"judge_{tr.status}")
            res.error = _short(tr.error or tr.output[-1500:] or None)
            return False
        if tr.value.get("status") != "ok":
            self._worker_status(tr.value, res)
            return False
        return True

    @staticmethod
    def _flags(ctx: CheckContext, value: dict, default: str | None = None) -> None:
        for f in value.get("flags") or []:
            ctx.flag(f.get("reason", "flag"), bool(f.get("fatal")), f.get("status") or (
                default if f.get("reason", "").startswith("reference_") else None))

    def _quiet(self, pids: set):
        """Every other worker stopped while a pair is timed: on the CPU, where they compete for
        the cores. On the GPU the device gate keeps other work off the device; a stopped process
        that holds a driver resource could stall the timed one (seen on the H200)."""
        if self.device == "cpu":
            return self.freezer.quiet(keep=pids)
        return contextlib.nullcontext()

    def _phase(self, what: str | None) -> None:
        """What this thread waits on or runs now: the watchdog names it, and a row thread adds
        the seconds of the phase it leaves to its row's `phases_s` (where a slow run goes)."""
        now = time.monotonic()
        spent = getattr(self._spent, "by_phase", None)
        if spent is not None:
            if self._spent.current is not None:
                name, since = self._spent.current
                spent[name] += now - since
            self._spent.current = (what, now) if what is not None else None
        if what is not None:
            self._phases[threading.get_ident()] = what

    def _watch(self, every: float = 30.0, stall: float = 120.0) -> None:
        """Say what the run waits on when no row has finished for `stall` seconds."""
        while not self._closing.wait(every):
            idle = time.monotonic() - self._last_done
            if idle > stall and self._phases:
                waits = Counter(self._phases.values())
                log.warning("verify: no row finished for %.0f s; rows in flight: %s", idle,
                            ", ".join(f"{n} {w}" for w, n in waits.most_common()))

    # -- helpers ---------------------------------------------------------------------------
    @staticmethod
    def _warm_peak(notes: dict) -> float:
        """The warm-up's measured peak, else the estimate from shapes, else a small default."""
        if notes.get("warm_peak_gb"):
            return float(notes["warm_peak_gb"])
        if notes.get("size_gb"):
            return warm_estimate_gb(notes["size_gb"]) / 1.5
        return 0.25

    def _fatal(self, ctx: CheckContext, res: VerifyResult, default: str = "deceptive") -> bool:
        """Record every flag as a reason; a fatal one sets the status (and ends the row)."""
        fatal = None
        for f in ctx.flags:
            res.reason(f.reason)
            # what a gate found outranks a gate that broke (check_failed: runtime_error)
            if f.fatal and (fatal is None or (fatal.reason.startswith("check_failed:")
                                              and not f.reason.startswith("check_failed:"))):
                fatal = f
        if ctx.notes.get("check_errors"):  # a parent-side check that broke
            res.notes.setdefault("check_errors", ctx.notes["check_errors"])
        if fatal is not None:
            if fatal.reason.startswith("check_failed:") and res.status == "incorrect":
                return True  # the outputs were already wrong: that verdict stands
            res.status = fatal.status or default
            if res.status != "verified":
                res.correct = False if res.status in ("deceptive", "incorrect") else res.correct
            return True
        return False

    def _task_ok(self, tr: TaskResult, res: VerifyResult, role: str) -> bool:
        """Map a pool failure (the worker died, hung or flooded) onto the row's status."""
        if tr.ok and isinstance(tr.value, dict):
            return True
        if tr.status == "timeout":
            res.status = "timeout"
            res.reason(f"{role}_timeout")
            res.error = f"{role} did not finish within its time limit ({tr.seconds:.0f}s)"
        elif tr.status == "output_flood":
            res.status = "crashed"
            res.reason("output_flood")
            res.error = "the worker flooded its output and was killed"
        elif tr.status == "error":
            res.status = "runtime_error"
            res.reason("worker_error")
            res.error = _short(tr.error)
        else:
            res.status = "crashed"
            code = tr.exit_code
            if code is not None and code < 0:
                import signal
                try:
                    res.reason(f"signal:{signal.Signals(-code).name}")
                except ValueError:
                    res.reason(f"signal:{-code}")
            elif code is not None:
                res.reason(f"exit_code:{code}")
            res.error = _short(f"the worker died ({role}); last output:\n{tr.output[-1200:]}"
                               if tr.output else f"the worker died ({role})")
        return False

    def _worker_status(self, value: dict, res: VerifyResult) -> None:
        status = value.get("status")
        res.status = status if status in STATUSES else "runtime_error"
        res.reason(*(value.get("reasons") or []))
        res.error = _short(value.get("error"))
        res.notes.update(value.get("notes") or {})

    def _remember_env(self, env: dict | None) -> None:
        if isinstance(env, dict) and not self._env_info.get("_from_worker"):
            with self._lock:
                self._env_info = {k: env.get(k) for k in
                                  ("gpu", "torch_version", "triton_version", "cuda_version")}
                self._env_info["_from_worker"] = True


def _scale(rng: random.Random) -> float:
    """A call's input scale: 1 + m / 2**14, m in 1..4096 (exact in float32; never 1)."""
    return 1.0 + rng.randint(1, 4096) / 2**14


def _typical(ms: list) -> float:
    """A per-call time from correctness calls (the first includes warm-up): ms."""
    rest = ms[1:] or ms
    return statistics.median(rest) if rest else 1.0


class DeviceGate:
    """A readers-writer lock in the parent: timed batches hold it alone, every other request
    that runs on the device holds it shared. Writers go first, so a stream of correctness work
    cannot starve timing. Waiting here never counts against a request's time limit.

    A shared holder that has run for longer than the writers' patience (a candidate hanging in
    a call until its timeout) is waited for once, not by every batch after it: writers wait
    only for holders younger than their patience."""

    def __init__(self, patience: float = 10.0):
        self.patience = patience
        self._cond = threading.Condition()
        self._readers: dict[int, float] = {}   # token -> when it took the gate
        self._next = 0
        self._writer = False
        self._waiting_writers = 0

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._next += 1
            token = self._next
            self._readers[token] = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                del self._readers[token]
                self._cond.notify_all()

    def _young_readers(self) -> float | None:
        """Seconds until the youngest shared holder outlives the patience (None: none left)."""
        now = time.monotonic()
        ages = [now - t for t in self._readers.values() if now - t < self.patience]
        return self.patience - min(ages) if ages else None

    @contextlib.contextmanager
    def exclusive(self):
        """Alone on the device, but for shared holders older than the patience (on the CPU
        they are frozen while the batch runs)."""
        with self._cond:
            self._waiting_writers += 1
            while True:
                left = self._young_readers()
                if not self._writer and left is None:
                    break
                self._cond.wait(max(0.01, min(1.0, left if left is not None else 1.0)))
            self._waiting_writers -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class MemoryGate:
    """A weighted semaphore over device memory (GB): a row waits until its estimate fits beside
    the rows already running, so that large problems do not run out of memory together."""

    def __init__(self, capacity_gb: float):
        self.capacity = max(1.0, capacity_gb)
        self.used = 0.0
        self._cond = threading.Condition()

    def clamp(self, gb: float) -> float:
        return min(self.capacity, max(0.0, gb))

    def acquire(self, gb: float) -> None:
        with self._cond:
            while self.used > 0 and self.used + gb > self.capacity:
                self._cond.wait()
            self.used += gb

    def release(self, gb: float) -> None:
        with self._cond:
            self.used = max(0.0, self.used - gb)
            self._cond.notify_all()


def _note_kept(res: VerifyResult, role: str, tr: TaskResult) -> None:
    """Device memory the worker kept after this task (GiB): what the memory gate cannot see."""
    if isinstance(tr.value, dict) and tr.value.get("memory_kept_gb") is not None:
        res.notes[f"kept_gb_{role}"] = tr.value["memory_kept_gb"]


def _local_versions() -> dict:
    """Versions of this install (workers run the same one); the GPU's name comes from a worker."""
    import importlib.metadata
    try:
        import torch
        tv, cv = torch.__version__, torch.version.cuda
    except Exception:
        tv = cv = None
    try:
        trv = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        trv = None
    return {"gpu": None, "torch_version": tv, "triton_version": trv, "cuda_version": cv}


def _at(seq: list, i: int):
    return seq[i] if i < len(seq) else None
