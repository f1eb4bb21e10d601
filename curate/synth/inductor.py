"""`synth-inductor`: every reference program -> one standalone candidate made by torch.compile.

Each reference is compiled in a sandboxed worker (curate.isolation.WorkerPool; the reference is
untrusted code), with fresh inductor/Triton caches per worker, a per-row timeout and many
workers in parallel. The worker records the output code and what the compiled run did (graph
argument wiring, launches); the parent only rewrites text into a program (rewrite_triton on
cuda, rewrite_cpp on cpu). A reference that does not compile, breaks the graph, times out or
crashes its worker is a dropped row with a machine-readable reason, never a failed run.
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator

from ..pipeline.feed import recorded
from ..pipeline.step import Outcome, Resources, Step
from ..record import add_reasons, content_hash
from .rewrite import RewriteError

HANDLER = "curate.synth.inductor_worker:handle"
SETUP = "curate.synth.inductor_worker:setup"
# the fork server's imports: on a CUDA build, importing inductor's compile_fx initializes CUDA
# (a forked worker then cannot use it), so there it is each worker's own import
PRELOAD = {"cpu": ["torch", "torch._dynamo", "torch._inductor.compile_fx", "?triton"],
           "cuda": ["torch", "torch._dynamo", "?triton"]}
UID_OFFSET = 1024  # synth workers' uids in this process's block (sandbox.uid_block)
MODES = ("default", "max-autotune")
DEVICES = ("cuda", "cpu")


def _versions() -> dict:
    out = {}
    try:
        from importlib.metadata import version
        for pkg in ("torch", "triton"):
            try:
                out[pkg] = version(pkg)
            except Exception:  # noqa: BLE001
                out[pkg] = None
    except Exception:  # noqa: BLE001
        pass
    return out


def default_workers(device: str) -> int:
    """CPU compiles are CPU-bound (half the cores, OpenMP kernels need the rest); on a GPU
    machine compiles are mostly Python, so use most cores, up to 8: more workers were slower,
    because inductor starts its own compile subprocesses in every worker (the measurement is in
    benchmarks/results/INDEX.md, "synth workers")."""
    cores = os.cpu_count() or 2
    if device == "cuda":
        return max(1, min(8, cores - 1))
    return max(1, cores // 2)


def isa_probe_dir() -> str:
    """Where inductor's CPU-ISA probe programs may stay between runs (see inductor_worker)."""
    torch_v = _versions().get("torch") or "unknown"
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    path = os.path.join(base, "curate", f"inductor-isa-probe-{torch_v}")
    os.makedirs(path, exist_ok=True)
    return path


