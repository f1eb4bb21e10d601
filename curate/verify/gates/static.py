"""Static gates: read the candidate program's AST (never run it) and name what looks deceptive.

`static_findings(kernel_code, pytorch_code)` returns `Finding`s (curate.verify.findings) whose
severity is the gate table's: "fail" makes the row `deceptive`, "warn" records the reason and
lets it verify. It runs in the parent before a row is dispatched to a worker, so it must be cheap
and must never execute the code. Each gate is one `check_x(candidate) -> list[Finding]` in
`STATIC_CHECKS`; the AST model is program.py, the harness-access gate access.py and the
try/except fallback gate fallbacks.py.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from curate import pyast

from ..findings import Finding, finding
from .access import harness_access
from .fallbacks import TORCH_COMPUTE, try_fallbacks
from .program import Func, Program, code_text, referenced_names, root_name, string_constants

FAIL, WARN = "fail", "warn"

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
_TORCH_IN_EXTENSION = re.compile(
    r"\b(torch|at)::(matmul|mm|bmm|addmm|conv\w*|linear|softmax|log_softmax|layer_norm|"
    r"batch_norm|group_norm|relu|gelu|sigmoid|tanh|exp|sum|mean|max_pool\w*|avg_pool\w*|"
    r"einsum|baddbmm|cross_entropy|mse_loss|scaled_dot_product_attention)\s*\(")
_TORCH_COMPILE = re.compile(r"torch\.compile\s*\(|torch\._dynamo\.optimize|\bcompile_fx\b")


@dataclass
class Candidate:
    """One candidate as the gates read it: its program model, its text without comments and
    docstrings, its string constants (CUDA/C++ sources), and what forward reaches."""

    prog: Program
    text: str
    strings: str
    pytorch_code: str | None
    forwards: list[Func]
    reach_funcs: list[Func]
    reach_names: set[str]

    @classmethod
    def read(cls, tree: ast.Module, code: str, pytorch_code: str | None) -> Candidate:
        prog = Program(tree, code)
        entry = prog.entry_class()
        forwards = [f for f in prog.funcs.get("forward", []) if f.owner == entry] if entry else []
        reach_funcs, reach_names = prog.reachable(forwards) if forwards else ([], set())
        return cls(prog, code_text(tree) or code, string_constants(tree), pytorch_code,
                   forwards, reach_funcs, reach_names)

    @property
    def has_kernels(self) -> bool:
        return bool(self.prog.triton_kernels or self.prog.handles)

    @property
    def builds_native(self) -> bool:
        return 'extern "C"' in self.strings

    def launched(self) -> set[str]:
        hits = self.reach_names & self.prog.handles
        for f in self.reach_funcs:
            hits |= self.prog.launches_in(f.node)
        return hits


# -- the gates: one function each, in the order their reasons are listed ------------------------

def check_entry(c: Candidate) -> list[Finding]:
    return [] if c.forwards else [finding("no_model_new")]


def check_kernels(c: Candidate) -> list[Finding]:
    """Kernels defined and launched from forward; those launched from nowhere are dead code."""
    prog = c.prog
    if not c.has_kernels:
        return [finding("no_custom_kernel"), finding("torch_in_forward")]
    if not c.forwards:
        return []
    launched = c.launched()
    if not launched:
        return [finding("kernel_not_called"), finding("torch_in_forward")]
    used = set(launched)
    for fs in prog.funcs.values():
        for f in fs:
            if f.name not in prog.triton_kernels:
                used |= prog.launches_in(f.node)
    for k in prog.triton_kernels:
        for f in prog.funcs.get(k, []):
            used |= f.refs  # a helper called from a kernel
    return [finding(f"kernel_unused:{k}") for k in sorted(prog.triton_kernels - used)]


def check_extension(c: Candidate) -> list[Finding]:
    """An extension whose C++/CUDA source holds no kernel of its own is PyTorch in disguise."""
    if not c.prog.handles or c.prog.triton_kernels:
        return []
    out = []
    uses_cuda = "load_inline" in c.text or "cpp_extension" in c.text
    if uses_cuda and "cuda_sources" in c.text and not _CUDA_KERNEL.search(c.strings):
        out += [finding("extension_without_kernel"), finding("torch_in_forward")]
    if _TORCH_IN_EXTENSION.search(c.strings):
        out.append(finding("torch_ops_in_extension"))
    return out


def check_fallbacks(c: Candidate) -> list[Finding]:
    hit = try_fallbacks(c.prog, c.reach_funcs, c.reach_names)
    return [finding("try_except_fallback")] if hit else []


def check_harness_access(c: Candidate) -> list[Finding]:
    return [finding(r) for r in harness_access(c.prog, c.builds_native)]


def check_native_build(c: Candidate) -> list[Finding]:
    """A program with its own C kernels may compile them in a subprocess and load them with
    ctypes: recorded, not rejected."""
    if not c.builds_native:
        return []
    out = []
    if re.search(r"\bsubprocess\b", c.text):
        out.append(finding("builds_with_subprocess"))
    if re.search(r"\bctypes\b", c.text):
        out.append(finding("ctypes_loader"))
    return out


def check_torch_compile(c: Candidate) -> list[Finding]:
    """The kernel would be generated at run time, not shipped."""
    return [finding("torch_compile_in_candidate")] if _TORCH_COMPILE.search(c.text) else []


def check_precision(c: Candidate) -> list[Finding]:
    """Reduced precision inside a float32 program (a half reference may use half)."""
    if c.pytorch_code and _REF_LOW_PRECISION.search(c.pytorch_code):
        return []
    out = []
    if _REDUCED_PRECISION.search(c.text):
        out.append(finding("half_precision"))
    if _TF32.search(c.text):
        out.append(finding("tf32"))
    return out


def check_side_stream(c: Candidate) -> list[Finding]:
    """Work on a side stream that is never joined back to the caller's stream."""
    if not _SIDE_STREAM.search(c.text):
        return []
    return [finding("side_stream" if _STREAM_JOIN.search(c.text) else "side_stream_unsynced")]


