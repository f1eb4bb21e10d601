"""Worker side of verify: runs inside a sandboxed worker (curate.isolation), never in the parent.

Three roles, one per task:

- `reference`: load the reference program, build `Model` from the seed, run it on the seeded
  inputs of every trial and `torch.save` its outputs where the parent told it. Reference workers
  never import candidate code.
- `compile`: import the candidate ahead of its turn with the shared compile caches, so CUDA
  extensions and Triton kernels are built on CPU processes while the GPU times other pairs.
- `candidate`: load the reference (for inputs and timing) and the candidate, build both models
  from the same seed (and the same parameters), run the candidate on fresh clones of every
  trial's inputs (the last trial rewrites the previous buffers in place), save its outputs, then
  time reference and candidate interleaved on the same inputs. Gates plug in through
  `curate.verify.hooks` at the points marked `run_hook`.

Timers are captured when this module is imported, before any candidate code exists.
"""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import importlib.util
import itertools
import os
import random
import re
import sys
import time
import traceback
from pathlib import Path

import torch

from .timing import capture_timers

TIMERS = capture_timers()           # before any candidate code is imported

from .compare import Comparison, compare, flatten_outputs  # noqa: E402
from .hooks import (CandidateCall, CheckContext, is_out_of_memory, load_checks,  # noqa: E402
                    run_hook)
from .calls import (CallRunner, OutputRefused, output_bytes,  # noqa: E402
                    poked, reset_persisting_l2)
from . import transport  # noqa: E402
from .timing import L2Flush  # noqa: E402

_counter = itertools.count()
_baseline: dict | None = None
_rebased = False
_flush: L2Flush | None = None
_checks: list | None = None
_HARNESS: dict = {}
_TIMER_FUNCS = (TIMERS.perf_counter, TIMERS.cuda_synchronize, TIMERS.cuda_record,
                TIMERS.cuda_elapsed)


# -- worker lifecycle --------------------------------------------------------------------------
def setup() -> None:
    """Once per worker: import what every task needs and remember library functions' identity."""
    global _baseline
    device = os.environ.get("CURATE_VERIFY_DEVICE", "cpu")
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.init()
    if os.environ.get("TRITON_INTERPRET") == "1":
        from curate.synth.interpret import patch_libdevice  # erf/tanh... under the interpreter
        patch_libdevice()
    # importing torch._dynamo (which inductor's runtime, and so every inductor candidate, pulls
    # in) wraps torch.manual_seed: before the snapshot, so that it is not taken for the
    # candidate's tampering (on the H200 every compile worker was replaced after one task)
    importlib.import_module("torch._dynamo")  # not `import torch._dynamo`: that binds `torch` locally
    same_allocator_settings()
    _baseline = _snapshot()
    _HARNESS.update(_snapshot_harness())


def same_allocator_settings() -> None:
    """The judge and the candidate's worker allocate host memory alike: the candidate's gates
    keep freed blocks in glibc's heap (no trimming, no mmap below 32 MiB), and a judge left at
    glibc's defaults paid page faults on every call instead (honest C++ rows measured 0.86x
    against 0.68x in one plain loop)."""
    try:
        import ctypes
        libc = ctypes.CDLL(None)
        libc.mallopt(-1, 1 << 30)   # M_TRIM_THRESHOLD
        libc.mallopt(-3, 32 << 20)  # M_MMAP_THRESHOLD
    except Exception:  # noqa: BLE001 - not glibc
        pass


def handle(task: dict) -> dict:
    role = task["role"]
    os.environ["TORCH_EXTENSIONS_DIR"] = task.get("extensions_dir") or os.environ.get(
        "TORCH_EXTENSIONS_DIR", os.path.join(os.getcwd(), "torch_extensions"))
    result = _dispatch(role, task)
    if role in ("compile", "release") or task.get("op") == "finish":
        # not between a row's timed batches: they would allocate afresh inside the clock
        return release_device_memory(result, task.get("keep_idle_gb", KEEP_IDLE_GB))
    return result


def _dispatch(role: str, task: dict) -> dict:
    if role == "judge":
        return run_judge(task)
    if role == "compile":
        return run_compile(task)
    if role == "candidate":
        return run_candidate(task)
    if role == "release":
        return {"status": "ok", "released": transport.release()}
    if role == "probe_send":
        return probe_send(task)
    if role == "probe_cuda":
        return probe_cuda(task)
    if role == "probe_receive":
        return probe_receive(task)
    raise ValueError(f"unknown role {role!r}")


