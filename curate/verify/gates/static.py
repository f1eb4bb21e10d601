"""Static gates: read the candidate program's AST (never run it) and name what looks deceptive.

`static_findings(kernel_code, pytorch_code)` returns `[(reason, severity)]` with severity
"fail" (the row becomes `deceptive`) or "warn" (the reason is recorded, the row may still verify).
It runs in the parent before a row is dispatched to a worker, so it must be cheap and must never
execute the code.

What counts as a custom kernel:
- Triton: a function decorated with `triton.jit` (or `jit`, `triton.autotune`, `triton.heuristics`),
  launched as `kernel[grid](...)`, `kernel.run(...)` or `kernel.warmup(...)`;
- CUDA / C++: the result of `load_inline`, `cpp_extension.load`, inductor's
  `async_compile.cpp_pybinding` / `.cpp` / `.triton` / `.cuda`, or `load_pybinding`, referenced
  from forward (`ext.fn(...)`, `self.ext.fn(...)`, `kernel(...)`).

Reachability is by name and over-approximates (a call `x.foo()` reaches every function named
`foo` in the file): a false "reached" costs nothing here because the dynamic gates check what
actually ran; a false "not reached" would reject honest code.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from curate import pyast

FAIL, WARN = "fail", "warn"

# Calls whose result is a compiled custom kernel (or a module of them).
KERNEL_FACTORIES = {"load_inline", "load", "cpp_pybinding", "cpp", "triton", "cuda",
                    "load_pybinding", "load_pybinding_async", "compile_kernel", "RawKernel",
                    "RawModule", "_cuda_compile", "CDLL"}
# `cpp`, `triton`, `cuda` and `load` are kernel factories only as methods of these objects.
_FACTORY_OWNERS = {"async_compile", "AsyncCompile", "cpp_extension", "CppCodeCache",
                   "CppPythonBindingsCodeCache", "extension", "cupy", "cp", "torch_ext"}
_AMBIGUOUS_FACTORIES = {"load", "cpp", "triton", "cuda"}

# Modules and attributes that reach into the harness or the process around the candidate.
_FORBIDDEN_MODULES = {
    "gc": "gc", "inspect": "inspect", "ctypes": "ctypes", "builtins": "builtins",
    "importlib": "importlib", "socket": "network", "urllib": "network", "http": "network",
    "requests": "network", "httpx": "network", "aiohttp": "network", "ftplib": "network",
    "smtplib": "network", "subprocess": "process", "multiprocessing": "process",
    "pty": "process", "signal": "process", "threading": "threading", "_thread": "threading",
    "unittest": "mock", "mock": "mock", "pickle": "pickle", "marshal": "pickle",
    "dill": "pickle", "cloudpickle": "pickle", "tracemalloc": "tracemalloc",
    "faulthandler": "process", "resource": "process", "mmap": "mmap", "sysconfig": None,
}
_CTYPES_HARMLESS = re.compile(r"^c_\w+$")  # inductor's `from ctypes import c_void_p, c_long`
_FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "f_code", "tb_frame",
                "tb_next", "gi_frame", "cr_frame", "ag_frame", "__globals__", "__closure__",
                "__code__", "__subclasses__", "__builtins__", "__self_class__", "co_consts"}
_SYS_FORBIDDEN = {"_getframe", "_current_frames", "settrace", "setprofile", "modules",
                  "addaudithook", "exc_info", "exception", "last_traceback", "meta_path",
                  "path_hooks", "_clear_type_cache", "monitoring", "setrecursionlimit"}
_OS_FORBIDDEN = {"system", "popen", "fork", "forkpty", "kill", "killpg", "execv", "execve",
                 "execvp", "execl", "execlp", "spawnv", "spawnl", "posix_spawn", "_exit",
                 "setsid", "setpgid", "unshare", "setns", "dup2"}
_DYNAMIC_CODE = {"eval", "exec", "__import__", "compile", "breakpoint"}
# Patching any attribute of these modules changes what the harness measures or compares.
_PATCH_ROOTS = {"torch", "time", "triton", "tl", "F", "nn", "np", "numpy", "math", "sys", "os",
                "gc", "builtins", "random", "cuda", "perf_counter", "functools"}

_REDUCED_PRECISION = re.compile(
    r"\b(torch\.(float16|half|bfloat16|float8\w*)|tl\.(float16|bfloat16|float8\w*)|"
    r"__half2?|half2|__nv_bfloat16\w*|__float2half\w*|__half2float|__float2bfloat16\w*|"
    r"__hadd|__hmul|__hfma|at::(kHalf|kBFloat16|Half|BFloat16)|torch::(kHalf|kBFloat16)|"
    r"c10::(Half|BFloat16)|autocast|nv_bfloat16|cuda_fp16\.h|cuda_bf16\.h|wmma::precision)\b|"
    r"\.(half|bfloat16)\(\)|\bdtype\s*=\s*['\"](float16|bfloat16|half)['\"]")
_REF_LOW_PRECISION = re.compile(r"float16|bfloat16|\bhalf\b|\.half\(\)|autocast|float8|fp16|bf16")
_TF32 = re.compile(r"allow_tf32\s*=\s*True|input_precision\s*=\s*['\"]tf32|"
                   r"set_float32_matmul_precision|\.allow_tf32\s*=|cublasSetMathMode|"
                   r"CUBLAS_TF32|fp32_precision")
_SIDE_STREAM = re.compile(r"torch\.cuda\.Stream\s*\(|torch\.cuda\.stream\s*\(|\bStream\s*\(|"
                          r"cudaStreamCreate|getStreamFromPool|cudaStreamNonBlocking")
_STREAM_JOIN = re.compile(r"wait_stream|wait_event|\.synchronize\s*\(|cudaStreamSynchronize|"
                          r"cudaDeviceSynchronize|cudaStreamWaitEvent|record_stream")
_CUDA_KERNEL = re.compile(r"__global__")
_CUDA_LAUNCH = re.compile(r"<<<|cudaLaunchKernel|cuLaunchKernel|AT_DISPATCH|kernel\s*\(")
_TORCH_IN_EXTENSION = re.compile(
    r"\b(torch|at)::(matmul|mm|bmm|addmm|conv\w*|linear|softmax|log_softmax|layer_norm|"
    r"batch_norm|group_norm|relu|gelu|sigmoid|tanh|exp|sum|mean|max_pool\w*|avg_pool\w*|"
    r"einsum|baddbmm|cross_entropy|mse_loss|scaled_dot_product_attention)\s*\(")
# torch functions that do arithmetic (as opposed to allocation, views and metadata).
_TORCH_COMPUTE = {
    "matmul", "mm", "bmm", "addmm", "baddbmm", "einsum", "conv1d", "conv2d", "conv3d",
    "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "linear", "softmax",
    "log_softmax", "layer_norm", "batch_norm", "group_norm", "instance_norm", "relu", "gelu",
    "silu", "sigmoid", "tanh", "mish", "hardswish", "hardtanh", "leaky_relu", "elu", "selu",
    "softplus", "dropout", "max_pool1d", "max_pool2d", "max_pool3d", "avg_pool1d",
    "avg_pool2d", "avg_pool3d", "adaptive_avg_pool2d", "scaled_dot_product_attention",
    "cross_entropy", "mse_loss", "smooth_l1_loss", "kl_div", "cosine_similarity",
    "logsumexp", "cumsum", "cumprod", "norm", "normalize", "lstm", "gru", "rnn_tanh",
}


@dataclass
class _Func:
    name: str
    node: ast.AST
    owner: str | None = None  # class name for methods
    refs: set[str] = field(default_factory=set)


class _Program:
    """Names, functions, kernels and kernel handles of one candidate module."""

    def __init__(self, tree: ast.Module, code: str):
        self.tree, self.code = tree, code
        self.funcs: dict[str, list[_Func]] = {}
        self.classes: dict[str, ast.ClassDef] = {}
        self.triton_kernels: set[str] = set()
        self.handles: set[str] = set()       # names bound to compiled kernels / extensions
        self.factories: set[str] = set()     # local functions that return a compiled kernel
        self.aliases: dict[str, set[str]] = {}  # module-level `a = <expr>`: a -> names in expr
        self.module_aliases: dict[str, str] = {}  # `import numpy as np` -> np: numpy
        self._collect()

    # -- collection ------------------------------------------------------------------------
    def _collect(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                self.classes[node.name] = node
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        self._add_func(item, node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    full = a.name if isinstance(node, ast.Import) else \
                        f"{node.module or ''}.{a.name}"
                    self.module_aliases[a.asname or a.name.split(".")[0]] = full
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    not any(node is f.node for fs in self.funcs.values() for f in fs):
                self._add_func(node, None)
        for fs in self.funcs.values():
            for f in fs:
                if self._is_triton(f.node):
                    self.triton_kernels.add(f.name)
        # kernel handles: names bound from a kernel factory, transitively through local helpers
        for _ in range(4):
            before = (len(self.handles), len(self.factories))
            for fs in self.funcs.values():
                for f in fs:
                    if f.name not in self.triton_kernels and f.name != "__init__" and \
                            self._makes_kernel(f.node):
                        self.factories.add(f.name)
            for node in ast.walk(self.tree):
                targets, value = _assign_parts(node)
                if value is not None and self._makes_kernel(value):
                    for t in targets:
                        self.handles.update(_target_names(t))
            if (len(self.handles), len(self.factories)) == before:
                break
        for node in self.tree.body:
            targets, value = _assign_parts(node)
            if value is not None:
                refs = _referenced_names(value)
                for t in targets:
                    for n in _target_names(t):
                        self.aliases.setdefault(n, set()).update(refs)

    def _add_func(self, node, owner):
        f = _Func(node.name, node, owner, _referenced_names(node))
        self.funcs.setdefault(node.name, []).append(f)

    @staticmethod
    def _is_triton(node) -> bool:
        for d in getattr(node, "decorator_list", []):
            text = ast.unparse(d)
            if re.search(r"\b(jit|autotune|heuristics)\b", text) and "torch.jit" not in text:
                return True
        return False

    def _makes_kernel(self, value: ast.AST) -> bool:
        for sub in ast.walk(value):
            if not isinstance(sub, ast.Call):
                continue
            fn = sub.func
            name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if \
                isinstance(fn, ast.Name) else None
            if name is None:
                continue
            if name in self.factories:
                return True
            if name not in KERNEL_FACTORIES:
                continue
            if name in _AMBIGUOUS_FACTORIES:
                owner = _root_name(fn.value) if isinstance(fn, ast.Attribute) else None
                full = self.module_aliases.get(name, "") if isinstance(fn, ast.Name) else ""
                if (owner in _FACTORY_OWNERS or "cpp_extension" in ast.unparse(fn)
                        or "cpp_extension" in full):
                    return True
                continue
            return True
        return False

    # -- queries -----------------------------------------------------------------------------
    def entry_class(self) -> str | None:
        if "ModelNew" in self.classes:
            return "ModelNew"
        for name, node in self.classes.items():
            if any(isinstance(i, ast.FunctionDef) and i.name == "forward" for i in node.body):
                return name
        return None

    def reachable(self, start: list[_Func]) -> tuple[list[_Func], set[str]]:
        """Functions reachable from `start` and every name they reference."""
        seen_f: list[_Func] = []
        names: set[str] = set()
        todo = list(start)
        seen_names: set[str] = set()
        while todo:
            f = todo.pop()
            if any(f is g for g in seen_f):
                continue
            seen_f.append(f)
            frontier = set(f.refs)
            while frontier:
                n = frontier.pop()
                if n in seen_names:
                    continue
                seen_names.add(n)
                names.add(n)
                frontier.update(self.aliases.get(n, ()))
                for g in self.funcs.get(n, []):
                    if g.name in self.triton_kernels:
                        continue  # a launch, not a Python call into the kernel
                    todo.append(g)
                if n in self.classes:  # MyFn.apply(...) reaches MyFn.forward/backward
                    for item in self.classes[n].body:
                        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            todo.extend(g for g in self.funcs.get(item.name, [])
                                        if g.owner == n)
        return seen_f, names

    def launches_in(self, node: ast.AST) -> set[str]:
        """Kernel names launched or handles used directly inside `node`."""
        hits = set()
        for sub in ast.walk(node):
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, (ast.Name, ast.Attribute)):
                n = _last_name(sub.value)
                if n in self.triton_kernels:
                    hits.add(n)
            elif isinstance(sub, ast.Attribute) and sub.attr in ("run", "warmup", "launch") and \
                    _last_name(sub.value) in self.triton_kernels:
                hits.add(_last_name(sub.value))
            elif isinstance(sub, (ast.Name, ast.Attribute)):
                n = _last_name(sub)
                if n in self.handles:
                    hits.add(n)
        return hits


def _assign_parts(node) -> tuple[list[ast.AST], ast.AST | None]:
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and node.value is not None:
        return [node.target], node.value
    return [], None


def _target_names(t: ast.AST) -> set[str]:
    if isinstance(t, ast.Name):
        return {t.id}
    if isinstance(t, ast.Attribute):
        return {t.attr}
    if isinstance(t, (ast.Tuple, ast.List)):
        out = set()
        for e in t.elts:
            out |= _target_names(e)
        return out
    if isinstance(t, ast.Subscript):
        return _target_names(t.value)
    return set()


def _referenced_names(node: ast.AST) -> set[str]:
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
    return out


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _last_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _dotted(node: ast.AST) -> str:
    try:
        return ast.unparse(node)
    except Exception:  # noqa: BLE001
        return "?"


def _code_text(tree: ast.Module) -> str:
    """The program without comments and docstrings (CUDA/C++ sources in strings stay): what the
    text gates read, so that a comment mentioning fp16 is not half precision."""
    import copy
    t = copy.deepcopy(tree)
    for node in ast.walk(t):
        body = getattr(node, "body", None)
        if isinstance(body, list):
            kept = [b for b in body if not (isinstance(b, ast.Expr) and isinstance(
                getattr(b, "value", None), ast.Constant) and isinstance(b.value.value, str))]
            node.body = kept or [ast.Pass()]
    try:
        return ast.unparse(t)
    except Exception:  # noqa: BLE001
        return ""


def _string_constants(tree: ast.AST) -> str:
    return "\n".join(n.value for n in ast.walk(tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str))


# -- the gates ---------------------------------------------------------------------------------

# A program that carries its own C/C++ kernels (`extern "C"` sources) may build them with a
# compiler in a subprocess and load them with ctypes: these are all it may touch of ctypes.
_CTYPES_LOADER = re.compile(r"^(CDLL|c_\w+|ARRAY|Structure)$")


def _harness_access(prog: _Program, builds_native: bool = False) -> list[str]:
    """Reasons for code that reaches into the harness, the interpreter or the outside."""
    found: list[str] = []
    allowed_tags = {"ctypes", "process"} if builds_native else set()

    def add(r):
        if r in ("harness_access:ctypes", "harness_access:process") and \
                r.split(":")[1] in allowed_tags and r not in strict:
            return
        if r not in found:
            found.append(r)

    strict: set[str] = set()  # uses that stay forbidden even for a native-kernel program

    for node in ast.walk(prog.tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                top = a.name.split(".")[0]
                tag = _FORBIDDEN_MODULES.get(top)
                if tag:
                    add(f"harness_access:{tag}")
                if a.name.startswith("torch.testing") or a.name.startswith("torch._dynamo.eval"):
                    add("harness_access:torch_testing")
        elif isinstance(node, ast.ImportFrom):
            top = (node.module or "").split(".")[0]
            tag = _FORBIDDEN_MODULES.get(top)
            if tag == "ctypes":
                bad = [a.name for a in node.names if not _CTYPES_HARMLESS.match(a.name)]
                if any(not _CTYPES_LOADER.match(b) for b in bad):
                    strict.add("harness_access:ctypes")
                if bad:
                    add("harness_access:ctypes")
            elif tag:
                add(f"harness_access:{tag}")
            if top == "sys" and any(a.name in _SYS_FORBIDDEN for a in node.names):
                add("harness_access:sys")
            if top == "os" and any(a.name in _OS_FORBIDDEN for a in node.names):
                strict.add("harness_access:process")
                add("harness_access:process")
        elif isinstance(node, ast.Attribute):
            root = _root_name(node)
            if node.attr in _FRAME_ATTRS:
                add("harness_access:frames")
            if root == "sys" and node.attr in _SYS_FORBIDDEN:
                add("harness_access:sys" if node.attr != "_getframe" else "harness_access:frames")
            if root == "os" and node.attr in _OS_FORBIDDEN:
                strict.add("harness_access:process")
                add("harness_access:process")
            if root in ("ctypes",) and not _CTYPES_HARMLESS.match(node.attr):
                if not _CTYPES_LOADER.match(node.attr):
                    strict.add("harness_access:ctypes")
                add("harness_access:ctypes")
            if node.attr in ("_getframe", "_current_frames", "currentframe",
                             "get_objects", "get_referrers", "get_referents"):
                add("harness_access:frames" if "frame" in node.attr else "harness_access:gc")
            # `inspect.stack()`, not `torch.stack` (level3/30_SwinTransformerV2's candidate was
            # failed for it on the H200); inspect under another name is caught at its import
            if node.attr == "stack" and root == "inspect":
                add("harness_access:frames")
        elif isinstance(node, ast.Name):
            if node.id in ("__builtins__", "__loader__", "__spec__"):
                add("harness_access:builtins")
            if node.id in _DYNAMIC_CODE and isinstance(getattr(node, "ctx", None), ast.Load):
                add("harness_access:dynamic_code")
        elif isinstance(node, ast.Call):
            fn = node.func
            name = _last_name(fn)
            if name in ("setattr", "delattr") and isinstance(fn, ast.Name) and node.args:
                root = _root_name(node.args[0])
                if root in _PATCH_ROOTS or prog.module_aliases.get(root or "", "").split(".")[0] \
                        in _PATCH_ROOTS:
                    attr = node.args[1].value if len(node.args) > 1 and isinstance(
                        node.args[1], ast.Constant) else "?"
                    add(_patch_reason(f"{_dotted(node.args[0])}.{attr}"))
            if name == "getattr" and isinstance(fn, ast.Name) and len(node.args) >= 2 and \
                    not isinstance(node.args[1], ast.Constant) and \
                    _root_name(node.args[0]) in _PATCH_ROOTS:
                add("harness_access:dynamic_attribute")
            if name in ("patch", "patch.object", "MonkeyPatch"):
                add("harness_access:mock")
            if name in ("CDLL", "PyDLL", "LoadLibrary") and (not node.args or isinstance(
                    node.args[0], ast.Constant)):
                strict.add("harness_access:ctypes")  # libc or another system library
                add("harness_access:ctypes")
            if name == "set_float32_matmul_precision" or name == "set_default_dtype":
                add(f"harness_access:patch:torch.{name}")
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for t in targets:
                for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                    if isinstance(el, (ast.Attribute, ast.Subscript)):
                        root = _root_name(el)
                        full = prog.module_aliases.get(root or "", root or "")
                        if root in _PATCH_ROOTS or full.split(".")[0] in _PATCH_ROOTS:
                            if root == "os" and "environ" in _dotted(el):
                                continue  # setting build variables (TORCH_CUDA_ARCH_LIST) is fine
                            add(_patch_reason(_dotted(el)))
    return found


def _patch_reason(target: str) -> str:
    timer = re.search(r"\b(time\.|perf_counter|monotonic|Event|elapsed_time|synchronize)", target)
    return f"timer_patched:{target}" if timer else f"harness_access:patch:{target}"


# -- try/except fallbacks ----------------------------------------------------------------------
# A fallback answers with another implementation when the kernel fails: the try launches (or
# builds) a custom kernel, and the handler, or code only the handler reaches, computes what
# forward returns with PyTorch. Handlers that re-raise, read a setting or import an optional
# module are error handling, not a second implementation.

# torch calls that allocate, move or describe tensors: no implementation of the result
_TORCH_NOT_COMPUTE = {
    "empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "tensor", "as_tensor", "from_numpy", "device", "dtype", "Size", "is_tensor",
    "numel", "get_default_dtype", "manual_seed", "no_grad", "synchronize", "current_stream",
    "device_count", "is_available", "get_device_name", "contiguous", "view", "reshape", "size",
    "stride", "data_ptr", "to", "cpu", "cuda", "detach", "new_empty", "new_zeros", "item",
    "tolist", "element_size", "dim", "is_contiguous", "empty_cache", "set_grad_enabled",
    "inference_mode", "get_device_capability", "Tensor", "finfo", "iinfo"}
_TORCH_ROOTS = {"torch", "F", "nn", "functional", "aten"}
# tensor methods that compute (x.sigmoid(), x.exp(), a.matmul(b) ...)
_TENSOR_COMPUTE = _TORCH_COMPUTE | {
    "exp", "log", "sqrt", "rsqrt", "pow", "abs", "neg", "sin", "cos", "erf", "clamp", "clip",
    "mul", "add", "sub", "div", "sum", "mean", "amax", "amin", "max", "min", "prod", "var",
    "std", "where", "masked_fill", "exp2", "log1p", "expm1", "reciprocal", "square",
    "sigmoid_", "relu_", "add_", "mul_", "argmax", "topk", "sort", "gather", "scatter",
    "index_select"}
_FUNCS = (ast.FunctionDef, ast.AsyncFunctionDef)
_TRIES = (ast.Try,) + ((ast.TryStar,) if hasattr(ast, "TryStar") else ())


def _walk_local(node: ast.AST):
    """`ast.walk` that does not enter nested functions, lambdas or classes."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(c for c in ast.iter_child_nodes(n)
                    if not isinstance(c, _FUNCS + (ast.Lambda, ast.ClassDef)))


