"""Inductor's CPU output -> a standalone C++ program (`backend=cpp`).

The C++ kernels inductor generated are embedded in the candidate, built once per process into a
fresh temporary directory with the compiler, defines (the vector ISA: the kernels' loop strides
depend on it) and flags of inductor's own command line, and called through ctypes on the
tensors' data pointers. Nothing comes from inductor's on-disk caches, and torch.compile is not
involved at run time.
"""

from __future__ import annotations

import re
from curate import pyast

from .rewrite import (HELPERS, RewriteError, forward_source, parse_output_code, rewrite_call,
                      strip_reference_main)

_CTYPES = {"int64_t": "c_int64", "int32_t": "c_int32", "long": "c_long", "int": "c_int",
           "float": "c_float", "double": "c_double", "bool": "c_bool", "uintptr_t": "c_void_p"}
_ENTRY = re.compile(r'(extern\s+"C"\s+(?:[\w:]+\s+)*?)kernel(\s*\()')


def ctypes_name(argtype: str) -> str:
    t = argtype.replace("const ", "").strip()
    if t.endswith("*"):
        return "c_void_p"
    if t not in _CTYPES:
        raise RewriteError("synth:unsupported_kernel", f"C++ argument type {argtype!r}")
    return _CTYPES[t]


def rename_entry(name: str, src: str) -> str:
    """`extern "C" void kernel(...)` -> `extern "C" void <name>(...)` (one library, many kernels)."""
    out, n = _ENTRY.subn(lambda m: m.group(1) + name + m.group(2), src, count=1)
    if n != 1:
        raise RewriteError("synth:unsupported_kernel", f"{name}: no extern \"C\" kernel()")
    return out


HEADER = '''# Standalone C++ program written by curate from torch.compile (inductor) CPU output.
# The kernels ({generator}) are built on first use with inductor's flags and called via ctypes.
import atexit
import ctypes
import math
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import torch
import torch.nn as nn
import torch.utils.cpp_extension
'''

RUNTIME = '''
_BUILD = {build!r}
_lib = None


def _load_kernels():
    """Compile every kernel above into one shared library (fresh temp dir, once per process)."""
    global _lib
    if _lib is not None:
        return _lib
    out_dir = tempfile.mkdtemp(prefix="curate-cpp-")
    atexit.register(shutil.rmtree, out_dir, True)
    src = os.path.join(out_dir, "kernels.cpp")
    with open(src, "w") as fh:
        fh.write("#include <torch/csrc/inductor/cpp_prefix.h>\\n")
        for name, (_, code) in CPP_KERNELS.items():
            fh.write(code.replace("#include <torch/csrc/inductor/cpp_prefix.h>", ""))
            fh.write("\\n")
    lib_path = os.path.join(out_dir, "kernels.so")
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    includes = [sysconfig.get_paths()["include"], *torch.utils.cpp_extension.include_paths()]
    cmd = [_BUILD["compiler"], src, *("-D" + d for d in _BUILD["defines"]), *_BUILD["flags"],
           *("-I" + i for i in includes), "-o", lib_path, "-L" + torch_lib,
           "-Wl,-rpath," + torch_lib, *("-l" + x for x in _BUILD["libs"])]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("building the C++ kernels failed:\\n" + proc.stderr[-4000:])
    lib = ctypes.CDLL(lib_path)
    for name, (argtypes, _) in CPP_KERNELS.items():
        getattr(lib, name).argtypes = [getattr(ctypes, t) for t in argtypes]
        getattr(lib, name).restype = None
    _lib = lib
    return lib


def _cpp_kernel(name):
    def launch(*args):
        fn = getattr(_load_kernels(), name)
        fn(*[a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args])
    launch.__name__ = name
    return launch
'''


def build_cpp_program(reference_code: str, capture: dict, generator: str = ""
                      ) -> tuple[str, list[str]]:
    """(kernel_code, reasons) from one CPU capture record of the inductor worker."""
    parsed = parse_output_code(capture["codes"][0])
    if parsed.triton:
        raise RewriteError("synth:mixed_backends", "Triton kernels in a C++ program")
    build = capture.get("cpu_build") or {}
    if "error" in build or not build.get("compiler"):
        raise RewriteError("synth:no_build_flags", str(build.get("error", "")))
    kernels = {}
    for name, (types, src) in parsed.cpp.items():
        kernels[name] = ([ctypes_name(t) for t in types], rename_entry(name, src))

    def no_triton(kernel, node):  # pragma: no cover - parse_output_code found no Triton kernels
        raise RewriteError("synth:mixed_backends", kernel)
    call_src, reasons = rewrite_call(parsed.call, set(), set(parsed.cpp), no_triton)
    if not parsed.cpp:
        reasons.append("synth:no_kernel")
    parts = [HEADER.format(generator=generator or "inductor")]
    parts.append("\n# ---- reference program (Model, get_inputs, get_init_inputs) ----\n")
    parts.append(strip_reference_main(reference_code))
    parts.append("\n# ---- C++ kernels (inductor's source, entry points renamed) ----\n")
    parts.append("CPP_KERNELS = {\n")
    for name, (types, src) in kernels.items():
        parts.append(f"    {name!r}: ({types!r}, r'''{src}'''),\n")
    parts.append("}\n")
    parts.append(RUNTIME.format(build={k: build[k] for k in ("compiler", "defines", "flags",
                                                              "libs")}))
    for name in kernels:
        parts.append(f"{name} = _cpp_kernel({name!r})\n")
    parts.append("\n# ---- the compiled graph ----")
    parts.append(HELPERS)
    parts.append("\n" + call_src + "\n\n")
    parts.append("\nclass ModelNew(Model):\n")
    parts.append('    """Model, computed by the C++ kernels above."""\n\n')
    parts.append(forward_source(capture["slots"], capture["outputs"], capture["structure"]))
    program = "".join(parts)
    if any("'''" in src for _, src in kernels.values()):
        raise RewriteError("synth:unsupported_kernel", "kernel source holds '''")
    pyast.parse(program)
    return program, reasons