def check_library_calls(c: Candidate) -> list[Finding]:
    """Library calls that honest generated code makes: reasons, not rejections."""
    out = []
    if "extern_kernels" in referenced_names(c.prog.tree):
        out.append(finding("extern_kernels"))
    if c.has_kernels and any(_torch_op(sub) for f in c.reach_funcs
                             if f.name not in c.prog.triton_kernels for sub in ast.walk(f.node)):
        out.append(finding("torch_ops_in_forward"))
    return out


def _torch_op(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr in TORCH_COMPUTE and root_name(node.func) in (
            "torch", "F", "nn", "functional", "aten", "self", "x")


STATIC_CHECKS = (check_entry, check_kernels, check_extension, check_fallbacks,
                 check_harness_access, check_native_build, check_torch_compile,
                 check_precision, check_side_stream, check_library_calls)


def static_findings(kernel_code: str | None, pytorch_code: str | None = None) -> list[Finding]:
    """Every static gate that fails or warns on this candidate, each reason once."""
    if not kernel_code or not kernel_code.strip():
        return [finding("no_kernel_code")]
    try:
        tree = pyast.parse(kernel_code)
    except SyntaxError as exc:
        return [finding(f"syntax_error:line{exc.lineno}")]
    candidate = Candidate.read(tree, kernel_code, pytorch_code)
    out: list[Finding] = []
    for check in STATIC_CHECKS:
        out += [f for f in check(candidate) if f not in out]
    return out


def failed(findings: list[Finding]) -> list[str]:
    return [f.reason for f in findings if f.severity == FAIL]


def warned(findings: list[Finding]) -> list[str]:
    return [f.reason for f in findings if f.severity == WARN]
