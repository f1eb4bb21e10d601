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
from .lock import DeviceLock  # noqa: E402
from . import transport  # noqa: E402
from .timing import L2Flush, time_cpu, time_cuda  # noqa: E402

_counter = itertools.count()
_baseline: dict | None = None
_rebased = False
_flush: L2Flush | None = None
_checks: list | None = None


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
    _baseline = _snapshot()


def handle(task: dict) -> dict:
    role = task["role"]
    os.environ["TORCH_EXTENSIONS_DIR"] = task.get("extensions_dir") or os.environ.get(
        "TORCH_EXTENSIONS_DIR", os.path.join(os.getcwd(), "torch_extensions"))
    try:
        result = _dispatch(role, task)
    finally:
        _forget_modules()
    return release_device_memory(result, task.get("keep_idle_gb", KEEP_IDLE_GB))


def _dispatch(role: str, task: dict) -> dict:
    if role == "judge":
        return run_judge(task)
    if role == "compile":
        return run_compile(task)
    if role == "candidate":
        transport.release()  # a row that never released (its parent died) frees here
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


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v) for v in x)
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


# -- roles -------------------------------------------------------------------------------------
def run_judge(task: dict) -> dict:
    """Compute the reference's outputs for every trial and compare them, on the device, with
    the candidate's saved outputs. This worker never imports candidate code (it only loads the
    candidate's tensors, with `weights_only`), and the reference outputs never leave it."""
    device = task["device"]
    tag = task.get("tag", "x")
    checks = load_checks("parent") if task.get("gates", True) else []
    ctx = CheckContext(role="judge", device=device, backend=task.get("backend"),
                       pytorch_code=task["pytorch_code"], kernel_code=task.get("kernel_code"))
    ref_outputs, structures = [], []
    lock = DeviceLock(task.get("lock_dir"))  # the judge's device work must not disturb timing
    try:
        mod = load_module(task["pytorch_code"], "ref", tag)
        with lock.shared():
            model = build_model(mod.Model, init_args(mod, task["seed_init"], device),
                                task["seed_init"], device)
        for seed in task["seeds"]:
            with lock.shared():
                inputs = make_inputs(mod, seed, device)
                with torch.no_grad():
                    out = model(*inputs)
                _sync(device)
            items, struct = flatten_outputs(out)
            ref_outputs.append([x.detach() if isinstance(x, torch.Tensor) else x for x in items])
            structures.append(struct)
            del inputs, out
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        info = classify_exception(exc, "call")
        return {"status": "reference_error", "reasons": ["reference_failed", *info["reasons"]],
                "error": info["error"], "_recycle": info["_recycle"], "env": env_info(device)}
    ctx.ref_outputs = ref_outputs
    with lock.shared():
        run_hook(checks, "after_reference", ctx)
    total = Comparison()
    cand_dir = Path(task["cand_dir"])
    cand_structs = task.get("cand_structures") or []
    exports = task.get("cand_exports") or []
    for t in range(len(task["seeds"])):
        try:
            with lock.shared():
                items = _receive(exports[t] if t < len(exports) else None, cand_dir, t, device)
        except Exception as exc:  # noqa: BLE001 - a hostile or broken file
            total.fail("outputs_unreadable", f"trial {t}: {type(exc).__name__}: {exc}"[:300])
            break
        if not isinstance(items, list):
            total.fail("outputs_unreadable", f"trial {t}: not a list of outputs")
            break
        with lock.shared():
            total.merge(compare(ref_outputs[t], items, structures[t],
                                cand_structs[t] if t < len(cand_structs) else None))
        del items
    if not total.ok and task.get("gates", True):
        # before calling the candidate wrong: is the float32 reference itself within tolerance
        # of the same program in float64? If not, its output is rounding noise and no test
        with lock.shared():
            unstable = reference_instability(mod, model, task["seeds"][0], device,
                                             ref_outputs[0])
        if unstable:
            ctx.flag("reference_unstable", fatal=True, status="degenerate_reference")
            ctx.notes["reference_vs_float64"] = unstable
    del ref_outputs, model
    ctx.ref_outputs = None
    if device == "cuda":
        torch.cuda.empty_cache()
    return _finish({"status": "ok", "env": env_info(device), "structures": structures,
                    "comparison": {"ok": total.ok, "reasons": total.reasons,
                                   "max_abs_err": total.max_abs_err,
                                   "max_rel_err": total.max_rel_err, "detail": total.detail},
                    "flags": [f.__dict__ for f in ctx.flags], "notes": ctx.notes})


