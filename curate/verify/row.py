"""One row, in named phases: precheck (the code alone, nothing runs), compile ahead, then on its
device a fresh candidate worker and a fresh judge: load, correctness, timing, verdict."""

from __future__ import annotations

import contextlib
import hashlib
import random
import time
from collections import Counter

from .. import pyast
from ..record import row_key
from . import messages as msg
from .budget import RowClock
from .correctness import CORRECTNESS_CALLS, correctness, side_by_side
from .isa import missing
from .resized import plan_second
from .result import BACKENDS, VerifyResult, infer_backend
from .sides import RowOver, Side
from .timed import timed_rounds
from .verdict import apply_findings

# A row's device memory, from its reference's inputs and outputs (shapes), by what its two
# workers hold at their peak: each its models, its input sets (kept while one set is at most
# `keep_bytes`; else made again at each call), its buffers and a fresh set being made, the
# correctness calls' outputs (kept together while they fit in `keep_bytes`; else one at a
# time), a live output, a timed output and the gates' or the comparison's temporaries; the
# judge also runs the reference once in float64 where that run fits (messages.float64_runs:
# on the GPU not for large rows, which then reserve nothing for it). Small rows reserve for
# both peaks at once (their reference and first batch run side by side); a larger row's two
# workers work one after the other (correctness.side_by_side), so it reserves for the larger
# of its two phases: one side at its peak, the other holding what it keeps between requests.
# ROW_MEMORY_SLACK covers the allocator's rounding, ROW_MEMORY_BASE_GB two CUDA contexts and
# library workspaces.
ROW_MEMORY_SLACK, ROW_MEMORY_BASE_GB = 1.25, 4.0
LOAD_BASE_GB = 1.5   # the two CUDA contexts of a loaded row (library workspaces come at its calls)
UNSIZED_GB = 0.125   # inputs and outputs of a row whose sizes are not known (the CPU)


def row_memory_gb(size_gb: dict | None, keep_gb: float = 1.0, gpu: bool = False) -> float:
    """Device memory a row reserves, from the reference's shapes (`Compile(size=True)`)."""
    size_gb = size_gb or {"inputs": UNSIZED_GB, "outputs": UNSIZED_GB}
    i, o = size_gb.get("inputs", 0.0), size_gb.get("outputs", 0.0)
    p = size_gb.get("params", 0.0)
    kept = i <= keep_gb
    sets = 4 * i if kept else 0.0                  # three trial sets and the poked one
    outs = CORRECTNESS_CALLS * o if CORRECTNESS_CALLS * o <= keep_gb else o
    runs64 = msg.float64_runs(2 * (i + o), keep_gb if gpu else None)
    float64 = 2 * (i + o + p) if runs64 else 0.0
    if kept:   # the buffers and a pristine copy; three live outputs in the gates' calls
        cand_rest = 2 * p + sets + outs + 2 * i
        judge_rest = p + sets + outs + 2 * i
        candidate, judge = cand_rest + 3 * o, judge_rest + max(3 * o, float64)
    else:
        # the buffers, and a set being made again (or a pristine copy) beside them: the
        # candidate also holds its kept output (`outs`) and one more output then, or the gates'
        # calls b and c; the judge one output beside that set, or a reference output beside
        # the one received. Sets made again now go into the buffers (worker/into.py) and
        # mutation checks read digests, so the `i + o` terms may be a copy too many on the
        # GPU: kept until benchmarks/row_memory.py measures the workers there (a row that runs
        # out of memory is run again alone, so an estimate too low costs time, not verdicts)
        cand_rest, judge_rest = 2 * p + i + outs, p + i
        candidate = cand_rest + max(i + o, 2 * o)
        judge = judge_rest + max(i + o, 2 * o, float64)
    if side_by_side(size_gb, keep_gb * 2**30):
        both = candidate + judge
    else:
        both = max(candidate + judge_rest, cand_rest + judge)
    return ROW_MEMORY_SLACK * both + ROW_MEMORY_BASE_GB


def load_memory_gb(size_gb: dict | None, keep_gb: float = 1.0) -> float:
    """Device memory a row's two workers hold once loaded, before any call: the CUDA contexts,
    the models (the candidate's two, the judge's one) and the input sets each side keeps (or
    the one set a side makes at a time). The row enters with this and grows to `row_memory_gb`
    after the load (scheduler.MemoryGate.grow)."""
    size_gb = size_gb or {"inputs": UNSIZED_GB, "outputs": UNSIZED_GB}
    i, p = size_gb.get("inputs", 0.0), size_gb.get("params", 0.0)
    sets = 5 * i if i <= keep_gb else i           # the kept sets and the buffers, or one set
    return ROW_MEMORY_SLACK * (3 * p + 2 * sets) + LOAD_BASE_GB