def warm_isa_probes(path: str) -> None:
    """Run inductor's CPU-ISA probes into `path` in a trusted process of our own (torch's code,
    no row's), so that sandboxed workers only read them: the folder stays the parent's, but for
    the lock files that every reader opens for writing."""
    import subprocess
    import sys
    code = "from torch._inductor.cpu_vec_isa import pick_vec_isa; pick_vec_isa()"
    subprocess.run([sys.executable, "-c", code], timeout=600, capture_output=True,
                   env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": path})
    locks = os.path.join(path, "locks")
    os.makedirs(locks, exist_ok=True)
    os.chmod(locks, 0o1777)
    for name in os.listdir(locks):
        os.chmod(os.path.join(locks, name), 0o666)


def generator_name(versions: dict, device: str, mode: str = "default") -> str:
    """`torch-2.11.0/inductor+triton-3.6.0`, with `:max-autotune` when not the default mode."""
    torch_v = (versions.get("torch") or "?").split("+")[0]
    name = f"torch-{torch_v}/inductor"
    if device == "cuda" and versions.get("triton"):
        name += f"+triton-{versions['triton']}"
    if mode and mode != "default":
        name += f":{mode}"
    return name


def candidate_row(row: dict, capture: dict, device: str) -> tuple[dict | None, list[str], str]:
    """(candidate row or None, reasons, error text) for one successful capture."""
    from .rewrite_cpp import build_cpp_program
    from .rewrite_triton import build_triton_program
    gen = generator_name(capture.get("versions", {}), device, capture.get("mode") or "default")
    try:
        if device == "cuda":
            code, reasons = build_triton_program(row["pytorch_code"], capture, gen)
        else:
            code, reasons = build_cpp_program(row["pytorch_code"], capture, gen)
    except RewriteError as exc:
        return None, [exc.reason], exc.detail
    if "synth:no_kernel" in reasons:
        return None, reasons, "inductor generated no kernel of its own (library calls only)"
    new = dict(row)
    new.update(kernel_code=code, original_kernel_code=capture["codes"][0],
               backend="triton" if device == "cuda" else "cpp", generator=gen,
               ref_id=row.get("id") or content_hash(row.get("pytorch_code")),
               status=None, error=None)
    new["id"] = content_hash(row["pytorch_code"], code)
    new["reasons"] = []
    add_reasons(new, *reasons)
    return new, reasons, ""


class InductorSynth(Step):
    """Compile each reference with torch.compile (inductor) and emit a standalone candidate."""

    name = "synth-inductor"
    batch_size = 64

    def __init__(self, device: str = "cpu", mode: str = "default", workers: int | None = None,
                 timeout: float = 300, sandbox: str = "auto"):
        if device == "auto":
            from ..pipeline.config import detect_device
            device = detect_device()
        if device not in DEVICES:
            from ..errors import BadInput
            raise BadInput(f"unknown device {device!r}", fix="use --device cuda or cpu")
        if mode not in MODES:
            from ..errors import BadInput
            raise BadInput(f"unknown mode {mode!r}", fix="use --mode default or max-autotune")
        from ..isolation.sandbox import MODES as SANDBOX_MODES
        if sandbox not in SANDBOX_MODES:
            from ..errors import BadInput
            raise BadInput(f"unknown sandbox {sandbox!r}", fix="use auto, strict or off")
        self.device, self.mode, self.sandbox_mode = device, mode, sandbox
        self.sandbox = None  # what setup() could put the workers under
        self.workers = workers or default_workers(device)
        self.timeout = float(timeout)
        self.resources = Resources(cpus=self.workers, gpus=1 if device == "cuda" else 0)
        self.pool = None
        self._seconds: list[float] = []
        self.not_after: float | None = None  # epoch seconds: rows not started by then are skipped

    def config(self) -> dict:
        return {"device": self.device, "mode": self.mode, **_versions()}

    def setup(self) -> None:
        from ..isolation import Limits, WorkerPool
        import tempfile
        self._cache = tempfile.mkdtemp(prefix="curate-synth-cache-")
        env = {"TORCHINDUCTOR_COMPILE_THREADS": "1", "CURATE_SYNTH_CACHE": self._cache,
               "CURATE_SYNTH_DEVICE": self.device, "CURATE_ISA_CACHE": isa_probe_dir(),
               "TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}
        # a fresh cache dir for this run (inductor_worker.setup): nothing comes from an earlier
        # run's cache, and the FX graph cache is off, so every row's code is generated anew
        # reference programs are untrusted too: their workers run under bubblewrap with a uid
        # each, as verify's do, and on the CPU device also under Landlock (writes only to
        # scratch, this run's cache and the ISA-probe locks; no TCP) where the kernel has it
        # (a Landlock-confined worker cannot initialize CUDA on the GPU machine)
        limits = Limits(confine=self.device == "cpu",
                        writable=(self._cache, env["CURATE_ISA_CACHE"]))
        from ..isolation.freeze import BACKGROUND
        from ..isolation.sandbox import uid_block
        wrap = self._sandbox_argv(env)
        self.pool = WorkerPool(HANDLER, setup=SETUP, workers=self.workers, timeout=self.timeout,
                               setup_timeout=300, env=env, limits=limits,
                               max_tasks_per_worker=50, scratch_root=self._cache,
                               fork_server=PRELOAD[self.device] if wrap else None, sandbox=wrap,
                               uid_base=uid_block() + UID_OFFSET if wrap else None,
                               # stopped while verify times a pair (a streaming build runs
                               # both at once); frozen time does not count against a row
                               freezer=BACKGROUND)

    def _sandbox_argv(self, env: dict) -> list[str] | None:
        """bubblewrap around the workers, as verify's (reference programs are untrusted too):
        each worker under a uid of its own caches in its own scratch, and reads the ISA probes
        that a trusted process made beforehand."""
        from ..isolation.sandbox import choose
        wrap, _ = choose(self.sandbox_mode, self.device, [self._cache, env["CURATE_ISA_CACHE"]],
                         "synth")
        if wrap is None:
            self.sandbox = "none"
            return None
        env.pop("CURATE_SYNTH_CACHE")  # one uid may not write into another's cache folders
        if self.device == "cpu":
            warm_isa_probes(env["CURATE_ISA_CACHE"])
        self.sandbox = "bwrap+uid"
        return wrap

    def teardown(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if getattr(self, "_cache", None):
            import shutil
            shutil.rmtree(self._cache, ignore_errors=True)
            self._cache = None

    def stats(self) -> dict:
        s = sorted(self._seconds)
        if not s:
            return {}
        return {"compile_seconds_median": s[len(s) // 2], "compile_seconds_total": sum(s),
                "sandbox": self.sandbox}

    def process(self, rows: list[dict]) -> Iterator[tuple[int, Outcome]]:
        return self.process_stream(rows)

    def process_stream(self, rows: Iterable[dict]) -> Iterator[tuple[int, Outcome]]:
        """Each reference goes to the next free worker as it arrives."""
        if self.pool is None:
            self.setup()
        seen: list[dict] = []
        crowded = []
        for i, res in self.pool.map(self._task(r) for r in recorded(rows, seen)):
            row = dict(seen[i])
            self._seconds.append(res.seconds)
            outcome = self._outcome(row, res)
            if self.device == "cuda" and "synth:oom" in (outcome.reasons or []):
                crowded.append(i)  # other rows filled the GPU: once more, alone, at the end
                continue
            yield i, outcome
        for i in crowded:
            res = self.pool.call(self._task(seen[i]))
            self._seconds.append(res.seconds)
            yield i, self._outcome(dict(seen[i]), res)

    def _task(self, row: dict) -> dict:
        return {"pytorch_code": row.get("pytorch_code") or "", "device": self.device,
                "mode": self.mode, "seed": 0, "not_after": self.not_after}

    def _outcome(self, row: dict, res) -> Outcome:
        if res.status == "timeout":
            row["error"] = f"compiling took longer than {self.timeout:.0f}s"
            return Outcome.drop(row, "synth:timeout")
        if res.status in ("crashed", "output_flood"):
            row["error"] = (res.error or res.output or "")[-2000:]
            return Outcome.drop(row, "synth:crashed")
        if res.status == "error":
            row["error"] = (res.error or "")[-2000:]
            low = row["error"].lower()
            oom = "out of memory" in low or "alloc_failed" in low
            return Outcome.drop(row, "synth:oom" if oom else "synth:worker_error")
        cap = res.value or {}
        if not cap.get("ok"):
            row["error"] = (cap.get("error") or "")[-2000:] or None
            return Outcome.drop(row, cap.get("reason") or "synth:compile_error")
        new, reasons, err = candidate_row(row, cap, self.device)
        if new is None:
            row["error"] = err[-2000:] or None
            return Outcome.drop(row, *reasons)
        return Outcome.keep(new)
