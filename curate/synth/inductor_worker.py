"""Runs inside a sandboxed worker: compile one reference program with inductor and record what
the standalone rewrite needs.

What is recorded comes from the compiled run itself, never from guesses:
- the output code (`GraphLowering.save_output_code`, the hook `run_and_get_code` uses);
- the arguments of the compiled graph's `call(args)`, in the graph's own order, each identified
  by the tensor object that filled the slot at run time (a parameter or buffer by name, or the
  k-th forward input), and which `call` result each of the model's outputs is;
- every Triton launch: kernel name, the config that won autotuning (XBLOCK/R0_BLOCK...,
  num_warps, num_stages) and the grid inductor computed for it;
- on the CPU: the vector ISA macros and flags inductor compiled its C++ kernels with.

Imports only torch, the standard library and curate's program loader, so that it also runs on a GPU machine that has
none of curate's other dependencies.
"""

from __future__ import annotations

import math
import os
import time
import traceback
from pathlib import Path
from typing import Any

from ..isolation.program import load_program, to_device


def setup() -> None:
    """Import torch and inductor once per worker, with inductor/Triton caches in a fresh dir:
    CURATE_SYNTH_CACHE (made new for each run by the step and shared by its workers, so that
    inductor's probes of the CPU's vector ISA run once per run) or the worker's own scratch."""
    cache = Path(os.environ.get("CURATE_SYNTH_CACHE") or os.getcwd())
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor-cache")
    os.environ["TRITON_CACHE_DIR"] = str(cache / "triton-cache")
    os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"  # a cache hit would skip save_output_code
    os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    import torch  # noqa: F401
    import torch._dynamo  # noqa: F401
    import torch._inductor.compile_fx  # noqa: F401
    if os.environ.get("CURATE_SYNTH_DEVICE") == "cpu":
        # Inductor probes the CPU's vector ISAs by compiling ten small programs (a minute on a
        # small machine). The answer is a fact about this machine and torch, not an output, so
        # the probes may live in a lasting dir (CURATE_ISA_CACHE); the output caches stay fresh.
        probe_dir = os.environ.get("CURATE_ISA_CACHE")
        try:
            if probe_dir:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = probe_dir
            from torch._inductor.cpu_vec_isa import pick_vec_isa
            pick_vec_isa()  # cached in-process from here on
        except Exception:  # noqa: BLE001
            pass
        finally:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor-cache")


# -- loading the reference -------------------------------------------------------------------

def load_reference(code: str):
    """Import the reference program from a file in the scratch dir (inspect and dynamo want one);
    the pid in its name keeps workers that share a directory apart."""
    return load_program(code, f"curate_ref_{os.getpid()}")


def _flat_tensors(out) -> tuple[Any, list]:
    """The structure of a forward's output (`tensor`, `tuple:N`, `list:N`) and its tensors."""
    import torch
    if isinstance(out, torch.Tensor):
        return "tensor", [out]
    if isinstance(out, (tuple, list)) and all(isinstance(o, torch.Tensor) for o in out):
        return f"{type(out).__name__}:{len(out)}", list(out)
    return None, []


# -- hooks -----------------------------------------------------------------------------------

class Recorder:
    """Patches inductor for the duration of one compile-and-run; `records` is what it saw."""

    def __init__(self, skip_cpp_build: bool = False):
        self.skip_cpp_build = skip_cpp_build
        self.codes: list[str] = []
        self.calls: list[dict] = []  # per CompiledFxGraph call: the input and output tensors
        self.launches: list[dict] = []
        self.errors: list[str] = []
        self._undo: list = []

    def _patch(self, owner, attr, new):
        old = getattr(owner, attr)
        setattr(owner, attr, new)
        self._undo.append((owner, attr, old))
        return old

    def __enter__(self):
        from torch._inductor.graph import GraphLowering
        rec = self

        def save_output_code(code: str) -> None:
            rec.codes.append(code)
        self._patch(GraphLowering, "save_output_code", staticmethod(save_output_code))

        try:
            from torch._inductor.output_code import CompiledFxGraph
            orig_call = CompiledFxGraph.__call__

            def call(graph_self, inputs):
                entry = {"inputs": list(inputs)}
                rec.calls.append(entry)
                out = orig_call(graph_self, inputs)
                entry["outputs"] = list(out) if isinstance(out, (list, tuple)) else [out]
                return out
            self._patch(CompiledFxGraph, "__call__", call)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"call hook: {exc!r}")

        try:
            from torch._inductor.runtime.triton_heuristics import CachingAutotuner
            orig_run = CachingAutotuner.run

            def run(tuner, *args, **kwargs):
                result = orig_run(tuner, *args, **kwargs)
                try:
                    rec.launches.append(_launch_record(tuner, args))
                except Exception as exc:  # noqa: BLE001
                    rec.errors.append(f"launch record {tuner.fn.__name__}: {exc!r}")
                return result
            self._patch(CachingAutotuner, "run", run)
        except Exception as exc:  # noqa: BLE001
            self.errors.append(f"launch hook: {exc!r}")

        if self.skip_cpp_build:
            # The candidate builds the C++ source itself; inductor's own build (tens of seconds
            # per kernel here) only matters for values, and the wiring is read from identities.
            from torch._inductor.async_compile import AsyncCompile

            def cpp_pybinding(_self, argtypes, source_code, *a, **k):
                def not_built(*args):
                    return None
                return not_built
            self._patch(AsyncCompile, "cpp_pybinding", cpp_pybinding)
        return self

    def __exit__(self, *exc):
        for owner, attr, old in reversed(self._undo):
            setattr(owner, attr, old)
        self._undo.clear()