KEEP_IDLE_GB = 1.0   # device memory an idle worker may keep beyond what it exported


def release_device_memory(result, keep_gb: float | None = KEEP_IDLE_GB):
    """After a task, once its locals are gone: the cached blocks go back to the driver, so an
    idle worker holds no device memory that the parent's memory gate cannot see. (On the H200,
    compile workers kept 6-12 GiB each after their warm-up and 9 of 53 KernelBench rows ran out
    of memory.) What is still kept is reported (`memory_kept_gb`); a worker keeping more than
    `keep_gb` beyond what it exported asks to be replaced (None: never, only report)."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return result
    gc.collect()                # the task's reference cycles (modules, models) die here
    torch.cuda.ipc_collect()    # exported blocks the judge has let go of (CUDA IPC "limbo")
    torch.cuda.empty_cache()
    kept = torch.cuda.memory_reserved() - transport.held_bytes()
    if isinstance(result, dict):
        result.setdefault("memory_kept_gb", round(max(kept, 0) / 2**30, 2))
        if keep_gb is not None and kept > keep_gb * 2**30:
            result["_recycle"] = True
    return result


def env_info(device: str) -> dict:
    gpu = None
    if device == "cuda" and torch.cuda.is_available():
        gpu = torch.cuda.get_device_name()
    try:
        triton_version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        triton_version = None
    return {"gpu": gpu, "torch_version": torch.__version__, "triton_version": triton_version,
            "cuda_version": torch.version.cuda}


# -- helpers -----------------------------------------------------------------------------------
_loaded: list[str] = []


def load_module(code: str, role: str, tag: str):
    """Exec `code` as a real module from a file in the scratch directory (Triton's @jit and
    inspect need source files)."""
    name = f"curate_{role}_{tag}_{next(_counter)}"
    path = Path.cwd() / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    _loaded.append(name)
    spec.loader.exec_module(mod)
    return mod


def _forget_modules() -> None:
    while _loaded:
        sys.modules.pop(_loaded.pop(), None)


def _seed_all(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np
        np.random.seed(seed % 2**32)
    except Exception:
        pass


def _device_ctx(device: str):
    return torch.device(device) if device != "cpu" else contextlib.nullcontext()


def _to(x, device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    return x


def make_inputs(mod, seed: int, device: str) -> list:
    """The trial's inputs: `get_inputs()` under the seed, created directly on the device."""
    _seed_all(seed)
    with _device_ctx(device):
        inputs = list(mod.get_inputs())
    return [_to(x, device) for x in inputs]


def init_args(mod, seed: int, device: str) -> list:
    _seed_all(seed)
    with _device_ctx(device):
        args = list(mod.get_init_inputs()) if hasattr(mod, "get_init_inputs") else []
    return args


def build_model(cls, args: list, seed: int, device: str):
    """Both models in eval mode: inference semantics (batch norm uses running statistics, no
    dropout), the same mode `curate synth inductor` compiles in."""
    _seed_all(seed)
    with _device_ctx(device):
        model = cls(*args)
    model = model.to(device) if hasattr(model, "to") else model
    return model.eval() if hasattr(model, "eval") else model


def share_parameters(ref_model, new_model) -> str:
    """Give ModelNew the reference's parameters: by name when the state dicts match, by order
    when only shapes match; otherwise both keep their seeded initialization."""
    try:
        rs, ns = ref_model.state_dict(), new_model.state_dict()
    except Exception:
        return "seed"
    if not rs or not ns:
        return "seed"
    if rs.keys() == ns.keys() and all(rs[k].shape == ns[k].shape for k in rs):
        new_model.load_state_dict(rs)
        return "by_name"
    rl, nl = list(rs.values()), list(ns.values())
    if len(rl) == len(nl) and all(a.shape == b.shape and a.dtype == b.dtype for a, b in zip(rl, nl)):
        with torch.no_grad():
            for a, b in zip(rl, nl):
                b.copy_(a)
        return "by_order"
    return "seed"


def _sync(device: str) -> None:
    if device == "cuda":
        TIMERS.cuda_synchronize()