def reference_instability(mod, model, seed: int, device: str, ref_out: list) -> str | None:
    """How the float32 reference differs from the same program run in float64 on the same
    inputs, when it does beyond the float32 tolerance; None when it agrees (or cannot run in
    float64: explicit dtypes, float64-less ops)."""
    if not any(isinstance(x, torch.Tensor) and x.dtype == torch.float32 for x in ref_out):
        return None
    try:
        import copy
        model64 = copy.deepcopy(model).double()
        inputs = [x.double() if isinstance(x, torch.Tensor) and x.dtype == torch.float32 else x
                  for x in make_inputs(mod, seed, device)]
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
        if device == "cuda":
            torch.cuda.empty_cache()


def _receive(desc, cand_dir: Path, trial: int, device: str):
    """Trial `trial`'s outputs from the candidate: through CUDA IPC, or from a file in the row's
    job directory. Paths come from this row's directory, never from the candidate's word."""
    if isinstance(desc, dict) and desc.get("transport") == "cuda_ipc":
        for spec in desc.get("items") or []:
            if isinstance(spec, dict) and spec.get("kind") == "file":
                spec["path"] = str(cand_dir / Path(str(spec.get("path"))).name)
        return transport.receive(desc, device)
    return transport.receive({"transport": "files", "path": str(cand_dir / f"cand_{trial}.pt")},
                             device)


def probe_send(task: dict) -> dict:
    """Does CUDA IPC work between two workers here? The sending half."""
    x = torch.arange(4096, dtype=torch.float32, device=task["device"]) * 1.5
    _, total = torch.cuda.mem_get_info()
    return {"status": "ok", "total_gb": total / 2**30,
            "export": transport.send([x, None], Path.cwd(), 0, "cuda_ipc")}


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
    items = transport.receive(task["export"], task["device"])
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
        lock = DeviceLock(task.get("lock_dir"))
        try:
            if device == "cuda":
                torch.cuda.reset_peak_memory_stats()
            ref = load_module(task["pytorch_code"], "ref", tag)
            model = build_model(cand.ModelNew, init_args(ref, task["seed_init"], device),
                                task["seed_init"], device)
            inputs = make_inputs(ref, task["seeds"][0], device)
            t_warm = time.monotonic()
            with lock.shared(), torch.no_grad():
                model(*inputs)
                _sync(device)
            result["warm_s"] = round(time.monotonic() - t_warm - lock.waited_s, 3)
            result["lock_wait_s"] = round(lock.waited_s, 3)
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