def _plain(v):
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    return repr(v)


def _launch_record(tuner, args) -> dict:
    """What actually launched: the winning config and inductor's own grid for these args."""
    import torch
    launcher = tuner.launchers[0] if getattr(tuner, "launchers", None) else None
    cfg = launcher.config if launcher is not None else tuner.configs[0]
    grid = None
    try:
        _, grid = tuner._interpret_args_grid(args, cfg)
    except Exception:  # noqa: BLE001 - older/newer inductor: evaluate the grid expression
        from torch._inductor.runtime.triton_heuristics import GridExpr
        names = list(tuner.triton_meta.get("signature", {}).keys())
        names = [n for n in names if n not in cfg.kwargs]
        grid = GridExpr.from_meta(tuner.inductor_meta, cfg).eval_slow(dict(zip(names, args)))
    rec = {
        "kernel": tuner.fn.__name__,
        "kwargs": {k: _plain(v) for k, v in cfg.kwargs.items()},
        "num_warps": cfg.num_warps,
        "num_stages": cfg.num_stages,
        "grid": [int(g) for g in grid],
        "scalar_args": {i: _plain(a) for i, a in enumerate(args)
                        if not isinstance(a, torch.Tensor)},
        "n_args": len(args),
        "signature": list(tuner.triton_meta.get("signature", {}).keys()),
    }
    for extra in ("maxnreg", "num_ctas"):
        v = getattr(cfg, extra, None)
        if v not in (None, 1) and not (extra == "maxnreg" and v is None):
            rec[extra] = _plain(v)
    return rec


# -- wiring ----------------------------------------------------------------------------------

def _same_tensor(a, b) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and tuple(a.shape) == tuple(b.shape)
            and tuple(a.stride()) == tuple(b.stride()) and a.device == b.device)


def wire_inputs(call_inputs: list, model, fwd_inputs: list) -> tuple[list[dict], list[str]]:
    """Name what filled each slot of `call(args)`: the object identity of the run, never shapes."""
    import torch
    named = [("param", n, t) for n, t in model.named_parameters(remove_duplicate=False)]
    named += [("buffer", n, t) for n, t in model.named_buffers(remove_duplicate=False)]
    slots, problems = [], []
    for pos, arg in enumerate(call_inputs):
        if not isinstance(arg, torch.Tensor):
            slots.append({"kind": "const", "value": _plain(arg)})
            continue
        hit = None
        for k, x in enumerate(fwd_inputs):
            if isinstance(x, torch.Tensor) and (x is arg or _same_tensor(x, arg)):
                hit = {"kind": "input", "index": k}
                break
        if hit is None:
            for kind, name, t in named:
                if t is arg or _same_tensor(t, arg):
                    hit = {"kind": kind, "name": name}
                    break
        if hit is None and arg.dim() == 0:
            # a Python scalar input that dynamo lifted into a 0-d tensor
            for k, x in enumerate(fwd_inputs):
                if isinstance(x, (int, float)) and not isinstance(x, bool) and float(arg) == x:
                    hit = {"kind": "scalar_input", "index": k, "dtype": str(arg.dtype)}
                    break
        if hit is None:
            problems.append(f"slot {pos}: {tuple(arg.shape)} {arg.dtype} matches no parameter, "
                            "buffer or input")
            hit = {"kind": "unknown"}
        hit["shape"], hit["dtype"] = list(arg.shape), str(arg.dtype)
        slots.append(hit)
    return slots, problems