def _stmt_lists(scope: ast.AST):
    """The statement lists of one scope (bodies, else and finally blocks, handlers)."""
    for n in _walk_local(scope):
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(n, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                yield stmts


def _ends_flow(stmts: list) -> bool:
    return bool(stmts) and isinstance(stmts[-1], (ast.Return, ast.Raise, ast.Continue,
                                                  ast.Break))


def _params(node: ast.AST) -> set[str]:
    args = getattr(node, "args", None)
    if not isinstance(args, ast.arguments):
        return set()
    names = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    names |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
    return names - {"self", "cls"}


def _bound_names(stmts: list) -> set[str]:
    """Names (and attribute names) that the statements assign."""
    out = set()
    for st in stmts:
        for n in _walk_local(st):
            for t in _assign_parts(n)[0]:
                out |= _target_names(t)
    return out


class _Fallbacks:
    """The try/except blocks of one program whose handler falls back to another
    implementation of what the try's kernel computes."""

    def __init__(self, prog: _Program, reach_funcs: list[_Func], reach_names: set[str]):
        self.prog, self.reach_names = prog, reach_names
        self.reach_nodes = {id(f.node) for f in reach_funcs}
        self.reach_funcs = reach_funcs
        self.launching = self._launching_functions()
        self._impl: dict[str, bool] = {}
        # names bound to PyTorch modules or functions (`self.act = nn.SiLU()`): calling one
        # computes with PyTorch
        self.torch_objects = set()
        for n in ast.walk(prog.tree):
            targets, value = _assign_parts(n)
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and (
                    _root_name(value.func) in ("torch", "nn", "F") or prog.module_aliases.get(
                        _root_name(value.func) or "", "").split(".")[0] == "torch"):
                for t in targets:
                    self.torch_objects |= _target_names(t)

    def _launching_functions(self) -> set[str]:
        """Local functions that (transitively, by name) launch or build a kernel."""
        prog = self.prog
        launching = prog.triton_kernels | prog.handles | prog.factories
        for _ in range(4):
            grew = False
            for name, fs in prog.funcs.items():
                if name in launching or name in prog.triton_kernels:
                    continue
                if any(prog.launches_in(f.node) or (f.refs & launching) for f in fs):
                    launching.add(name)
                    grew = True
            if not grew:
                break
        return launching

    # -- what an expression does -------------------------------------------------------------
    def calls_kernel(self, node: ast.AST) -> bool:
        """A launch, a kernel build, or a call of a function that launches."""
        prog = self.prog
        if prog._makes_kernel(node):
            return True
        for sub in ast.walk(node):
            if isinstance(sub, ast.Subscript) and _last_name(sub.value) in prog.triton_kernels:
                return True
            if not isinstance(sub, ast.Call):
                continue
            fn = sub.func
            if isinstance(fn, ast.Attribute) and fn.attr in ("run", "warmup", "launch") and \
                    _last_name(fn.value) in prog.triton_kernels:
                return True
            if _super_call(fn):
                continue  # super().forward: the parent class's (PyTorch) forward
            if _last_name(fn) in self.launching:
                return True
            while isinstance(fn, ast.Attribute):  # ext.fn(...), self.ext.fn(...)
                fn = fn.value
                if _last_name(fn) in prog.handles:
                    return True
        return False

    def _torch_call(self, call: ast.Call) -> bool:
        fn = call.func
        if not isinstance(fn, ast.Attribute):
            return False
        root = _root_name(fn)
        full = self.prog.module_aliases.get(root or "", root or "")
        if root in _TORCH_ROOTS or full.split(".")[0] == "torch":
            return fn.attr not in _TORCH_NOT_COMPUTE
        return fn.attr in _TENSOR_COMPUTE

    def _local_impl(self, name: str) -> bool:
        """A function or class of the program that computes with PyTorch, launching nothing."""
        if name not in self._impl:
            self._impl[name] = False  # recursion guard
            nodes = [f.node for f in self.prog.funcs.get(name, [])]
            if name in self.prog.classes:
                nodes.append(self.prog.classes[name])
            self._impl[name] = any(self.fallback_value(n, _params(n)) for n in nodes)
        return self._impl[name]

    def _computes(self, node: ast.AST, params: set[str]) -> bool:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                name = _last_name(sub.func)
                if self._torch_call(sub) or _super_call(sub.func) or \
                        name in self.torch_objects:
                    return True
                if name and name not in self.launching and self._local_impl(name):
                    return True
            elif isinstance(sub, ast.BinOp) and isinstance(sub.op, ast.MatMult):
                return True
            elif isinstance(sub, (ast.BinOp, ast.UnaryOp)) and _referenced_names(sub) & params:
                return True
        return False

    def fallback_value(self, node: ast.AST | None, params: set[str]) -> bool:
        """`node` computes with PyTorch (or arithmetic on the function's tensors, or another
        local implementation, or `super().forward`) and launches no custom kernel."""
        return node is not None and not self.calls_kernel(node) and self._computes(node, params)

    # -- where the values go -----------------------------------------------------------------
    @staticmethod
    def _returned(scope: ast.AST, names: set[str]) -> bool:
        """The function returns one of `names`, directly or through later assignments."""
        tainted = set(names)
        for _ in range(4):
            before = len(tainted)
            for n in _walk_local(scope):
                targets, value = _assign_parts(n)
                if value is not None and _referenced_names(value) & tainted:
                    for t in targets:
                        tainted |= _target_names(t)
            if len(tainted) == before:
                break
        return any(isinstance(n, ast.Return) and n.value is not None and
                   _referenced_names(n.value) & tainted for n in _walk_local(scope))

    def _fallback_names(self, stmts: list, params: set[str]) -> set[str]:
        """Names the statements bind to a PyTorch value or a PyTorch implementation."""
        out = set()
        for st in stmts:
            for n in _walk_local(st):
                targets, value = _assign_parts(n)
                if value is not None and self.fallback_value(value, params | _params(value)):
                    for t in targets:
                        out |= _target_names(t)
                if isinstance(n, _FUNCS) and self.fallback_value(n, _params(n)):
                    out.add(n.name)
        return out

    def _block_falls_back(self, stmts: list, scope: ast.AST, params: set[str]) -> bool:
        """The statements return a PyTorch value, or compute one that forward gets."""
        if any(isinstance(n, ast.Return) and self.fallback_value(n.value, params)
               for st in stmts for n in _walk_local(st)):
            return True
        names = self._fallback_names(stmts, params)
        if not names:
            return False
        if id(scope) in self.reach_nodes:
            return self._returned(scope, names)
        # module level, __init__, a builder: a stand-in bound where forward looks it up
        if isinstance(scope, _FUNCS):
            names = {n for n in names if n not in _bound_locally(scope)}
        return bool(names & self.reach_names)

    def _flag_gates_fallback(self, flags: set[str]) -> bool:
        """The handler sets a flag (or clears the kernel) and forward branches on it to a
        PyTorch path: `except: ext = None` ... `if ext is None: return torch...`."""
        for f in self.reach_funcs:
            params = _params(f.node)
            local = set(flags)
            for n in _walk_local(f.node):  # `lib = _kernels()` where _kernels returns None
                targets, value = _assign_parts(n)
                if isinstance(value, ast.Call) and _last_name(value.func) in flags:
                    for t in targets:
                        local |= _target_names(t)
            for n in _walk_local(f.node):
                if isinstance(n, ast.IfExp) and _referenced_names(n.test) & local and (
                        self.fallback_value(n.body, params) or
                        self.fallback_value(n.orelse, params)):
                    return True
            for stmts in _stmt_lists(f.node):
                for i, st in enumerate(stmts):
                    if not (isinstance(st, ast.If) and _referenced_names(st.test) & local):
                        continue
                    rest = stmts[i + 1:] if _ends_flow(st.body) else []
                    if any(self._block_falls_back(b, f.node, params)
                           for b in (st.body, st.orelse + rest)):
                        return True
        return False

    def _swallowed(self, node, after: list, scope: ast.AST, params: set[str]) -> bool:
        """A handler that swallows the error lets a PyTorch value through: code after a try
        that returned, or a value computed before the try that the kernel's would replace."""
        if _ends_flow(node.body) and self._block_falls_back(after, scope, params):
            return True
        kernel_targets = set()
        for st in node.body:
            for n in _walk_local(st):
                targets, value = _assign_parts(n)
                if value is not None and self.calls_kernel(value):
                    for t in targets:
                        kernel_targets |= _target_names(t)
        inside = {id(n) for st in node.body for n in _walk_local(st)}
        earlier = set()
        for n in _walk_local(scope):
            targets, value = _assign_parts(n)
            if id(n) not in inside and value is not None and self.fallback_value(value, params):
                for t in targets:
                    earlier |= _target_names(t)
        hit = kernel_targets & earlier
        return bool(hit) and self._returned(scope, hit)

    # -- one try -----------------------------------------------------------------------------
    def try_falls_back(self, node, scope: ast.AST, after: list) -> bool:
        if not any(self.calls_kernel(st) for st in node.body):
            return False
        params = _params(scope)
        in_forward = id(scope) in self.reach_nodes
        for h in node.handlers:
            returns = [n for st in h.body for n in _walk_local(st) if isinstance(n, ast.Return)]
            if any(self.fallback_value(r.value, params) for r in returns):
                return True
            if isinstance(h.body[-1], ast.Raise):
                continue  # error handling: a better message, a log line, then the error
            if self._block_falls_back(h.body, scope, params):
                return True
            flags = _bound_names(h.body)
            if isinstance(scope, _FUNCS) and returns:
                flags.add(scope.name)  # `return None` from a builder: callers test the result
            if flags and self._flag_gates_fallback(flags):
                return True
            if in_forward and self._swallowed(node, after, scope, params):
                return True
        return False

    def found(self) -> bool:
        scopes = [self.prog.tree] + [f.node for fs in self.prog.funcs.values() for f in fs]
        for scope in scopes:
            for stmts in _stmt_lists(scope):
                for i, st in enumerate(stmts):
                    if isinstance(st, _TRIES) and st.handlers and \
                            self.try_falls_back(st, scope, stmts[i + 1:]):
                        return True
        return False


def _super_call(fn: ast.AST) -> bool:
    return isinstance(fn, ast.Attribute) and isinstance(fn.value, ast.Call) and \
        _last_name(fn.value.func) == "super"


def _bound_locally(fn: ast.AST) -> set[str]:
    """Plain names a function assigns that are its own locals (not declared global)."""
    glob = {n for sub in _walk_local(fn) if isinstance(sub, (ast.Global, ast.Nonlocal))
            for n in sub.names}
    local = {t.id for sub in _walk_local(fn) for t in _assign_parts(sub)[0]
             if isinstance(t, ast.Name)}
    return local - glob


def _try_fallbacks(prog: _Program, reach_funcs: list[_Func], reach_names: set[str]) -> bool:
    """A try/except whose handler falls back to another implementation of the kernel it
    tried, or a contextlib.suppress around a launch or a kernel build."""
    fb = _Fallbacks(prog, reach_funcs, reach_names)
    for node in ast.walk(prog.tree):
        if isinstance(node, (ast.With, ast.AsyncWith)) and any(
                "suppress" in _dotted(i.context_expr) for i in node.items) and \
                any(fb.calls_kernel(st) for st in node.body):
            return True
    return fb.found()


def static_findings(kernel_code: str | None, pytorch_code: str | None = None
                    ) -> list[tuple[str, str]]:
    """Every static gate that fails or warns on this candidate, as (reason, severity)."""
    if not kernel_code or not kernel_code.strip():
        return [("no_kernel_code", FAIL)]
    try:
        tree = pyast.parse(kernel_code)
    except SyntaxError as exc:
        return [(f"syntax_error:line{exc.lineno}", FAIL)]
    prog = _Program(tree, kernel_code)
    kernel_code = _code_text(tree) or kernel_code
    out: list[tuple[str, str]] = []

    def add(reason, sev):
        if (reason, sev) not in out:
            out.append((reason, sev))

    strings = _string_constants(tree)
    cuda_kernels = _CUDA_KERNEL.search(strings) is not None
    has_kernels = bool(prog.triton_kernels or prog.handles)
    cls = prog.entry_class()
    forwards = [f for f in prog.funcs.get("forward", []) if f.owner == cls] if cls else []
    if cls is None or not forwards:
        add("no_model_new", FAIL)
        reach_funcs, reach_names = [], set()
    else:
        reach_funcs, reach_names = prog.reachable(forwards)

    launched = set()
    for f in reach_funcs:
        launched |= prog.launches_in(f.node)
    launched |= reach_names & prog.handles
    if not has_kernels:
        add("no_custom_kernel", FAIL)
        add("torch_in_forward", FAIL)
    elif forwards and not launched:
        add("kernel_not_called", FAIL)
        add("torch_in_forward", FAIL)
    elif forwards:
        # kernels defined and launched: those never launched from anywhere are dead code
        used_anywhere = set()
        for fs in prog.funcs.values():
            for f in fs:
                if f.name not in prog.triton_kernels:
                    used_anywhere |= prog.launches_in(f.node)
        called_by_kernels = set()
        for k in prog.triton_kernels:
            for f in prog.funcs.get(k, []):
                called_by_kernels |= f.refs
        dead = sorted(prog.triton_kernels - used_anywhere - called_by_kernels - launched)
        for k in dead:
            add(f"kernel_unused:{k}", WARN)

    # an extension whose C++/CUDA source holds no kernel of its own is PyTorch in disguise
    if prog.handles and not prog.triton_kernels:
        uses_cuda = "load_inline" in kernel_code or "cpp_extension" in kernel_code
        if uses_cuda and "cuda_sources" in kernel_code and not cuda_kernels:
            add("extension_without_kernel", FAIL)
            add("torch_in_forward", FAIL)
        if _TORCH_IN_EXTENSION.search(strings):
            add("torch_ops_in_extension", WARN)

    if _try_fallbacks(prog, reach_funcs, reach_names):
        add("try_except_fallback", FAIL)

    builds_native = 'extern "C"' in strings
    for r in _harness_access(prog, builds_native):
        add(r, FAIL)
    if builds_native and re.search(r"\bsubprocess\b", kernel_code):
        add("builds_with_subprocess", WARN)
    if builds_native and re.search(r"\bctypes\b", kernel_code):
        add("ctypes_loader", WARN)

    # torch.compile inside the candidate: the kernel would be generated at run time, not shipped
    if re.search(r"torch\.compile\s*\(|torch\._dynamo\.optimize|\bcompile_fx\b", kernel_code):
        add("torch_compile_in_candidate", FAIL)

    # reduced precision inside a float32 program
    ref_low = bool(pytorch_code and _REF_LOW_PRECISION.search(pytorch_code))
    if not ref_low:
        if _REDUCED_PRECISION.search(kernel_code):
            add("half_precision", FAIL)
        if _TF32.search(kernel_code):
            add("tf32", WARN)

    # work on a side stream that is never joined back to the caller's stream
    if _SIDE_STREAM.search(kernel_code):
        if _STREAM_JOIN.search(kernel_code):
            add("side_stream", WARN)
        else:
            add("side_stream_unsynced", FAIL)

    # library calls that honest generated code makes: reasons, not rejections
    if "extern_kernels" in _referenced_names(tree):
        add("extern_kernels", WARN)
    torch_ops = set()
    for f in reach_funcs:
        if f.name in prog.triton_kernels:
            continue
        for sub in ast.walk(f.node):
            if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and \
                    sub.func.attr in _TORCH_COMPUTE and _root_name(sub.func) in (
                        "torch", "F", "nn", "functional", "aten", "self", "x"):
                torch_ops.add(sub.func.attr)
    if torch_ops and has_kernels:
        add("torch_ops_in_forward", WARN)
    return out


def failed(findings: list[tuple[str, str]]) -> list[str]:
    return [r for r, s in findings if s == FAIL]


def warned(findings: list[tuple[str, str]]) -> list[str]:
    return [r for r, s in findings if s == WARN]