def run_candidate(task: dict) -> dict:
    global _flush, _checks
    device, backend = task["device"], task.get("backend")
    if _checks is None:
        _checks = load_checks("worker")
    checks = _checks if task.get("gates", True) else []
    lock = DeviceLock(task.get("lock_dir"))
    ctx = CheckContext(role="candidate", device=device, backend=backend,
                       pytorch_code=task["pytorch_code"], kernel_code=task["kernel_code"],
                       timers=TIMERS)
    result: dict = {"status": "ok", "reasons": [], "env": env_info(device), "exports": [],
                    "structures": [], "timing": None, "notes": ctx.notes}

    def done(res: dict) -> dict:
        res["flags"] = [f.__dict__ for f in ctx.flags]
        return _finish(res)

    tag = task.get("tag", "x")
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    ref_mod = load_module(task["pytorch_code"], "ref", tag)
    ctx.ref_module = ref_mod
    run_hook(checks, "before_import", ctx)
    global _baseline, _rebased
    if checks and not _rebased:  # what the gates install is not the candidate's tampering
        _baseline, _rebased = _snapshot(), True
    t_import = time.monotonic()
    try:
        cand_mod = load_module(task["kernel_code"], "cand", tag)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return done({**result, **classify_exception(exc, "import")})
    result["notes"]["import_s"] = round(time.monotonic() - t_import, 3)
    ctx.cand_module = cand_mod
    if not hasattr(cand_mod, "ModelNew"):
        return done({**result, "status": "compile_error", "reasons": ["no_modelnew"],
                     "error": "the candidate defines no class ModelNew"})
    try:
        args = init_args(ref_mod, task["seed_init"], device)
        ref_model = build_model(ref_mod.Model, args, task["seed_init"], device)
        new_model = build_model(cand_mod.ModelNew, init_args(ref_mod, task["seed_init"], device),
                                task["seed_init"], device)
        result["notes"]["parameters"] = share_parameters(ref_model, new_model)
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return done({**result, **classify_exception(exc, "build")})
    ctx.ref_model, ctx.new_model = ref_model, new_model
    run_hook(checks, "after_import", ctx)

    # -- correctness trials: outputs saved for the parent, which alone holds the reference's
    out_dir = Path(task["out_dir"])
    out_dir.mkdir(parents=True, exist_ok=True)
    seeds = task["seeds"]
    prev_inputs = None
    plausible = True
    try:
        # the shared lock per trial, not for the whole loop: a pair waiting to be timed
        # waits for the longest trial, not for every row's whole correctness phase
        for t, seed in enumerate(seeds):
            with lock.shared():
                fresh = make_inputs(ref_mod, seed, device)
                inplace = bool(task.get("inplace_last", True) and t == len(seeds) - 1 and t > 0
                               and prev_inputs is not None and _same_layout(prev_inputs, fresh))
                if inplace:
                    for buf, new in zip(prev_inputs, fresh):
                        if isinstance(buf, torch.Tensor):
                            buf.copy_(new)
                    cand_inputs = prev_inputs
                else:
                    cand_inputs = _clone(fresh)
                with torch.no_grad():
                    out = new_model(*cand_inputs)
                _sync(device)
                items, struct = flatten_outputs(out)
                # the outputs as they are now (before the gates call the model again) leave
                # for the judge: as files, or as the harness's own device copy (CUDA IPC)
                sent = transport.send(items, out_dir, t, task.get("transport", "files"))
                if not _inputs_equal(cand_inputs, fresh):
                    ctx.flag("input_mutated")
                run_hook(checks, "after_call", ctx, CandidateCall(
                    trial=t, seed=seed, inplace=inplace, inputs=cand_inputs, pristine=fresh,
                    outputs=items, structure=struct))
                result["exports"].append(sent)
                result["structures"].append(struct)
                if t == 0 and task.get("time"):
                    # a quick look, in this process, at whether timing is worth the device's
                    # time; the verdict is the judge's
                    try:
                        with torch.no_grad():
                            local_ref, _ = flatten_outputs(ref_model(*_clone(fresh)))
                        plausible = compare(local_ref, items).ok
                        del local_ref
                    except Exception as exc:  # noqa: BLE001
                        plausible = False
                        result["notes"]["local_reference_error"] = f"{type(exc).__name__}: {exc}"[:300]
                # only the in-place trial needs the previous buffers: free them otherwise
                prev_inputs = cand_inputs if t + 2 == len(seeds) else None
                del out, items, fresh, cand_inputs
    except BaseException as exc:  # noqa: BLE001
        if isinstance(exc, KeyboardInterrupt):
            raise
        return done({**result, **classify_exception(exc, "call")})

    # -- timing: only where the device measures this backend, and only a plausible candidate
    fresh = cand_inputs = prev_inputs = None  # noqa: F841 - free the trials' tensors first
    if task.get("time") and not any(f.fatal for f in ctx.flags):
        if not plausible:
            result["notes"]["timing_skipped"] = "candidate output differs from the reference"
        else:
            try:
                result["timing"] = _time_pair(task, ctx, ref_model, new_model, ref_mod, lock)
            except BaseException as exc:  # noqa: BLE001
                if isinstance(exc, KeyboardInterrupt):
                    raise
                return done({**result, **classify_exception(exc, "call")})
    run_hook(checks, "finish", ctx)
    del ref_model, new_model
    result["notes"]["lock_wait_s"] = round(lock.waited_s, 3)
    if device == "cuda":
        result["notes"]["peak_gb"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        torch.cuda.empty_cache()
    return done(result)


def _same_layout(a: list, b: list) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor) and (x.shape != y.shape or x.dtype != y.dtype):
            return False
    return True


def _time_pair(task: dict, ctx: CheckContext, ref_model, new_model, ref_mod, lock) -> dict:
    global _flush
    device = task["device"]
    ref_in = make_inputs(ref_mod, task["seeds"][-1], device)
    cand_in = _clone(ref_in)
    checks = (_checks or []) if task.get("gates", True) else []
    run_hook(checks, "before_timing", ctx)
    with lock.exclusive(), torch.no_grad():
        if device == "cuda":
            if _flush is None:
                _flush = L2Flush("cuda")
            timing = time_cuda(lambda: ref_model(*ref_in), lambda: new_model(*cand_in), TIMERS,
                               _flush, budget_s=task.get("time_budget", 0.5),
                               min_trials=task.get("min_trials", 20),
                               max_trials=task.get("max_trials", 1000))
        else:
            timing = time_cpu(lambda: ref_model(*ref_in), lambda: new_model(*cand_in), TIMERS,
                              budget_s=task.get("time_budget", 1.0),
                              min_trials=task.get("min_trials", 20),
                              max_trials=task.get("max_trials", 1000))
    run_hook(checks, "after_timing", ctx, timing)
    return {"ref_ms": timing.ref_ms, "cand_ms": timing.cand_ms, "wall_s": timing.wall_s,
            "clock": timing.clock}