def wire_outputs(call_outputs: list, outs: list, call_inputs: list) -> list[dict] | None:
    """Which `call` result (or input) each model output is."""
    import torch
    res = []
    for o in outs:
        hit = None
        for i, c in enumerate(call_outputs):
            if isinstance(c, torch.Tensor) and (c is o or _same_tensor(c, o)):
                hit = {"kind": "call_output", "index": i}
                break
        if hit is None:
            for i, c in enumerate(call_inputs):
                if isinstance(c, torch.Tensor) and (c is o or _same_tensor(c, o)):
                    hit = {"kind": "call_input", "index": i}
                    break
        if hit is None:
            return None
        res.append(hit)
    return res


# -- the task --------------------------------------------------------------------------------

def _classify(exc: BaseException) -> str:
    """Machine-readable reason for a failed compile."""
    text = f"{type(exc).__name__}: {exc}"
    try:
        import torch._dynamo.exc as dexc
        if isinstance(exc, (dexc.Unsupported, dexc.UserError)) or "graph break" in text.lower() \
                or "data-dependent" in text.lower():
            return "synth:graph_break"
    except Exception:  # noqa: BLE001
        pass
    low = text.lower()
    if "out of memory" in low or "alloc_failed" in low:
        return "synth:oom"
    if "unsupported" in low or "not implemented" in low or "notimplemented" in low:
        return "synth:unsupported_op"
    return "synth:compile_error"


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:1500]}"