def _inputs_equal(a: list, b: list) -> bool:
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            if x.shape != y.shape or not torch.equal(x, y):
                if not (x.is_floating_point() and torch.equal(torch.nan_to_num(x),
                                                              torch.nan_to_num(y))):
                    return False
    return True


# -- error classification ---------------------------------------------------------------------
_CUDA_FATAL = re.compile(r"illegal memory access|misaligned address|unspecified launch failure|"
                         r"device-side assert|CUDA error|an illegal instruction|"
                         r"cudaErrorLaunch|AcceleratorError", re.IGNORECASE)
_BUILD = re.compile(r"Error building extension|CompilationError|ninja: build stopped|"
                    r"error: command .* failed|compilation terminated", re.IGNORECASE)


def classify_exception(exc: BaseException, phase: str) -> dict:
    """status, reasons and whether the worker must be replaced, for an exception in `phase`
    (`import`, `build`, `call`)."""
    name, msg = type(exc).__name__, str(exc)
    reasons: list[str] = []
    recycle = False
    if is_out_of_memory(exc):
        status, reasons = "runtime_error", ["out_of_memory"]
        recycle = True
    elif _CUDA_FATAL.search(msg) or name == "AcceleratorError":
        status, reasons, recycle = "runtime_error", ["cuda_error"], True
    elif isinstance(exc, SyntaxError) or _BUILD.search(f"{name}: {msg}") or phase == "import":
        status = "compile_error"
    else:
        status = "runtime_error"
    if isinstance(exc, RecursionError):
        recycle = True
    return {"status": status, "reasons": reasons, "_recycle": recycle,
            "error": trim_error(exc, status)}


def trim_error(exc: BaseException, status: str, limit: int = 2000) -> str:
    """The part of an error that matters: for build errors the compiler's diagnostics (each
    `error` line and the source lines under it, paths cut to file names, command lines
    dropped), else the exception and the candidate's innermost frame."""
    head = f"{type(exc).__name__}: "
    msg = str(exc)
    if isinstance(exc, SyntaxError):
        return f"SyntaxError: {exc.msg} (line {exc.lineno}): {(exc.text or '').strip()}"[:limit]
    if status == "compile_error" and ("\n" in msg or _BUILD.search(msg)):
        return trim_compiler_output(head, msg, limit)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "curate_" in f.filename]
    where = f" (at line {frames[-1].lineno}: {(frames[-1].line or '').strip()})" if frames else ""
    first = msg.strip().splitlines()[0] if msg.strip() else ""
    return (head + first)[:limit - len(where)] + where


_CMD_LINE = re.compile(r"^\s*(\[\d+/\d+\]|FAILED:|ninja:|c\+\+ |g\+\+ |gcc |clang|/\S*nvcc |nvcc )")
_PATH = re.compile(r"(?:/[^\s:/'\"]+)+/([^\s:/'\"]+\.(?:cpp|cu|cuh|h|hpp|cc|py|ptx))")


def trim_compiler_output(head: str, msg: str, limit: int = 2000) -> str:
    lines = msg.splitlines()
    title = re.split(r":\s*\[\d+/\d+\]", lines[0])[0] if lines else ""
    if len(title) > 200:
        title = title[:200] + "..."
    keep: list[str] = []
    i = 0
    while i < len(lines):
        ln = lines[i]
        if not _CMD_LINE.match(ln) and re.search(r"\berror\b", ln, re.IGNORECASE) and i > 0:
            keep.append(_PATH.sub(r"\1", ln.rstrip()))
            for nxt in lines[i + 1:i + 3]:  # the source line and its caret
                if nxt.strip() and not _CMD_LINE.match(nxt) and not re.search(
                        r"\berror\b", nxt, re.IGNORECASE):
                    keep.append(_PATH.sub(r"\1", nxt.rstrip()))
        i += 1
    body = "\n".join(dict.fromkeys(keep)) if keep else "\n".join(
        _PATH.sub(r"\1", ln) for ln in lines[-12:] if not _CMD_LINE.match(ln))
    return (head + title + "\n" + body)[:limit]


# -- tamper detection (worker recycling) ------------------------------------------------------
def _watched():
    import torch.nn.functional as F
    return {"torch": torch, "F": F, "Tensor": torch.Tensor, "Module": torch.nn.Module,
            "cuda": torch.cuda, "time": time}


