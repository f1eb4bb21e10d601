"""Turn inductor's output code plus the records of its compiled run into a standalone candidate.

The candidate is a KernelBench-format program: the reference program embedded verbatim (so that
`ModelNew(Model)` builds the very same parameters from the same seed), every kernel's source in
the file, the body of inductor's `call(args)` rewritten into plain Python, and `ModelNew.forward`
that fills `call`'s argument slots in the graph's own order (recorded at run time by object
identity, never by matching shapes). Backend-specific parts live in rewrite_triton / rewrite_cpp.
"""

from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass, field
from curate import pyast


class RewriteError(Exception):
    """The output code uses something the rewrite cannot make standalone; `reason` says what."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


@dataclass
class Parsed:
    """The parts of one inductor output module."""

    triton: dict[str, str] = field(default_factory=dict)  # kernel name -> module source
    cpp: dict[str, tuple[list[str], str]] = field(default_factory=dict)  # name -> (argtypes, src)
    call: ast.FunctionDef | None = None


def _const_str(node) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def parse_output_code(code: str) -> Parsed:
    """Find the kernels (`async_compile.triton/cpp_pybinding`) and the `call` function."""
    tree = pyast.parse(code)
    p = Parsed()
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call):
            func = ast.unparse(node.value.func)
            name = node.targets[0].id
            args = node.value.args
            if func == "async_compile.triton":
                src = _const_str(args[1]) if len(args) > 1 else None
                if src is None:
                    raise RewriteError("synth:unsupported_kernel", f"{name}: no inline source")
                p.triton[name] = src
            elif func == "async_compile.cpp_pybinding":
                types = ast.literal_eval(args[0])
                src = _const_str(args[1])
                if src is None:
                    raise RewriteError("synth:unsupported_kernel", f"{name}: no inline source")
                p.cpp[name] = (list(types), src)
            elif func.startswith("async_compile."):
                raise RewriteError(f"synth:unsupported_kernel:{func.split('.', 1)[1]}", name)
        if isinstance(node, ast.FunctionDef) and node.name == "call":
            p.call = node
        if isinstance(node, ast.ClassDef) and node.name == "Runner":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "call":
                    p.call = item
    if p.call is None:
        raise RewriteError("synth:no_call", "no call(args) in the output code")
    return p


# -- the call body ---------------------------------------------------------------------------

_DROP_CALLS = {"assert_size_stride", "assert_alignment", "torch.cuda.set_device",
               "torch.cuda.synchronize", "args.clear", "run_intermediate_hooks",
               "torch.cpu._DeviceGuard", "start_graph", "end_graph"}
# names the standalone program provides (anything else in `call` is unsupported)
PROVIDED = {"torch", "math", "aten", "extern_kernels", "reinterpret_tensor", "empty_strided",
            "args", "device", "inf", "nan", "int", "float", "bool", "len", "range", "tuple", "list", "max", "min",
            "divmod", "abs", "round", "str", "print", "isinstance", "slice", "None", "True",
            "False", "sum", "zip", "enumerate", "dict", "getattr"}


class CallRewriter(ast.NodeTransformer):
    """Rewrite `call`'s statements; `launch(kernel_name, call_node)` handles `K.run(...)`."""

    def __init__(self, kernels: set[str], launch, cpp_kernels: set[str]):
        self.kernels, self.launch, self.cpp_kernels = kernels, launch, cpp_kernels
        self.reasons: list[str] = []

    def _drop(self, stmt) -> bool:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            return ast.unparse(stmt.value.func) in _DROP_CALLS
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call):
            return ast.unparse(stmt.value.func) in ("get_raw_stream",)
        return False

    def body(self, stmts: list[ast.stmt]) -> list[ast.stmt]:
        out = []
        for s in stmts:
            if self._drop(s):
                continue
            if isinstance(s, ast.With) and len(s.items) == 1 and \
                    "_DeviceGuard" in ast.unparse(s.items[0].context_expr):
                out.extend(self.body(s.body))
                continue
            s = self.visit(s)
            for name in ("body", "orelse"):  # nested blocks (rare in call bodies)
                if hasattr(s, name) and isinstance(getattr(s, name), list):
                    setattr(s, name, self.body(getattr(s, name)) or [ast.Pass()])
            out.append(s)
        return out

    def visit_Call(self, node: ast.Call):
        self.generic_visit(node)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr == "run" and isinstance(f.value, ast.Name) \
                and f.value.id in self.kernels:
            return self.launch(f.value.id, node)
        fname = ast.unparse(f)
        if fname in ("empty_strided_cuda", "empty_strided_cpu", "empty_strided_xpu",
                     "empty_strided_cpu_pinned"):
            dev = ast.Name("device", ast.Load()) if fname != "empty_strided_cpu" \
                else ast.Constant("cpu")
            args = list(node.args)
            kw = list(node.keywords)
            if len(args) >= 3:
                kw.append(ast.keyword("dtype", args[2]))
                args = args[:2]
            kw.append(ast.keyword("device", dev))
            return ast.Call(ast.Name("empty_strided", ast.Load()), args, kw)
        if fname.startswith("extern_kernels."):
            self.reasons.append(f"extern_kernels:{f.attr}")
        elif fname.startswith(("aten.", "torch.ops.aten.")):
            op = fname.split("aten.", 1)[1].split(".")[0]
            self.reasons.append(f"fallback:aten.{op}")
        return node