def seed_of(*parts) -> int:
    h = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


def row_seeds(seed: int, key: str, trials: int) -> dict:
    """The seeds a row's workers build from (the model's, each trial's, the poked set's): one
    rule for the Load request and the row's record."""
    return {"init": seed_of(seed, key, "init"),
            "trials": [seed_of(seed, key, "trial", i) for i in range(trials)],
            "poke": seed_of(seed, key, "poke")}


class WholeDevice(Exception):
    """The row needs its device's whole memory: the engine runs it alone, once, after the rows
    that can share the device (draining the device for it mid-run would idle it)."""


class RowRun:
    """Verify one row on behalf of `run` (the engine's shared state)."""

    def __init__(self, run, index: int, row: dict, exclusive: bool = False):
        self.run, self.index, self.cfg = run, index, run.cfg
        self.backend = row.get("backend") or infer_backend(row.get("kernel_code"))
        self.row = {**row, "backend": self.backend}
        self.key = row_key(row)
        self.exclusive = exclusive
        self.res = VerifyResult()
        self.clock = RowClock(run.budget)
        self.findings: list = []
        self.out_bytes = 0      # the candidate's output size (chooses how outputs travel)
        self.spent: Counter = Counter()
        self._phase: tuple[str, float] | None = None
        self.where: str | None = None
        self.size_gb: dict | None = None   # the reference's sizes (compile ahead, GPU only)
        self.second = None   # a second shape that could not run in the first pass's workers
        self.second_pass = False   # this is a second shape's pass (resized.SecondShape)
        self.grant = None    # the row's hold on its device's memory (grows after the load)
        # what the candidate's process can never see: which calls are checked, the scales
        self.rng = random.Random(f"{run.secret.hex()}:{self.key}")

    # -- the phases ---------------------------------------------------------------------------
    def verify(self) -> VerifyResult:
        try:
            self._precheck()
            self.size_gb = self._compile()
            with self.run.scheduler.place() as device:
                self.res.device_index = device.index
                need = self._need(device, self.size_gb)
                self.res.notes["reserved_gb"] = round(need, 2)
                if need >= device.memory.capacity and not self.exclusive:
                    raise WholeDevice   # alone, after the rows that share the device
                load = self._load_need(device, need)
                self.phase("waiting for device memory")
                with device.memory.reserve(load, then=need) as self.grant:
                    self._pairs(device)
                if self.second is not None:
                    self.second.run(device)   # on fresh workers, under its own reservation
        except RowOver:
            pass
        self.phase(None)
        self.res.notes["phases_s"] = {k: round(v, 3) for k, v in self.spent.items()}
        self.res.notes["budget_s"] = {k: round(v, 3) for k, v in self.clock.by_phase.items()}
        return self.res

    def _need(self, device, size_gb: dict | None, scale: float = 1.0) -> float:
        """Device memory to reserve; `scale` multiplies the inputs and outputs (a second shape)."""
        if self.exclusive:
            return device.memory.capacity
        if size_gb and scale != 1.0:
            size_gb = {**size_gb, **{k: size_gb.get(k, 0) * scale for k in ("inputs", "outputs")}}
        return device.memory.clamp(row_memory_gb(size_gb, self.cfg.keep_bytes / 2**30,
                                                 gpu=self.cfg.device == "cuda"))

    def _load_need(self, device, need: float) -> float:
        """What the row enters its device with: its load's memory where the row grows after
        the load, else (alone on the device) its whole estimate."""
        if self.exclusive:
            return need
        return min(need, device.memory.clamp(load_memory_gb(self.size_gb,
                                                             self.cfg.keep_bytes / 2**30)))

    def _precheck(self) -> None:
        """What the parent decides from the code alone (nothing runs)."""
        ref_code, code, res = self.row.get("pytorch_code"), self.row.get("kernel_code"), self.res
        if not ref_code:
            self._end("reference_error", "no_reference")
        if not code:
            self._end("unsupported", "no_candidate")
        try:
            pyast.parse(ref_code)
        except SyntaxError as exc:
            self._end("reference_error", "reference_syntax_error",
                      error=f"SyntaxError: {exc.msg} (line {exc.lineno})")
        try:
            pyast.parse(code)
        except SyntaxError as exc:
            self._end("compile_error", "syntax_error", error=f"SyntaxError: {exc.msg} "
                      f"(line {exc.lineno}): {(exc.text or '').strip()}")
        if self.backend not in BACKENDS:
            self._end("unsupported", f"backend:{self.backend or 'unknown'}")
        if self.cfg.gates and self.cfg.static_gates:
            self.findings.extend(self.run.static_findings(code, ref_code))
            if apply_findings(self.findings, res):
                raise RowOver
        if self.backend == "cuda" and self.cfg.device == "cpu":
            self._end("unsupported", "cuda_needs_gpu",
                      error="a CUDA pair needs a GPU: run verify with --device cuda")
        if self.backend == "cpp" and self.cfg.device == "cuda":
            self._end("unsupported", "cpp_needs_cpu",
                      error="a C++ pair is timed on the CPU: run verify with --device cpu")
        lacks = missing(code) if self.backend == "cpp" else []
        if lacks:
            self._end("unsupported", "cpu_lacks:" + ",".join(lacks),
                      error=f"the C++ kernels are built for {', '.join(lacks)}, which this CPU "
                            "lacks: verify the pair on a CPU that has them, or generate it "
                            "again here (curate synth inductor --device cpu)")

    def _compile(self) -> dict | None:
        """Build ahead in a fresh worker (CUDA extensions, inductor's C++ and Triton kernels) so
        that device workers do not wait on compilers. Untrusted Python gets the compile phase's
        budget; a compiler process gets up to `compile_timeout` more."""
        pool = self.run.compile_pool
        if pool is None or (self.cfg.device == "cpu" and self.backend == "triton"):
            return None
        self.run.break_stale_locks(self.row)
        self.phase("waiting for a compile worker")
        with pool.hold(env=self.run.row_cache(self.row)) as w:
            side = self.side(w, "compile")
            self.phase("compiling ahead")
            reply, _ = side.ask(msg.Compile(
                device=self.cfg.device, pytorch_code=self.row["pytorch_code"],
                kernel_code=self.row["kernel_code"], tag=self.key[:8],
                extensions_dir=self.run.row_cache(self.row)["TORCH_EXTENSIONS_DIR"],
                size=self.cfg.device == "cuda"), "compile", (msg.Compiled,),
                compiler_grace=self.run.budget.compiler_grace)
        self.res.notes["compile_s"] = round(reply.seconds, 3)
        if reply.import_s is not None:
            self.res.notes["compile_import_s"] = reply.import_s
        if reply.size_gb:
            self.res.notes["size_gb"] = reply.size_gb
        return reply.size_gb

    def _pairs(self, device) -> None:
        """The row's pair of workers (the second shape in the same pair where it can be);
        on the CPU near the build's threshold, more pairs."""
        plan = self._pair(device, first=True)
        if plan is None or not self._near_threshold():
            return
        figures = ("speedup", "speedup_ci_low", "speedup_ci_high", "ref_ms", "kernel_ms")
        pairs = [{k: getattr(self.res, k) for k in figures}]
        for _ in range(self.cfg.retime_pairs):
            self._pair(device, first=False, plan=plan)
            pairs.append({k: getattr(self.res, k) for k in figures})
        mid = sorted(pairs, key=lambda p: p["speedup"])[len(pairs) // 2]
        for k, v in mid.items():
            setattr(self.res, k, v)
        self.res.notes["pairs"] = pairs
        self.run.count("retimed")

    def _pair(self, device, first: bool, plan=None):
        """A fresh candidate worker and a fresh judge for one pass over the row; after the
        first pass, its second shape on the same two workers where the row's memory allows."""
        self.phase("waiting for workers")
        self.run.break_stale_locks(self.row)   # the candidate may build too (no compile ahead)
        env = {**self.run.row_cache(self.row), **device.env()}
        with device.pools["candidate"].hold(env=env) as cw, \
                device.pools["judge"].hold(env=device.env()) as jw:
            cand, judge = self.side(cw, "candidate"), self.side(jw, "judge")
            self._load(cand, judge)
            if self.grant.extra:
                self.phase("waiting to grow its device memory")   # the rest of its estimate
                device.memory.grow(self.grant)
            if first:
                cand_ms, ref_ms, out_bytes, timed = correctness(self, device, cand, judge)
                plan = (cand_ms, ref_ms, out_bytes) if timed else None
            if plan is not None and self.res.status != "incorrect":
                timed_rounds(self, device, cand, judge, *plan)
            self._finish(device, cand, judge, first)
            if first:
                self._second_shape(device, cand, judge)
            self.phase("ending workers")
        return plan if self.res.speedup is not None else None

    def _second_shape(self, device, cand: Side, judge: Side) -> None:
        """Plan the second shape and run it on these two workers where the row's memory may
        grow to it (scheduler.MemoryGate.regrow); else `verify` runs it on fresh ones after
        the row's pairs."""
        def need(scale: float = 1.0) -> float:
            return self._need(device, self.size_gb, scale)
        second = plan_second(self, device, need)
        if second is not None and not second.run(device, sides=(cand, judge), held_gb=need()):
            self.second = second

    def _load(self, *sides: Side, reused: bool = False) -> None:
        """Start both workers (fork, CUDA's start-up), then load them at once: the first side
        given in this thread, the others in the background, their replies read in the order
        given (a row the first side ends never waits on the others' verdicts). `reused`: they
        served the row's first pass (the candidate keeps its module). No device gate for
        either: a load is mostly imports and building on the host, and a load held shared
        made every timed hold wait for it while the rows behind that hold queued."""
        for side in sides:
            if not reused:
                self.phase(f"starting the {side.role} worker")
                try:
                    side.worker.start()
                except Exception as exc:  # noqa: BLE001 - the worker could not even start
                    self._end("crashed", f"{side.role}_start_failed", error=str(exc))
        first, rest = sides[0], sides[1:]
        pending = [s.begin(self.load_request(s.role, keep_candidate=reused), "load",
                           (msg.Loaded,)) for s in rest]
        try:
            replies = [(first, first.ask(self.load_request(first.role, keep_candidate=reused),
                                         "load", (msg.Loaded,))[0])]
            for side, p in zip(rest, pending):
                self.phase(f"{side.role} load")   # the part of its load the first did not hide
                replies.append((side, p.wait()[0]))
        finally:
            for p in pending:
                p.drop()
        for side, reply in replies:
            self.run.remember_env(reply.env)
            if side.role == "judge":   # the trusted side's view, for the row's record
                self.res.notes.setdefault("judge_env", reply.env)
                self.res.notes.setdefault("inputs", reply.inputs)

    def load_request(self, role: str, keep_candidate: bool = False) -> msg.Load:
        cfg, key = self.cfg, self.key
        seeds = row_seeds(cfg.seed, key, cfg.trials)
        return msg.Load(
            role=role, device=cfg.device, backend=self.backend,
            pytorch_code=self.row["pytorch_code"],
            kernel_code=self.row["kernel_code"] if role == "candidate" else None,
            seed_init=seeds["init"], seeds=seeds["trials"], poke=seeds["poke"],
            tag=key[:8], gates=cfg.gates,
            keep_candidate=keep_candidate and role == "candidate", keep_bytes=cfg.keep_bytes,
            digest=cfg.digest,
            extensions_dir=self.run.row_cache(self.row)["TORCH_EXTENSIONS_DIR"])

    def _finish(self, device, cand: Side, judge: Side, first: bool) -> None:
        """Closing gates in the candidate's worker, then the judge's comparison of the whole
        pass (every correctness call and every timed call it checked): the verdict."""
        with self.shared(device):
            cand.ask(msg.Finish(keep_idle_gb=self.cfg.keep_idle_gb), "verdict",
                     (msg.Finished,))
            done, _ = judge.ask(msg.Finish(keep_idle_gb=self.cfg.keep_idle_gb), "verdict",
                                (msg.Finished,))
        cmp = done.comparison or {}
        if first:
            self.res.max_abs_err, self.res.max_rel_err = cmp.get("max_abs_err"), \
                cmp.get("max_rel_err")
            self.res.notes["outputs"] = cmp.get("outputs") or []
        if not cmp.get("ok") or self.res.status == "incorrect":
            self.res.correct = False
            apply_findings(self.findings, self.res)
            if self.res.status != "deceptive":
                self._end("incorrect", *(cmp.get("reasons") or ["output_mismatch"]),
                          error=cmp.get("detail"))
            raise RowOver
        if apply_findings(self.findings, self.res):
            raise RowOver
        self.res.correct, self.res.status = True, "verified"

    # -- helpers ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def shared(self, device):
        """The device held shared. Waiting for it (behind timed batches, which go first) is a
        phase of its own, not charged to the request before it."""
        self.phase("waiting for the device")
        with device.gate.shared():
            yield

    def side(self, worker, role: str) -> Side:
        return Side(worker, role, self.res, self.clock, self.findings, on_phase=self.phase)

    def _near_threshold(self) -> bool:
        low, t = self.res.speedup_ci_low, self.cfg.threshold
        from .config import RETIME_BAND
        return bool(self.cfg.retime_pairs and self.res.status == "verified" and low
                    and t / (1 + RETIME_BAND) <= low <= t * (1 + RETIME_BAND))

    def _end(self, status: str, *reasons: str, error: str | None = None) -> None:
        self.res.end(status, *reasons, error=error)
        raise RowOver

    def phase(self, what: str | None) -> None:
        """What this row waits on or runs now (the watchdog names it); the seconds of the
        phase it leaves go to its `phases_s`."""
        now = time.monotonic()
        if self._phase is not None:
            name, since = self._phase
            self.spent[name.split(" (")[0]] += now - since
        self._phase = (what, now) if what is not None else None
        if what is not None:
            self.where = what   # the phase a row that ends here ended in (its record says)
            self.run.inflight.enter(self.index, what)