def _snapshot() -> dict:
    snap = {}
    for name, mod in _watched().items():
        for k, v in list(vars(mod).items()):
            if callable(v):
                snap[(name, k)] = v
    return snap


def _harness_modules() -> dict:
    from . import calls, compare as compare_mod, timing
    return {"harness": sys.modules[__name__], "calls": calls, "compare": compare_mod,
            "timing": timing, "transport": transport}


def _snapshot_harness() -> dict:
    return {(n, k): v for n, mod in _harness_modules().items() for k, v in list(vars(mod).items())
            if callable(v) or k in ("TIMERS",)}


def harness_tampered() -> list[str]:
    """Functions of the harness itself (timing loop, comparison, transport) that were replaced
    in this process since it started: the candidate reached into its measurement."""
    mods = _harness_modules()
    changed = [f"{n}.{k}" for (n, k), v in _HARNESS.items() if vars(mods[n]).get(k) is not v]
    t = TIMERS
    if (t.perf_counter is not _TIMER_FUNCS[0] or t.cuda_synchronize is not _TIMER_FUNCS[1]
            or t.cuda_record is not _TIMER_FUNCS[2] or t.cuda_elapsed is not _TIMER_FUNCS[3]):
        changed.append("timers")
    return sorted(changed)


def tampered() -> list[str]:
    """Library functions that candidate code replaced in this process (then it gets a fresh one)."""
    if _baseline is None:
        return []
    mods = _watched()
    return sorted(f"{n}.{k}" for (n, k), v in _baseline.items() if vars(mods[n]).get(k) is not v)


def _finish(result: dict) -> dict:
    changed = tampered()
    if changed:
        result["_recycle"] = True
        result.setdefault("notes", {})["patched"] = changed[:20]
    return result



# -- sessions: one worker process serves one row --------------------------------------------------
class _Session:
    """What a candidate or judge worker keeps between the parent's requests for its one row."""

    def __init__(self, task: dict, role: str):
        self.role, self.device, self.tag = role, task["device"], task.get("tag", "x")
        self.gates = bool(task.get("gates", True))
        self.ctx = CheckContext(role=role, device=self.device, backend=task.get("backend"),
                                pytorch_code=task["pytorch_code"],
                                kernel_code=task.get("kernel_code"), timers=TIMERS)
        self.checks: list = []
        self.runner: CallRunner | None = None
        self.kept = None                 # the last batch's outputs (candidate)
        self.ref_out: dict = {}          # (set, scale) -> reference outputs (judge)
        self.ref_struct: dict = {}
        self.total = Comparison()        # every comparison of this row (judge)
        self.precision: dict = {}
        self.timed_started = False

    def flags(self) -> list[dict]:
        return [f.__dict__ for f in self.ctx.flags]


_S: _Session | None = None


def _flush_for(device: str):
    global _flush
    if device == "cuda" and _flush is None:
        _flush = L2Flush("cuda")
    return _flush if device == "cuda" else None


def _base_sets(mod, seeds: list[int], device: str, poke: int | None = None) -> list[list]:
    """One input set per trial seed, then (with `poke`) set 0 with one element poked."""
    sets = [make_inputs(mod, seed, device) for seed in seeds]
    if poke is not None and sets:
        sets.append(poked(sets[0], int(poke)))
    return sets


def _calls(task: dict) -> list[tuple[int, float]]:
    return [(int(k), float(scale)) for k, scale in task.get("calls") or []]


def _refused(exc: OutputRefused) -> dict:
    return {"status": "deceptive", "reasons": [exc.reason], "error": str(exc)[:500]}


