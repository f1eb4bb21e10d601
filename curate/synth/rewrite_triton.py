"""Inductor's Triton output -> a standalone Triton program (`backend=triton`).

Every kernel's source is in the file as a plain `@triton.jit` function (inductor's autotuning
decorator removed) and every launch is `kernel[grid](..., XBLOCK=.., num_warps=.., num_stages=..)`
with the grid and the config recorded from the compiled run (what actually launched). Buffers
are allocated on the inputs' device, so the program also runs on CPU tensors under
TRITON_INTERPRET=1. The same idea as `torch.utils._get_clean_triton`, with the launch
parameters taken from the run itself and the arguments wired by the graph's own order.
"""

from __future__ import annotations

import ast

from curate import pyast

from .rewrite import (HELPERS, RewriteError, forward_source, parse_output_code, rewrite_call,
                      strip_reference_main)

# inductor's autotuning machinery: not needed once the launches are inlined
_SKIP_NAMES = {"triton_heuristics", "AutotuneHint", "ReductionHint", "TileHint",
               "DeviceProperties"}


def _is_jit(fn: ast.FunctionDef) -> bool:
    return any(ast.unparse(d).split("(")[0] in ("triton.jit", "jit") for d in fn.decorator_list)


def kernel_functions(name: str, module_src: str) -> tuple[list[str], list[str]]:
    """The `@triton.jit` functions of one kernel module (decorators reduced to `@triton.jit`)
    and the imports they need."""
    tree = pyast.parse(module_src)
    funcs, imports = [], []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            node.names = [a for a in node.names if a.name not in _SKIP_NAMES]
            if node.names:
                imports.append(ast.unparse(node))
        elif isinstance(node, ast.FunctionDef):
            if not _is_jit(node):
                raise RewriteError("synth:unsupported_kernel", f"{name}: {node.name} is not jit")
            seg = ast.get_source_segment(module_src, node)
            funcs.append("@triton.jit\n" + seg)
        elif isinstance(node, ast.Expr) and "set_driver_to_gpu" in ast.unparse(node):
            continue
        elif isinstance(node, (ast.Assign, ast.Expr)):
            raise RewriteError("synth:unsupported_kernel",
                               f"{name}: top-level statement {ast.unparse(node)[:80]}")
    if not any(f.split("\n", 2)[1].startswith(f"def {name}(") for f in funcs):
        raise RewriteError("synth:unsupported_kernel", f"{name}: entry function not found")
    return funcs, imports


class Launches:
    """Hands out the recorded launches in run order, one per `K.run(...)` call site."""

    def __init__(self, records: list[dict]):
        self.records = list(records)
        self.used = [False] * len(self.records)

    def __call__(self, kernel: str, node: ast.Call):
        for i, r in enumerate(self.records):
            if not self.used[i] and r["kernel"] == kernel:
                self.used[i] = True
                break
        else:
            raise RewriteError("synth:no_launch_record", kernel)
        if any(isinstance(a, ast.Starred) for a in node.args) or len(node.args) != r["n_args"]:
            raise RewriteError("synth:launch_mismatch",
                               f"{kernel}: {len(node.args)} args at the call site, "
                               f"{r['n_args']} launched")
        grid = ast.Tuple([ast.Constant(int(g)) for g in r["grid"]], ast.Load())
        kws = [ast.keyword(k, ast.Constant(v)) for k, v in r["kwargs"].items()]
        kws += [ast.keyword("num_warps", ast.Constant(int(r["num_warps"]))),
                ast.keyword("num_stages", ast.Constant(int(r["num_stages"])))]
        for extra in ("maxnreg", "num_ctas"):
            if extra in r:
                kws.append(ast.keyword(extra, ast.Constant(r[extra])))
        return ast.Call(ast.Subscript(ast.Name(kernel, ast.Load()), grid, ast.Load()),
                        list(node.args), kws)


HEADER = '''# Standalone Triton program written by curate from torch.compile (inductor) output.
# Kernels and launch parameters ({generator}) are inlined: no torch.compile, no caches.
import math
import torch
import torch.nn as nn
import triton
import triton.language as tl
'''


def build_triton_program(reference_code: str, capture: dict, generator: str = ""
                         ) -> tuple[str, list[str]]:
    """(kernel_code, reasons) from one capture record of the inductor worker."""
    parsed = parse_output_code(capture["codes"][0])
    if parsed.cpp:
        raise RewriteError("synth:mixed_backends", "C++ kernels in a Triton program")
    funcs, imports, seen = [], [], set()
    for name, src in parsed.triton.items():
        fs, ims = kernel_functions(name, src)
        for f in fs:
            fname = f.split("\n", 2)[1].split("(")[0][4:]
            if fname in seen:
                continue
            seen.add(fname)
            funcs.append(f)
        imports += [i for i in ims if i not in imports]
    launches = Launches(capture.get("launches", []))
    call_src, reasons = rewrite_call(parsed.call, set(parsed.triton), set(), launches)
    if not parsed.triton:
        reasons.append("synth:no_kernel")
    base = {"import triton", "import triton.language as tl"}
    parts = [HEADER.format(generator=generator or "inductor")]
    parts += [i + "\n" for i in imports if i not in base]
    parts.append("\n# ---- reference program (Model, get_inputs, get_init_inputs) ----\n")
    parts.append(strip_reference_main(reference_code))
    parts.append("\n# ---- kernels ----\n")
    parts += ["\n" + f.rstrip() + "\n\n" for f in funcs]
    parts.append("# ---- the compiled graph, launches inlined ----")
    parts.append(HELPERS)
    parts.append("\n" + call_src + "\n\n")
    parts.append("\nclass ModelNew(Model):\n")
    parts.append('    """Model, computed by the kernels above."""\n\n')
    parts.append(forward_source(capture["slots"], capture["outputs"], capture["structure"]))
    program = "".join(parts)
    pyast.parse(program)
    return program, reasons