def rewrite_call(call: ast.FunctionDef, kernels: set[str], cpp_kernels: set[str], launch
                 ) -> tuple[str, list[str]]:
    """`def call(args, device)` as source, plus reasons (extern kernels and fallbacks used)."""
    rw = CallRewriter(kernels, launch, cpp_kernels)
    body = rw.body(list(call.body))
    fn = ast.FunctionDef(name="call", args=ast.arguments(
        posonlyargs=[], args=[ast.arg("args"), ast.arg("device")], kwonlyargs=[], kw_defaults=[],
        defaults=[]), body=body, decorator_list=[], returns=None, type_params=[])
    fn = ast.fix_missing_locations(ast.Module(body=[fn], type_ignores=[]))
    src = ast.unparse(fn)
    # every free name must be something the program defines
    assigned = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    loads = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unknown = sorted(loads - assigned - PROVIDED - kernels - cpp_kernels)
    if unknown:
        raise RewriteError("synth:unsupported_wrapper", ", ".join(unknown))
    reasons = list(dict.fromkeys(rw.reasons))
    return src, reasons


# -- ModelNew --------------------------------------------------------------------------------

def _attr_path(prefix: str, dotted: str, kind: str) -> str:
    parts = dotted.split(".")
    if all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
        return prefix + "." + dotted
    getter = "get_parameter" if kind == "param" else "get_buffer"
    return f"{prefix}.{getter}({dotted!r})"


def forward_source(slots: list[dict], outputs: list[dict], structure: str) -> str:
    """`ModelNew.forward`: fill call's slots in the graph's order, pick the outputs."""
    items = []
    for s in slots:
        k = s["kind"]
        if k == "input":
            items.append(f"inputs[{s['index']}]")
        elif k in ("param", "buffer"):
            items.append(_attr_path("self", s["name"], k))
        elif k == "scalar_input":
            dt = s.get("dtype", "torch.float32")
            items.append(f"torch.tensor(inputs[{s['index']}], dtype={dt})")
        elif k == "const":
            items.append(repr(s["value"]))
        else:
            raise RewriteError("synth:unwired_input", f"slot kind {k}")
    picks = []
    for o in outputs:
        picks.append(f"outs[{o['index']}]" if o["kind"] == "call_output" else f"args[{o['index']}]")
    if structure == "tensor":
        ret = picks[0]
    elif structure.startswith("tuple"):
        ret = "(" + ", ".join(picks) + ("," if len(picks) == 1 else "") + ")"
    else:
        ret = "[" + ", ".join(picks) + "]"
    lines = ["    def forward(self, *inputs):",
             "        # call()'s argument slots in the compiled graph's own order",
             "        args = [" + ", ".join(items) + "]",
             "        device = next((a.device for a in args if isinstance(a, torch.Tensor)), "
             "torch.device('cpu'))",
             "        with torch.no_grad():",
             "            outs = call(list(args), device)",
             f"        return {ret}"]
    return "\n".join(lines) + "\n"


HELPERS = '''
from math import inf, nan  # noqa: E402,F401  (inductor's output code may spell constants so)

aten = torch.ops.aten


def empty_strided(size, stride, *, dtype, device):
    """Buffers live on the inputs' device (so the same program runs on CPU tensors too)."""
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


def reinterpret_tensor(t, size, stride, offset_increment=0):
    """A view of `t`'s storage with the given size and stride (inductor's reinterpret_tensor)."""
    return torch.as_strided(t, size, stride, t.storage_offset() + offset_increment)


class extern_kernels:
    """Library calls inductor left to cuBLAS/cuDNN (or MKL/oneDNN on the CPU): plain torch ops."""

    mm = staticmethod(torch.mm)
    bmm = staticmethod(torch.bmm)
    addmm = staticmethod(torch.addmm)
    baddbmm = staticmethod(torch.baddbmm)
    _int_mm = staticmethod(torch._int_mm)

    @staticmethod
    def convolution(input, weight, bias=None, stride=(1,), padding=(0,), dilation=(1,),
                    transposed=False, output_padding=(0,), groups=1):
        return torch.convolution(input, weight, bias, stride, padding, dilation, transposed,
                                 output_padding, groups)

    @staticmethod
    def bias_addmm(inp, mat1, mat2, *, out=None, alpha=1, beta=1):
        if (inp.stride(0) == 0 and inp.size(0) != 0) or inp.size(0) == 1:
            inp = inp[0]
        return torch.addmm(inp, mat1, mat2, out=out, alpha=alpha, beta=beta)

    @staticmethod
    def _mm_plus_mm(a, b, c, d, out):
        torch.mm(a, b, out=out)
        out.addmm_(c, d)
        return out
'''


def strip_reference_main(code: str) -> str:
    """The reference as embedded: unchanged except a trailing `if __name__ == "__main__"` block."""
    tree = pyast.parse(code)
    for node in tree.body:
        if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
            lines = code.splitlines(keepends=True)
            return "".join(lines[:node.lineno - 1]).rstrip() + "\n"
    return code.rstrip() + "\n"


def extern_names(call_src: str) -> list[str]:
    return sorted(set(re.findall(r"extern_kernels\.(\w+)", call_src)))
