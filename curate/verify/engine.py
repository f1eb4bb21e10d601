"""The trusted side of verify: schedules compile, reference and candidate tasks on sandboxed
worker pools, compares outputs and turns timings into speedups with intervals.

    with Verifier(device="cpu") as v:
        for index, result in v.verify(rows):     # as rows finish, in any order
            print(index, result.status, result.speedup)
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
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
    error: str | None = None
    # not columns: what the run cost
    seconds: float = 0.0
    timed_wall_s: float = 0.0
    timed_trials: int = 0
    notes: dict = field(default_factory=dict)

    COLUMNS = ("status", "correct", "max_abs_err", "max_rel_err", "speedup", "speedup_ci_low",
               "speedup_ci_high", "ref_ms", "kernel_ms", "gpu", "torch_version",
               "triton_version", "cuda_version", "error")

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
                 keep_idle_gb: float | None = 1.0):
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
        self.ref_workers = reference_workers or (
            max(2, self.workers * 2 // 3) if device == "cuda" else max(1, self.workers // 2))
        if transport not in ("auto", "files", "cuda_ipc"):
            raise ValueError(f"transport must be auto, files or cuda_ipc, not {transport!r}")
        if transport == "cuda_ipc" and device != "cuda":
            raise ValueError("transport cuda_ipc needs device cuda")
        # auto: CUDA IPC on the GPU when a probe between two workers passes (see start())
        self.transport = transport
        self._inflight = threading.Semaphore(self.workers)
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
        self.confine = confine  # None: Landlock where a probe says CUDA works under it
        self.confined: bool | None = None  # what start() decided
        self.confine_probe: str | None = None
        self.compile_timeout = max(self.timeout, 300.0)
        self.pools: dict[str, WorkerPool] = {}
        self.tmp: Path | None = None
        self.jobs: Path | None = None
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
        return {"device": self.device, "trials": self.trials, "seed": self.seed,
                "time_budget": self.time_budget, "min_timed": self.min_timed, "gates": self.gates}

    def start(self) -> None:
        if self.pools:
            return
        self.tmp = Path(tempfile.mkdtemp(prefix="curate-verify-"))
        os.chmod(self.tmp, 0o700)
        self.jobs = _job_root(self.tmp)
        (self.cache_dir / "ext").mkdir(parents=True, exist_ok=True)
        env = {"CURATE_VERIFY_DEVICE": self.device,
               "TORCHINDUCTOR_CACHE_DIR": str(self.cache_dir / "inductor"),
               "TRITON_CACHE_DIR": str(self.cache_dir / "triton"),
               "MAX_JOBS": "2"}
        if self.device == "cpu":
            env.update({"TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""})
        scratch = str(self.tmp / "scratch")
        os.makedirs(scratch, exist_ok=True)

        def limits_for(confine: bool) -> Limits:
            # Outputs of KernelBench problems reach 8 GiB: a smaller file-size limit made
            # torch.save fail ("unexpected pos") on the H200 run.
            return Limits(memory_gb=self.memory_gb, output_bytes=self.output_bytes,
                          file_size_gb=OUTPUT_FILE_LIMIT_GB, confine=confine,
                          writable=(str(self.tmp), str(self.jobs), str(self.cache_dir)))
        # Landlock where the kernel has it: writes only to the worker's scratch, this run's
        # job directories and the compile cache; no TCP; home directories unreadable. On the
        # GPU only where a confined worker can run CUDA and Triton (a probe decides: on the
        # H200 machine of 2026-11 a confined worker failed cudaGetDeviceCount with error 304).
        if self.confine is not None:
            confine = self.confine
        elif self.device == "cpu":
            confine = True
        else:
            confine = self._probe_confined(env, limits_for(True), scratch)
        self.confined = confine
        limits = limits_for(confine)

        def pool(n):
            return WorkerPool(HANDLER, setup=SETUP, workers=n, timeout=self.timeout, env=env,
                              limits=limits, scratch_root=scratch)
        self.pools = {"reference": pool(self.ref_workers), "candidate": pool(self.workers)}
        if self.compile_ahead:
            self.pools["compile"] = pool(self.compile_workers)
        self._parent_checks = load_checks("parent") if self.gates else []
        if self.transport == "auto":
            self.transport = "files"
            if self.device == "cuda":
                self.transport = "cuda_ipc" if self._probe_ipc() else "files"
        log.info("verify: outputs reach the judge by %s", self.transport)

    def _probe_confined(self, env: dict, limits: Limits, scratch: str) -> bool:
        """Can a Landlock-confined worker initialize CUDA and launch a Triton kernel here?"""
        from ..isolation import confine as landlock
        if not landlock.supported():
            self.confine_probe = "no Landlock"
            return False
        pool = WorkerPool(HANDLER, setup=SETUP, workers=1, timeout=180, env=env, limits=limits,
                          scratch_root=scratch, setup_timeout=180)
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

    def _probe_ipc(self) -> bool:
        """One tensor from a candidate worker to a judge over CUDA IPC: where that fails (no
        IPC between these processes), outputs travel as files."""
        try:
            with self.pools["candidate"].hold() as cw:
                sent = cw.call({"role": "probe_send", "device": self.device}, 120)
                if not (sent.ok and isinstance(sent.value, dict) and "export" in sent.value):
                    log.warning("CUDA IPC probe: the sender failed: %s", sent.error or sent.status)
                    return False
                self._memory = MemoryGate(float(sent.value.get("total_gb") or 80.0) * GPU_SHARE)
                got = self.pools["reference"].call(
                    {"role": "probe_receive", "device": self.device,
                     "export": sent.value["export"]}, 120)
                cw.call({"role": "release"}, 60)
            ok = got.ok and isinstance(got.value, dict) and got.value.get("status") == "ok"
            if not ok:
                log.warning("CUDA IPC probe failed (%s): outputs travel as files",
                            (got.error or str(got.value))[:300])
            return ok
        except Exception as exc:  # noqa: BLE001
            log.warning("CUDA IPC probe failed (%s): outputs travel as files", exc)
            return False

    def close(self) -> None:
        for p in self.pools.values():
            p.close()
        self.pools = {}
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None
        if self.jobs:
            shutil.rmtree(self.jobs, ignore_errors=True)
            self.jobs = None

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
        threads = self.ref_workers + self.workers + (self.compile_workers if self.compile_ahead else 0) + 1
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
        try:
            res = self._row(row, cex, exclusive)
        except Exception as exc:  # a harness bug costs the row, loudly
            log.error("verify failed on row %s: %s", row.get("id"), traceback.format_exc())
            res = VerifyResult(status="runtime_error", reasons=["harness_error"],
                               error=f"{type(exc).__name__}: {exc}")
        res.seconds = time.monotonic() - t0
        for k, v in self._env_info.items():
            if not k.startswith("_") and getattr(res, k) is None:
                setattr(res, k, v)
        if self.device == "cpu":
            res.gpu = None
        return res

    def _compile(self, row: dict, warm: bool) -> TaskResult:
        """Compile ahead. A warm-up forward (Triton kernels compile at their first launch) runs
        only once device memory for it is reserved: the same worker first reports the
        reference's sizes from meta tensors, then warms up under the memory gate."""
        pool, lock_dir = self.pools["compile"], str(self.tmp / "lock")
        if not warm:
            return pool.call(self._task(row, "compile", warm=False, lock_dir=lock_dir),
                             self.compile_timeout)
        with pool.hold() as w:
            sized = w.call(self._task(row, "compile", size=True, lock_dir=lock_dir),
                           self.compile_timeout)
            if not (sized.ok and isinstance(sized.value, dict)
                    and sized.value.get("status") == "compiled"):
                return sized
            need = self._memory.clamp(warm_estimate_gb(sized.value.get("size_gb")))
            self._memory.acquire(need)
            try:
                res = w.call(self._task(row, "compile", warm=True, lock_dir=lock_dir),
                             self.compile_timeout)
            finally:
                self._memory.release(need)
        if res.ok and isinstance(res.value, dict):
            res.value["size_gb"] = sized.value.get("size_gb")
            res.value["seconds"] = (res.value.get("seconds") or 0.0) + (
                sized.value.get("seconds") or 0.0)
        return res

    def _task(self, row: dict, role: str, out_dir: Path | None = None, **extra) -> dict:
        key = row_key(row)
        code_hash = hashlib.sha256(f"{row.get('kernel_code') or ''}\0{self.device}".encode()
                                   ).hexdigest()[:20]
        t = {"role": role, "device": self.device, "backend": row.get("backend"),
             "pytorch_code": row.get("pytorch_code"), "kernel_code": row.get("kernel_code"),
             "seed_init": _seed(self.seed, key, "init"),
             "seeds": [_seed(self.seed, key, "trial", i) for i in range(self.trials)],
             "inplace_last": True, "tag": key[:8], "gates": self.gates,
             "extensions_dir": str(self.cache_dir / "ext" / code_hash),
             "keep_idle_gb": self.keep_idle_gb}
        if out_dir is not None:
            t["out_dir"] = str(out_dir)
        t.update(extra)
        return t

    def _row(self, row: dict, cex: ThreadPoolExecutor, exclusive: bool = False) -> VerifyResult:
        res = VerifyResult()
        ref_code, code = row.get("pytorch_code"), row.get("kernel_code")
        backend = row.get("backend") or infer_backend(code)
        if not ref_code:
            res.status = "reference_error"
            res.reason("no_reference")
            return res
        if not code:
            res.status = "unsupported"
            res.reason("no_candidate")
            return res
        try:
            pyast.parse(ref_code)
        except SyntaxError as exc:
            res.status, res.error = "reference_error", f"SyntaxError: {exc.msg} (line {exc.lineno})"
            res.reason("reference_syntax_error")
            return res
        try:
            pyast.parse(code)
        except SyntaxError as exc:
            res.status = "compile_error"
            res.error = f"SyntaxError: {exc.msg} (line {exc.lineno}): {(exc.text or '').strip()}"
            res.reason("syntax_error")
            return res
        if backend not in BACKENDS:
            res.status = "unsupported"
            res.reason(f"backend:{backend or 'unknown'}")
            return res
        # static gates first: a candidate they fail is deceptive on any device
        ctx = CheckContext(role="parent", device=self.device, backend=backend,
                           pytorch_code=ref_code, kernel_code=code, row=row)
        run_hook(self._parent_checks or [], "before_run", ctx)
        if self._fatal(ctx, res):
            return res
        if backend == "cuda" and self.device == "cpu":
            res.status = "unsupported"
            res.reason("cuda_needs_gpu")
            return res

        row = {**row, "backend": backend}
        compile_future = None
        if "compile" in self.pools and not (self.device == "cpu" and backend == "triton"):
            warm = self.device == "cuda" and backend == "triton"
            compile_future = cex.submit(self._compile, row, warm)

        # 1. compiled ahead (errors end the row here, before it takes a device worker)
        if compile_future is not None:
            comp = compile_future.result()
            if not self._task_ok(comp, res, "compile"):
                return res
            if comp.value.get("status") != "compiled":
                self._worker_status(comp.value, res)
                return res
            res.notes["compile_s"] = comp.value.get("seconds")
            _note_kept(res, "compile", comp)
            for k in ("import_s", "warm_s", "lock_wait_s"):
                if comp.value.get(k) is not None:
                    res.notes[f"compile_{k}"] = comp.value[k]
            if (comp.value.get("notes") or {}).get("patched"):
                res.notes["compile_patched"] = comp.value["notes"]["patched"]
            if comp.value.get("peak_gb") is not None:
                res.notes["warm_peak_gb"] = comp.value["peak_gb"]
            if comp.value.get("size_gb"):
                res.notes["size_gb"] = comp.value["size_gb"]

        job = self.jobs / secrets.token_hex(8)
        cand_dir = job / "c"
        # with CUDA IPC the candidate worker keeps its outputs on the device until the judge
        # has read them: the row holds that worker until then
        ipc = self.transport == "cuda_ipc"
        hold = self.pools["candidate"].hold() if ipc else contextlib.nullcontext(
            self.pools["candidate"])
        need_gb = self._memory.capacity if exclusive else self._memory.clamp(
            ROW_MEMORY_FACTOR * self._warm_peak(res.notes))
        self._memory.acquire(need_gb)
        self._inflight.acquire()  # rows between candidate and judge: bounds the saved outputs
        try:
            cw = hold.__enter__()
        except BaseException:
            self._inflight.release()
            self._memory.release(need_gb)
            raise
        try:
            # 2. the candidate: correctness trials (outputs handed over), then timing
            timed = self.device == "cuda" or backend == "cpp"
            cand_task = self._task(row, "candidate", cand_dir, time=timed,
                                   lock_dir=str(self.tmp / "lock"), time_budget=self.time_budget,
                                   min_trials=self.min_timed, max_trials=self.max_timed,
                                   transport=self.transport)
            cand_res = cw.call(cand_task)
            res.notes["candidate_s"] = round(cand_res.seconds, 3)
            _note_kept(res, "candidate", cand_res)
            if not self._task_ok(cand_res, res, "candidate"):
                return res
            value = cand_res.value
            self._remember_env(value.get("env"))
            if value.get("status") != "ok":
                self._worker_status(value, res)
                for f in value.get("flags") or []:  # deception outranks the error it caused
                    ctx.flag(f.get("reason", "flag"), bool(f.get("fatal")), f.get("status"))
                self._fatal(ctx, res)
                return res

            # 3. the judge: reference outputs computed and compared where no candidate code
            # ever ran; they never leave that worker
            judge_task = self._task(
                row, "judge", cand_dir=str(cand_dir), lock_dir=str(self.tmp / "lock"),
                cand_structures=value.get("structures") or [],
                cand_exports=value.get("exports") or [])
            judge = self.pools["reference"].call(judge_task)
            res.notes["judge_s"] = round(judge.seconds, 3)
            _note_kept(res, "judge", judge)
        finally:
            try:
                if ipc and cw.alive:
                    rel = cw.call({"role": "release", "keep_idle_gb": self.keep_idle_gb}, 60)
                    _note_kept(res, "release", rel)
            finally:
                hold.__exit__(None, None, None)
                shutil.rmtree(job, ignore_errors=True)
                self._inflight.release()
                self._memory.release(need_gb)
        if not judge.ok or not isinstance(judge.value, dict):
            res.status = "reference_error"
            res.reason(f"judge_{judge.status}")
            res.error = _short(judge.error or judge.output[-1500:] or None)
            return res
        jv = judge.value
        self._remember_env(jv.get("env"))
        for k, v in (jv.get("notes") or {}).items():  # e.g. how the reference fails float64
            res.notes.setdefault(k, v)
        for f in jv.get("flags") or []:  # the reference's own gates (degeneracy)
            ctx.flag(f.get("reason", "flag"), bool(f.get("fatal")),
                     f.get("status") or "degenerate_reference")
        if jv.get("status") != "ok":
            self._worker_status(jv, res)
            return res
        if self._fatal(ctx, res, default="degenerate_reference"):
            return res

        # 4. the verdict
        cmp = jv.get("comparison") or {}
        ok = bool(cmp.get("ok"))
        res.max_abs_err, res.max_rel_err = cmp.get("max_abs_err"), cmp.get("max_rel_err")
        res.correct = ok
        ctx.worker_report = value
        for f in value.get("flags") or []:
            ctx.flag(f.get("reason", "flag"), bool(f.get("fatal")), f.get("status"))
        res.notes.update(value.get("notes") or {})
        run_hook(self._parent_checks or [], "after_candidate", ctx)
        timing = value.get("timing")
        if timing:
            sp = speedup_ci(timing.get("ref_ms") or [], timing.get("cand_ms") or [],
                            seed=_seed(self.seed, row_key(row), "boot"))
            for k, v in sp.items():
                setattr(res, k, v)
            res.timed_wall_s = float(timing.get("wall_s") or 0.0)
            res.timed_trials = len(timing.get("ref_ms") or [])
        if not ok:
            res.status = "incorrect"
            res.reason(*(cmp.get("reasons") or ["output_mismatch"]))
            res.error = _short(cmp.get("detail"))
            self._fatal(ctx, res)  # deception outranks plain incorrectness
            return res
        if self._fatal(ctx, res):
            return res
        res.status = "verified"
        return res

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


def _job_root(tmp: Path, min_free: int = 32 * 2**30) -> Path:
    """Where candidates leave their outputs for the judge: RAM-backed /dev/shm when it has room
    (KernelBench outputs reach gigabytes), else beside the run's other files."""
    try:
        st = os.statvfs("/dev/shm")
        if st.f_bavail * st.f_frsize >= min_free:
            root = Path(tempfile.mkdtemp(prefix="curate-verify-jobs-", dir="/dev/shm"))
            os.chmod(root, 0o700)
            return root
    except OSError:
        pass
    root = tmp / "jobs"
    root.mkdir(exist_ok=True)
    return root


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