def versions(device: str) -> dict:
    import torch
    v = {"torch": torch.__version__.split("+")[0], "torch_full": torch.__version__}
    try:
        import triton
        v["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        v["triton"] = None
    v["cuda"] = torch.version.cuda
    if device == "cuda" and torch.cuda.is_available():
        v["gpu"] = torch.cuda.get_device_name(0)
    return v


def cpu_build_flags() -> dict:
    """How inductor builds its C++ kernels here: the defines (the vector ISA among them:
    Vectorized<T>::size() depends on it), compiler flags and libraries of its own command line,
    without the machine's include/library paths (the candidate finds those itself)."""
    try:
        from torch._inductor.cpp_builder import CppBuilder, CppTorchOptions
        from torch._inductor.cpu_vec_isa import pick_vec_isa
        isa = pick_vec_isa()
        opts = CppTorchOptions(vec_isa=isa, include_pytorch=False, shared=True)
        cmd = CppBuilder("kernel", ["kernel.cpp"], opts, output_dir=os.getcwd()).get_command_line()
        toks = cmd.split()
        defines, flags, libs = [], [], []
        i = 1
        while i < len(toks):
            t = toks[i]
            if t == "-D" and i + 1 < len(toks):
                defines.append(toks[i + 1])
                i += 2
                continue
            if t == "-o":
                i += 2
                continue
            if t.startswith("-D"):
                defines.append(t[2:])
            elif t.startswith("-l"):
                libs.append(t[2:])
            elif t.startswith(("-I", "-L")) or t.endswith(".cpp"):
                pass
            else:
                flags.append(t)
            i += 1
        defines = [d for d in defines if d and d != "TORCH_INDUCTOR_PRECOMPILE_HEADERS"]
        libs = [lib for lib in libs if lib != "torch_python"]
        return {"isa": str(isa), "compiler": toks[0], "defines": defines, "flags": flags,
                "libs": libs}
    except Exception as exc:  # noqa: BLE001
        return {"error": repr(exc)}


def handle(task: dict) -> dict:
    """Compile one reference (see _handle); frees the GPU memory it took, whatever happened."""
    try:
        return _handle(task)
    finally:
        release_memory()


def release_memory() -> None:
    """Give back what a task left: Python garbage and the CUDA caching allocator's free blocks."""
    import gc
    gc.collect()
    try:
        import torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001
        pass


def _oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower() or "ALLOC_FAILED" in str(exc)


def _handle(task: dict) -> dict:
    """Compile one reference: `{"pytorch_code", "device", "mode", "seed"}` -> a capture record.

    Never raises for the reference's own faults: they come back as `{"ok": False, "reason"}`.
    """
    if task.get("not_after") and time.time() > task["not_after"]:
        return {"ok": False, "reason": "synth:skipped_deadline"}
    import torch
    device = task.get("device", "cpu")
    mode = task.get("mode", "default")
    seed = int(task.get("seed", 0))
    t0 = time.monotonic()
    out: dict = {"ok": False, "device": device, "mode": mode, "versions": versions(device)}
    try:
        ref = load_reference(task["pytorch_code"])
        torch.manual_seed(seed)
        init = ref.get_init_inputs()
        model = ref.Model(*init)
        torch.manual_seed(seed + 1)
        inputs = list(ref.get_inputs())
    except Exception as exc:  # noqa: BLE001
        out.update(reason="synth:reference_error", error=_short(exc))
        return out
    try:
        model = model.to(device).eval()
        inputs = to_device(inputs, device)
        with torch.no_grad():
            expected = model(*inputs)
    except Exception as exc:  # noqa: BLE001
        out.update(reason="synth:oom" if _oom(exc) else "synth:reference_error",
                   error=_short(exc))
        return out
    structure, exp_flat = _flat_tensors(expected)
    if structure is None:
        out.update(reason="synth:unsupported_output", error=f"output is {type(expected).__name__}")
        return out

    import torch._dynamo
    import torch._inductor.config as icfg
    torch._dynamo.reset()
    for name, val in (("specialize_float", True), ("specialize_int", True),
                      ("assume_static_by_default", True)):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, val)
    if hasattr(icfg.triton, "unique_kernel_names"):
        icfg.triton.unique_kernel_names = True
    if hasattr(icfg, "cpp_wrapper"):
        icfg.cpp_wrapper = False
    # cudagraphs would copy inputs into static buffers and hide which tensor fills which slot
    compile_mode = {"default": None, "max-autotune": "max-autotune-no-cudagraphs"}.get(mode, mode)
    skip_cpp = device == "cpu" and not task.get("build_cpp", False)
    rec = Recorder(skip_cpp_build=skip_cpp)
    try:
        compiled = torch.compile(model, backend="inductor", fullgraph=True, dynamic=False,
                                 mode=compile_mode)
        with rec, torch.no_grad():
            got = compiled(*inputs)
    except Exception as exc:  # noqa: BLE001
        out.update(reason=_classify(exc), error=_short(exc),
                   traceback=traceback.format_exc(limit=8)[-3000:],
                   compile_seconds=time.monotonic() - t0)
        return out
    finally:
        torch._dynamo.reset()
    out["compile_seconds"] = time.monotonic() - t0
    out["codes"] = list(rec.codes)
    out["launches"] = rec.launches
    out["hook_errors"] = rec.errors
    out["structure"] = structure
    if device == "cpu":
        out["cpu_build"] = cpu_build_flags()
    if len(rec.codes) != 1 or len(rec.calls) != 1:
        out.update(reason="synth:not_one_graph",
                   error=f"{len(rec.codes)} output codes, {len(rec.calls)} graph calls")
        return out
    _, got_flat = _flat_tensors(got)
    call = rec.calls[0]
    slots, problems = wire_inputs(call["inputs"], model, inputs)
    outmap = wire_outputs(call.get("outputs", []), got_flat, call["inputs"])
    out["slots"] = slots
    out["outputs"] = outmap
    out["n_call_outputs"] = len(call.get("outputs", []))
    out["forward_inputs"] = [("tensor" if isinstance(x, torch.Tensor) else type(x).__name__)
                             for x in inputs]
    if problems:
        out.update(reason="synth:unwired_input", error="; ".join(problems))
        return out
    if outmap is None:
        out.update(reason="synth:unwired_output",
                   error="a model output is neither a call result nor a call input")
        return out
    # the compiled run should agree with eager; a disagreement is inductor's, noted not fatal
    worst = 0.0
    for e, g in zip(exp_flat, got_flat):
        if e.shape != g.shape:
            worst = math.inf
            break
        if e.numel():
            d = (e.double() - g.double()).abs().max().item()
            worst = max(worst, d if d == d else math.inf)
    out["compiled_max_abs_err"] = None if skip_cpp else worst
    if rec.errors and device == "cuda":
        out.update(reason="synth:launch_record_failed", error="; ".join(rec.errors))
        return out
    if task.get("save_tensors"):
        path = Path(task["save_tensors"])
        torch.save({"seed": seed, "init": init,
                    "inputs": to_device(inputs, "cpu"),
                    "expected": [t.detach().cpu() for t in exp_flat]}, path)
        out["tensors"] = str(path)
    out["ok"] = True
    return out