def run_candidate(task: dict) -> dict:
    """The candidate's worker: `load` (reference module for inputs and parameters, then the
    candidate), `calls` (a batch of calls, the first `check` of them watched by the gates),
    `fetch` (one kept output of the last batch, for the judge) and `finish`."""
    op = task.get("op", "load")
    if op == "load":
        return _candidate_load(task)
    s = _S
    if s is None or s.role != "candidate":
        raise RuntimeError("candidate session not loaded")
    try:
        if op == "calls":
            return _candidate_calls(s, task)
        if op == "fetch":
            return _candidate_fetch(s, task)
    except OutputRefused as exc:
        s.ctx.flag(exc.reason, fatal=True)
        return _finish({**_refused(exc), "flags": s.flags()})
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _finish({**classify_exception(exc, "call"), "flags": s.flags(),
                        "notes": s.ctx.notes})
    if op == "finish":
        if s.timed_started:
            run_hook(s.checks, "after_timing", s.ctx, None)
        run_hook(s.checks, "finish", s.ctx)
        notes = s.ctx.notes
        if s.device == "cuda":
            notes["peak_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        notes["persisting_l2_reset"] = reset_persisting_l2() if s.device == "cuda" else None
        patched = tampered()
        if patched:  # torch, F, Tensor methods or timers replaced for the whole process
            s.ctx.flag("library_patched", fatal=True)
            notes["patched"] = patched[:20]
        harness = harness_tampered()
        if harness:
            s.ctx.flag("harness_tampered", fatal=True)
            notes["harness_tampered"] = harness[:20]
        return _finish({"status": "ok", "flags": s.flags(), "notes": notes})
    raise ValueError(f"unknown candidate op {op!r}")


def _candidate_load(task: dict) -> dict:
    global _S, _baseline
    s = _S = _Session(task, "candidate")
    device, ctx = s.device, s.ctx
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    s.checks = load_checks("worker") if s.gates else []
    result: dict = {"status": "ok", "env": env_info(device), "notes": ctx.notes}
    ref_mod = load_module(task["pytorch_code"], "ref", s.tag)
    ctx.ref_module = ref_mod
    run_hook(s.checks, "before_import", ctx)
    _baseline = _snapshot()   # what the gates install is not the candidate's tampering
    t_import = time.monotonic()
    try:
        cand_mod = load_module(task["kernel_code"], "cand", s.tag)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _finish({**result, **classify_exception(exc, "import"), "flags": s.flags()})
    ctx.notes["import_s"] = round(time.monotonic() - t_import, 3)
    ctx.cand_module = cand_mod
    if not hasattr(cand_mod, "ModelNew"):
        return _finish({**result, "status": "compile_error", "reasons": ["no_modelnew"],
                        "error": "the candidate defines no class ModelNew", "flags": s.flags()})
    try:
        args = init_args(ref_mod, task["seed_init"], device)
        ref_model = build_model(ref_mod.Model, args, task["seed_init"], device)
        new_model = build_model(cand_mod.ModelNew, init_args(ref_mod, task["seed_init"], device),
                                task["seed_init"], device)
        ctx.notes["parameters"] = share_parameters(ref_model, new_model)
        ctx.ref_model, ctx.new_model = ref_model, new_model
        run_hook(s.checks, "after_import", ctx)
        sets = _base_sets(ref_mod, task["seeds"], device, task.get("poke"))
        s.runner = CallRunner(new_model, sets, device,
                              TIMERS, _flush_for(device))
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return _finish({**result, **classify_exception(exc, "build"), "flags": s.flags()})
    return _finish({**result, "flags": s.flags()})


def _candidate_calls(s: _Session, task: dict) -> dict:
    calls, check = _calls(task), int(task.get("check") or 0)
    if task.get("timed") and not s.timed_started:
        s.timed_started = True
        run_hook(s.checks, "before_timing", s.ctx)

    def after(i, args, items, struct):
        if i >= check:
            return
        k, scale = calls[i]
        pristine = s.runner.pristine(k, scale)
        if not _inputs_equal(args, pristine):
            s.ctx.flag("input_mutated")
        run_hook(s.checks, "after_call", s.ctx, CandidateCall(
            trial=i, seed=k, inplace=i > 0, inputs=args, pristine=pristine, outputs=items,
            structure=struct))

    s.kept = None  # the previous batch's outputs go before this batch allocates
    batch = s.runner.run(calls, keep=bool(task.get("keep", True)), after=after)
    s.kept = batch.outputs
    first = batch.outputs[0] if batch.outputs else None
    return {"status": "ok", "ms": batch.ms, "flags": s.flags(),
            "structure": first[1] if first else None,
            "out_bytes": output_bytes(first[0]) if first else 0}


def _candidate_fetch(s: _Session, task: dict) -> dict:
    i = int(task["index"])
    if not s.kept or not 0 <= i < len(s.kept):
        raise RuntimeError(f"no kept output {i}")
    items, struct = s.kept[i]
    transport.release()
    if task.get("transport") == "cuda_ipc":
        desc = transport.send(items, Path.cwd(), i, "cuda_ipc")
    elif task.get("transport") in ("memfd", "cuda_fd"):
        from ..isolation import worker
        send = transport.send_memfd if task["transport"] == "memfd" else transport.send_cuda_fd
        desc, fds = send(items)
        worker.reply_fds(fds)
    else:
        desc = transport.send_inline(items)
    return {"status": "ok", "outputs": desc, "structure": struct}


def run_judge(task: dict) -> dict:
    """The judge: the reference alone (this process never imports candidate code). `load`,
    `reference` (the correctness calls' outputs, kept; the degeneracy gates), `compare` (one
    candidate output against the reference of the same call), `calls` (the reference timed,
    by the same loop as the candidate) and `finish`."""
    global _S
    op = task.get("op", "load")
    if op == "load":
        s = _S = _Session(task, "judge")
        s.checks = load_checks("parent") if s.gates else []
        try:
            mod = load_module(task["pytorch_code"], "ref", s.tag)
            model = build_model(mod.Model, init_args(mod, task["seed_init"], s.device),
                                task["seed_init"], s.device)
            s.ctx.ref_module, s.ctx.ref_model = mod, model
            sets = _base_sets(mod, task["seeds"], s.device, task.get("poke"))
            s.runner = CallRunner(model, sets, s.device,
                                  TIMERS, _flush_for(s.device))
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            info = classify_exception(exc, "call")
            return {"status": "reference_error", "reasons": ["reference_failed", *info["reasons"]],
                    "error": info["error"], "env": env_info(s.device)}
        return {"status": "ok", "env": env_info(s.device)}
    s = _S
    if s is None or s.role != "judge":
        raise RuntimeError("judge session not loaded")
    try:
        if op == "reference":
            return _judge_reference(s, task)
        if op == "compare":
            return _judge_compare(s, task)
        if op == "calls":
            batch = s.runner.run(_calls(task), keep=bool(task.get("keep")))
            return {"status": "ok", "ms": batch.ms}
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        info = classify_exception(exc, "call")
        return {"status": "reference_error", "reasons": ["reference_failed", *info["reasons"]],
                "error": info["error"], "env": env_info(s.device)}
    if op == "finish":
        if not s.total.ok and s.gates and s.ref_out:
            (k, scale), ref_items = next(iter(s.ref_out.items()))
            unstable = reference_instability(s.ctx.ref_module, s.ctx.ref_model,
                                             s.runner.pristine(k, scale), ref_items)
            if unstable:
                s.ctx.flag("reference_unstable", fatal=True, status="degenerate_reference")
                s.ctx.notes["reference_vs_float64"] = unstable
        t = s.total
        return {"status": "ok", "env": env_info(s.device), "flags": s.flags(),
                "notes": {**s.ctx.notes, **s.precision},
                "comparison": {"ok": t.ok, "reasons": t.reasons, "max_abs_err": t.max_abs_err,
                               "max_rel_err": t.max_rel_err, "detail": t.detail}}
    raise ValueError(f"unknown judge op {op!r}")


def _judge_reference(s: _Session, task: dict) -> dict:
    calls = _calls(task)
    batch = s.runner.run(calls, keep=True)
    for call, (items, struct) in zip(calls, batch.outputs):
        s.ref_out[call] = [x.detach() if isinstance(x, torch.Tensor) else x for x in items]
        s.ref_struct[call] = struct
    s.ctx.ref_outputs = list(s.ref_out.values())
    run_hook(s.checks, "after_reference", s.ctx)
    s.ctx.ref_outputs = None
    return {"status": "ok", "ms": batch.ms, "flags": s.flags()}


def _judge_compare(s: _Session, task: dict) -> dict:
    k, scale = _calls({"calls": [task["call"]]})[0]
    if (k, scale) in s.ref_out:
        ref_items, ref_struct = s.ref_out[(k, scale)], s.ref_struct[(k, scale)]
    else:
        (ref_items, ref_struct), = s.runner.run([(k, scale)], keep=True).outputs
    try:
        from ..isolation import worker
        items = transport.receive(task.get("outputs"), s.device, worker.task_fds())
    except Exception as exc:  # noqa: BLE001 - a hostile or broken description
        s.total.fail("outputs_unreadable", f"call {k}/{scale}: {type(exc).__name__}: {exc}"[:300])
        return {"status": "ok", "ok": False}
    cmp = compare(ref_items, items, ref_struct, task.get("structure"))
    s.total.merge(cmp)
    if cmp.ok and task.get("precision") and s.gates and not s.precision:
        s.precision = precision_profile(s.ctx.ref_module, s.ctx.ref_model,
                                        s.runner.pristine(k, scale), ref_items, items)
        if s.precision.get("reduced_precision"):
            s.ctx.flag("reduced_precision", fatal=True)
        elif s.precision.get("below_float32"):
            # on the GPU a float32 reference and an honest candidate may differ in TF32 use
            # (3 honest KernelBench candidates on the H200): a warning there, a failure on the CPU
            s.ctx.flag("precision_below_reference", fatal=s.device == "cpu")
    del items
    return {"status": "ok", "ok": cmp.ok}


def _relnorm(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    den = float(torch.linalg.vector_norm(b))
    return float(torch.linalg.vector_norm(a - b)) / max(den, 1e-30)


def _half_representable(x: torch.Tensor) -> float:
    """Share of the nonzero finite values that survive a round trip through float16 or bfloat16
    unchanged: about 1/8000 for float32 arithmetic, all of them for half-precision results."""
    v = x[torch.isfinite(x) & (x != 0)].float()
    if v.numel() < 64:
        return 0.0
    v = v[:1 << 20]
    fp16 = (v.half().float() == v).double().mean()
    bf16 = (v.bfloat16().float() == v).double().mean()
    return float(max(fp16, bf16))


def precision_profile(mod, model, inputs: list, ref_out: list, cand_out: list) -> dict:
    """Does the candidate compute in lower precision than its float32 reference? Two readings:
    its error against the same program run in float64 (flagged when above 5e-5 relative norm
    and 20 times the float32 reference's own error: half precision leaves ~3e-4, honest float32
    arithmetic in another order ~1e-6), and whether its values are exactly half-precision
    numbers. A float32 tolerance alone cannot tell."""
    pairs = [(r, c) for r, c in zip(ref_out, cand_out) if isinstance(r, torch.Tensor)
             and isinstance(c, torch.Tensor) and r.dtype == torch.float32 and r.numel()
             and r.shape == c.shape]
    if not pairs:
        return {}
    out: dict = {}
    half = max(_half_representable(c) for _, c in pairs)
    ref_half = max(_half_representable(r) for r, _ in pairs)
    out["half_representable"] = round(half, 4)
    if half > 0.9 and ref_half < 0.5:
        out["reduced_precision"] = "outputs are half-precision numbers"
    try:
        import copy
        model64 = copy.deepcopy(model).double()
        x64 = [x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x
               for x in inputs]
        with torch.no_grad():
            o64, _ = flatten_outputs(model64(*x64))
        del model64, x64
        err_ref = max(_relnorm(r, o) for (r, _), o in zip(pairs, o64))
        err_cand = max(_relnorm(c, o) for (_, c), o in zip(pairs, o64))
        out["err_vs_float64"] = {"reference": err_ref, "candidate": err_cand}
        if err_cand > 5e-5 and err_cand > 20 * max(err_ref, 1e-8):
            out["below_float32"] = (f"error against float64 {err_cand:.1e}, the float32 "
                                    f"reference's {err_ref:.1e}")
    except Exception as exc:  # noqa: BLE001 - float64-less ops, explicit dtypes, memory
        out["float64_skipped"] = f"{type(exc).__name__}: {exc}"[:200]
    return out


def reference_instability(mod, model, inputs: list, ref_out: list) -> str | None:
    """How the float32 reference differs from the same program run in float64 on the same
    inputs, when it does beyond the float32 tolerance; None when it agrees (or cannot run in
    float64: explicit dtypes, float64-less ops)."""
    if not any(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in ref_out):
        return None
    try:
        import copy
        model64 = copy.deepcopy(model).double()
        inputs = [x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x
                  for x in inputs]
        with torch.no_grad():
            out64, _ = flatten_outputs(model64(*inputs))
        del model64, inputs
        cast = [o.to(r.dtype) if isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor)
                else o for o, r in zip(out64, ref_out)]
        if len(cast) != len(ref_out):
            return None
        c = compare(ref_out, cast)
        return None if c.ok else (c.detail or ", ".join(c.reasons))[:300]
    except Exception:  # noqa: BLE001
        return None
    finally:
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()


def probe_send(task: dict) -> dict:
    """Does CUDA IPC (or, with `transport: cuda_fd`, device memory as a descriptor) work
    between two workers here? The sending half."""
    x = torch.arange(4096, dtype=torch.float32, device=task["device"]) * 1.5
    _, total = torch.cuda.mem_get_info()
    if task.get("transport") == "cuda_fd":
        from ..isolation import worker
        desc, fds = transport.send_cuda_fd([x, None])
        worker.reply_fds(fds)
    else:
        desc = transport.send([x, None], Path.cwd(), 0, "cuda_ipc")
    return {"status": "ok", "total_gb": total / 2**30, "export": desc}


PROBE_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
"""


def probe_cuda(task: dict) -> dict:
    """CUDA and a Triton kernel launch in this (confined) worker: the sandbox check."""
    x = torch.zeros(1000, device=task["device"])
    mod = load_module(PROBE_KERNEL, "probe", "cuda")
    mod.add_one[(4,)](x, x.numel(), BLOCK=256)
    _sync(task["device"])
    return {"status": "ok" if float(x.sum()) == 1000.0 else "wrong"}


def probe_receive(task: dict) -> dict:
    from ..isolation import worker
    items = transport.receive(task["export"], task["device"], worker.task_fds())
    want = torch.arange(4096, dtype=torch.float32, device=task["device"]) * 1.5
    ok = len(items) == 2 and items[1] is None and torch.equal(items[0], want)
    del items
    return {"status": "ok" if ok else "mismatch"}


def run_compile(task: dict) -> dict:
    """Import the candidate (building its extensions into the shared, content-addressed cache);
    with `warm`, also run one forward so that Triton kernels, which compile at their first
    launch, land in the Triton cache. Only build failures decide the row here; any other
    failure is left for the candidate worker to reproduce and report."""
    t0 = time.monotonic()
    tag = task.get("tag", "x")
    try:
        cand = load_module(task["kernel_code"], "cand", tag)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        info = classify_exception(exc, "import")
        info["_recycle"] = True
        return info
    result = {"status": "compiled", "seconds": 0.0,
              "import_s": round(time.monotonic() - t0, 3)}
    if task.get("size"):
        result["size_gb"] = meta_sizes(task["pytorch_code"], tag)
    if task.get("warm") and hasattr(cand, "ModelNew"):
        device = task["device"]
        try:
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            ref = load_module(task["pytorch_code"], "ref", tag)
            model = build_model(cand.ModelNew, init_args(ref, task["seed_init"], device),
                                task["seed_init"], device)
            inputs = make_inputs(ref, task["seeds"][0], device)
            t_warm = time.monotonic()
            with torch.no_grad():
                model(*inputs)
                _sync(device)
            result["warm_s"] = round(time.monotonic() - t_warm, 3)
            result["warmed"] = True
            if device == "cuda":  # model, inputs and one forward: the parent sizes the row by it
                result["peak_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            info = classify_exception(exc, "call")
            if info["status"] == "compile_error":
                return info
            result["warm_error"] = info["error"][:300]
            result["_recycle"] = info["_recycle"]
    result["seconds"] = time.monotonic() - t0
    return _finish(result)


def meta_sizes(pytorch_code: str, tag: str) -> dict | None:
    """GiB of the reference's inputs, outputs and parameters, from shapes alone (meta tensors,
    nothing allocated): the parent reserves device memory for the warm-up by them. None when the
    program does not run on the meta device."""
    def gib(items) -> float:
        return sum(t.numel() * t.element_size() for t in items
                   if isinstance(t, torch.Tensor)) / 2**30
    try:
        ref = load_module(pytorch_code, "ref", tag)
        with torch.device("meta"), torch.no_grad():
            inputs = list(ref.get_inputs())
            args = list(ref.get_init_inputs()) if hasattr(ref, "get_init_inputs") else []
            model = ref.Model(*args)
            out, _ = flatten_outputs(model(*inputs))
        params = list(model.parameters()) + list(model.buffers())
        return {"inputs": round(gib(inputs), 4), "outputs": round(gib(out), 4),
                "params": round(gib(params), 4)}
    except Exception:  # noqa: BLE001 - data-dependent shapes, .cuda() calls, numpy...
        return None


