"""Gates against deceptive kernels (curate/verify/gates) and the sandbox's confinement.

Static gates are checked on every fixture (both backends); dynamic gates run hostile Triton
fixtures under the Triton interpreter in a sandboxed worker; a few fixtures go through the whole
`verify` harness; confinement tests need Landlock (Linux >= 5.13) and skip where it is missing.
CUDA fixtures run on the GPU machine (benchmarks/hostile_table.py --device cuda).
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch

from curate.isolation import Limits, WorkerPool, confine
from curate.verify.gates.static import failed, static_findings, warned
from curate.verify.worker.gates import candidate, ghost

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
SPEC = json.loads((HOSTILE / "cases.json").read_text())
REFS = {k: (HOSTILE / v).read_text() for k, v in SPEC["references"].items()}
CASES = {c["case"]: c for c in SPEC["cases"]}

# what the static gates alone must say about each case (a prefix of a failing reason)
STATIC = {
    "pure_pytorch": "no_custom_kernel", "torch_forward": "kernel_not_called",
    "try_fallback": "try_except_fallback", "patched_timer": "timer_patched:",
    "patch_compare": "harness_access:patch:", "half_precision": "half_precision",
    "gc_reference": "harness_access:gc", "gc_obfuscated": "harness_access:dynamic_code",
    "frame_inspect": "harness_access:frames", "side_stream": "side_stream_unsynced",
    "extension_torch": "extension_without_kernel",
    "forge_results": "harness_access:threading", "starve_reference": "harness_access:threading",
}


def fixture(backend: str, case: str) -> tuple[str, str]:
    return (HOSTILE / backend / f"{case}.py").read_text(), REFS[CASES[case]["ref"]]


def all_fixtures():
    for backend in ("triton", "cuda"):
        for f in sorted((HOSTILE / backend).glob("*.py")):
            yield backend, f.stem


# -- static gates ------------------------------------------------------------------------------

@pytest.mark.parametrize("backend,case", [(b, c) for b, c in all_fixtures() if c in STATIC])
def test_static_gates_fail_each_statically_visible_case(backend, case):
    code, ref = fixture(backend, case)
    fails = failed(static_findings(code, ref))
    assert any(r.startswith(STATIC[case]) for r in fails), fails


@pytest.mark.parametrize("backend,case", [(b, c) for b, c in all_fixtures()
                                          if c.startswith("honest")])
def test_static_gates_pass_honest_fixtures(backend, case):
    code, ref = fixture(backend, case)
    assert failed(static_findings(code, ref)) == []


INDUCTOR_LIKE = '''
from ctypes import c_void_p, c_long, c_int
import torch
import os
import tempfile
from torch._inductor.async_compile import AsyncCompile
from torch._inductor.select_algorithm import extern_kernels
async_compile = AsyncCompile()
cpp_fused_relu_0 = async_compile.cpp_pybinding(['const float*', 'float*'], r"""
extern "C" void kernel(const float* in_ptr0, float* out_ptr0) { out_ptr0[0] = in_ptr0[0]; }
""")
async_compile.wait(globals())
del async_compile


class Runner:
    def call(self, args):
        arg0_1, = args
        args.clear()
        buf0 = torch.empty_like(arg0_1)
        extern_kernels.mm(arg0_1, arg0_1, out=buf0)
        buf1 = torch.empty_like(arg0_1)
        cpp_fused_relu_0(buf0, buf1)
        return (buf1, )


runner = Runner()
call = runner.call


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return call([x])[0]
'''


def test_inductor_shaped_cpp_program_passes_with_extern_kernels_as_a_warning():
    found = static_findings(INDUCTOR_LIKE, "import torch\n")
    assert failed(found) == []
    assert "extern_kernels" in warned(found)


@pytest.mark.parametrize("snippet,reason", [
    ("from ctypes import CDLL\n", "harness_access:ctypes"),
    ("import inspect\n", "harness_access:inspect"),
    ("import builtins\n", "harness_access:builtins"),
    ("import subprocess\n", "harness_access:process"),
    ("import socket\n", "harness_access:network"),
    ("import sys\nf = sys._getframe\n", "harness_access:frames"),
    ("import inspect\nf = inspect.stack\n", "harness_access:frames"),
    ("import time\nsetattr(time, 'perf_counter', lambda: 0.0)\n", "timer_patched:time"),
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n", "harness_access:patch:"),
    ("x = eval('1')\n", "harness_access:dynamic_code"),
    ("import torch\nf = torch.compile(lambda x: x)\n", "torch_compile_in_candidate"),
])
def test_static_gates_name_each_kind_of_harness_access(snippet, reason):
    code = snippet + (HOSTILE / "triton" / "honest_swish_add.py").read_text()
    assert any(r.startswith(reason) for r in failed(static_findings(code, REFS["swish"])))


# the ways in from the candidate's own process: harness modules, frames, threads, descriptors
_NATIVE_DUP = 'SRC = """\n#include <unistd.h>\nvoid f() { dup2(3, 4); }\n"""\n'
_NATIVE_THREAD = 'SRC = """\n#include <thread>\nvoid f() { std::thread t(g); }\n"""\n'
HOLES = [
    ("import torch\ng = torch.sys.modules['curate.verify.gates.dynamic']\n", "harness_access:sys"),
    ("import numpy as np\nm = np.sys.modules\n", "harness_access:sys"),
    ("import sys as s\nm = s.modules\n", "harness_access:sys"),
    ("import torch\nm = getattr(torch, 'sys')\n", "harness_access:sys"),
    ("import torch\nm = vars(torch)['sys']\n", "harness_access:sys"),
    ("from importlib import import_module\nm = import_module('cur' + 'ate')\n",
     "harness_access:importlib"),
    ("import torch\nm = torch.importlib.import_module(''.join(['g', 'c']))\n",
     "harness_access:importlib"),
    ("import curate.verify.gates.dynamic\n", "harness_access:harness"),
    ("import torch\nf = torch.sys._current_frames()\n", "harness_access:frames"),
    ("import traceback\nf = list(traceback.walk_stack(None))\n", "harness_access:frames"),
    ("def f(e):\n    return e.__traceback__.tb_frame.f_back.f_locals\n",
     "harness_access:frames"),
    ("def f(fr):\n    return fr.f_globals\n", "harness_access:frames"),
    ("import torch\nobjs = torch.gc.get_objects()\n", "harness_access:gc"),
    ("def f(m):\n    return m.get_referrers\n", "harness_access:gc"),
    ("import threading\nthreading.Thread(target=print).start()\n", "harness_access:threading"),
    ("import _thread\n_thread.start_new_thread(print, ())\n", "harness_access:threading"),
    ("import torch\nt = torch.threading.Thread\n", "harness_access:threading"),
    ("import os\nos.dup2(5, 6)\n", "harness_access:fd"),
    ("import os\nf = os.fdopen(7, 'wb')\n", "harness_access:fd"),
    ("import os\nos.write(4, b'{}')\n", "harness_access:fd"),
    ("from os import read\nx = read(3, 10)\n", "harness_access:fd"),
    ("import os\nr, w = os.pipe()\n", "harness_access:fd"),
    ("import os\nfds = os.listdir('/proc/self/fd')\n", "harness_access:fd"),
    ("f = open(4, 'wb', closefd=False)\n", "harness_access:fd"),
    ("import torch\ntorch.os.write(4, b'x')\n", "harness_access:fd"),
    (_NATIVE_DUP, "harness_access:fd"),
    (_NATIVE_THREAD, "harness_access:threading"),
]


@pytest.mark.parametrize("snippet,reason", HOLES)
def test_static_gates_close_the_ways_into_the_worker(snippet, reason):
    code = snippet + (HOSTILE / "triton" / "honest_swish_add.py").read_text()
    assert reason in failed(static_findings(code, REFS["swish"]))


def test_every_static_reason_is_a_gate_of_the_table():
    """Severity and status come from findings.GATES: a reason outside it would be a worker
    finding by default."""
    from curate.verify.findings import GATES
    codes = [(HOSTILE / b / f"{c}.py").read_text() for b, c in all_fixtures()]
    codes += [s + "pass\n" for s, _ in HOLES] + ["", "def (:\n"]
    for code in codes:
        for f in static_findings(code, REFS["swish"]):
            assert f.gate in GATES and f.severity == GATES[f.gate].severity, f


def test_the_static_gates_load_nothing_that_runs_in_the_worker():
    """The parent reads the code with the static gates alone: their modules import, at module
    level, only the standard library's parsing tools, the finding type and each other (checks.py
    and the dynamic gates load only when verify's hooks ask for their lists)."""
    import ast
    allowed = {"__future__", "ast", "copy", "re", "dataclasses", "curate", "curate.pyast",
               "findings", "program", "access", "fallbacks", "static"}
    gates = ROOT / "curate" / "verify" / "gates"
    for name in ("__init__", "static", "program", "access", "fallbacks"):
        tree = ast.parse((gates / f"{name}.py").read_text())
        for node in tree.body:
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                mods = [node.module or ""] if node.module else [a.name for a in node.names]
            else:
                continue
            assert set(mods) <= allowed, (name, mods)


def test_static_gates_leave_harmless_idioms_alone():
    honest = (HOSTILE / "triton" / "honest_swish_add.py").read_text()
    code = ("import os\nos.environ['TORCH_CUDA_ARCH_LIST'] = '9.0'\n"
            "try:\n    import numpy as np\nexcept ImportError:\n    np = None\n"
            "# fp16 would be faster, but this program stays in float32\n"
            # inductor's SwinV2 output builds its coordinate tables with torch.stack
            "import torch\ncoords = torch.stack([torch.arange(4), torch.arange(4)])\n"
            # error reporting, files by name, nn.modules, a docstring that names a pipe
            "import traceback\nimport sys\nimport os\n"
            "def report(e):\n    traceback.print_exc()\n    print(e, file=sys.stderr)\n"
            "def save(path, text):\n    \"\"\"Written once: no dup2() or pipe() here.\n    \"\"\"\n"
            "    os.makedirs(os.path.dirname(path), exist_ok=True)\n"
            "    with open(path, 'w') as fh:\n        fh.write(text)\n"
            "layers = torch.nn.modules.Linear\nMODE = 'read'\n") + honest
    assert failed(static_findings(code, REFS["swish"])) == []
    # half precision is the program's own when the reference is a half program
    half = (HOSTILE / "triton" / "half_precision.py").read_text()
    assert "half_precision" not in failed(static_findings(half, REFS["swish"].replace(
        "torch.randn(64, 256)", "torch.randn(64, 256).half()")))


def test_a_dead_kernel_beside_a_live_one_is_a_warning():
    code = (HOSTILE / "triton" / "honest_swish_add.py").read_text() + '''

@triton.jit
def unused_kernel(x_ptr):
    pass
'''
    found = static_findings(code, REFS["swish"])
    assert failed(found) == [] and "kernel_unused:unused_kernel" in warned(found)


# -- reference degeneracy ----------------------------------------------------------------------

def test_degeneracy_names_constant_and_tiny_references():
    from tests.support.gates_handlers import reference_findings
    x = [torch.randn(8, 8) for _ in range(3)]
    const = [torch.ones(8, 8) for _ in x]
    assert ("reference_ignores_inputs", "fail") in reference_findings(const)
    # all-zeros passes the verdict's elementwise band here but not its relative-norm bound (the
    # judge's check uses the verdict's comparison, not degeneracy_findings' band alone)
    tiny = [t * 1e-7 for t in x]
    assert ("reference_mostly_below_tolerance", "warn") in reference_findings(tiny)
    zeros = [torch.zeros(8, 8) for _ in x]
    assert ("reference_zero_passes_tolerance", "fail") in reference_findings(zeros)
    assert reference_findings(x) == []
    # nearly every element below the tolerance, a few above: a warning only
    most = [torch.cat([torch.randn(1000) * 1e-7, torch.full((1,), i + 1.0)]) for i in range(3)]
    assert reference_findings(most) == [("reference_mostly_below_tolerance", "warn")]


def test_judge_degeneracy_check_uses_the_verdicts_comparison():
    from curate.verify.worker.gates.degeneracy import ReferenceDegeneracy
    from curate.verify.worker.hooks import CheckContext

    def flags(outs):
        ctx = CheckContext(role="judge", device="cpu", backend="triton", pytorch_code="",
                           kernel_code="", ref_outputs=outs)
        ReferenceDegeneracy().after_reference(ctx)
        return {f.reason: f.status for f in ctx.findings}

    assert flags([[torch.zeros(4, 4)], [torch.zeros(4, 4)]]) == {
        "reference_ignores_inputs": "degenerate_reference",
        "reference_zero_passes_tolerance": "degenerate_reference"}
    assert flags([[torch.randn(4, 4)], [torch.randn(4, 4)]]) == {}


def test_a_mean_loss_is_not_degenerate_whatever_the_runs_secret():
    """A mean over many random elements (a loss) gives nearly the same output for every trial
    set, within the verdict's tolerance; only a scaled call tells it from a constant. Every
    run's calls hold one, at a scale that moves such an output past the tolerance, so the
    verdict does not depend on the secret (it once did: a bundled loss example flipped between
    `verified` and `degenerate_reference` from run to run)."""
    import random

    from curate.verify.correctness import correctness_calls
    from curate.verify.worker.gates.degeneracy import ReferenceDegeneracy
    from curate.verify.worker.hooks import CheckContext

    g = torch.Generator().manual_seed(0)
    sets = [torch.randn(1 << 16, generator=g) for _ in range(3)]
    poked = sets[0].clone()
    poked[7] += 1.0
    sets.append(poked)

    def loss(x):
        return (x * x).mean() + 10.0   # 11 within about 1e-5 for every set

    assert all(abs(loss(x) - loss(sets[0])) / loss(sets[0]) < 1e-3 for x in sets)
    for i in range(64):
        calls = correctness_calls(random.Random(f"{i:032x}:row"), trials=3)
        assert any(scale != 1.0 for _, scale in calls), calls
        outs = [[loss(sets[k] * scale)] for k, scale in calls]
        ctx = CheckContext(role="judge", device="cpu", backend="triton", pytorch_code="",
                           kernel_code="", ref_outputs=outs)
        ReferenceDegeneracy().after_reference(ctx)
        assert ctx.findings == [], (calls, ctx.findings)


def test_degeneracy_zero_rule_is_the_verdicts_comparison_against_zeros():
    """The judge's streaming zero check answers as compare(output, zeros) would, for every
    dtype the tolerances name (it relies on their relative-norm bounds being below 1)."""
    from curate.verify.worker.compare import CHUNK, DEFAULT_TOL, TOLERANCES, compare
    from curate.verify.worker.gates.degeneracy import below_tolerance, zero_passes
    assert all(bound < 1 for _, _, bound in [*TOLERANCES.values(), DEFAULT_TOL])
    cases = [torch.zeros(5, 3), torch.randn(5, 3), torch.full((4,), 1e-7), -torch.zeros(3),
             torch.tensor([0.0, float("nan")]), torch.tensor([0.0, float("inf")]),
             torch.zeros(4, dtype=torch.int64), torch.tensor([0, 2]), torch.zeros(0),
             torch.zeros(3, dtype=torch.float16), torch.tensor([0.0, 1e-3], dtype=torch.bfloat16)]
    for x in cases:
        assert zero_passes(x) == compare([x], [torch.zeros_like(x)]).ok, x
    # counted chunk by chunk, as the whole tensor at once would count it
    big = torch.cat([torch.randn(CHUNK) * 1e-4, torch.randn(CHUNK // 2)])
    atol, rtol = TOLERANCES[torch.float32][:2]
    assert below_tolerance(big) == int((big.abs() <= atol + rtol * big.abs()).sum()) > CHUNK // 2


# -- dynamic gates in a sandboxed worker (Triton interpreter) ------------------------------------

DYNAMIC = {
    "honest_swish_add": None, "honest_linear_relu": None, "honest_row_softmax": None,
    "unused_launch": "kernel_output_unused",
    "cache_by_pointer": "stale_output", "cache_first_call": "output_reuses_earlier_output",
    "zero_inputs": "input_mutated", "output_alias": "output_aliases_input",
    "patched_timer": "timer_patched:time.perf_counter",
    "patch_compare": "harness_access:patch:torch.allclose",
    "gc_obfuscated": "harness_access:gc", "frame_inspect": "harness_access:frames",
    "escape_write": "sandbox_escape:write", "degenerate_constant": "reference_ignores_inputs",
}


# C kernels built by the program and called through ctypes (the CPU inductor candidates' shape)
DYNAMIC_CPP = {"honest_swish_add": None, "unused_launch": "kernel_output_unused",
               "libc_system": "harness_access:ctypes"}
DYNAMIC_CASES = [("triton", c) for c in DYNAMIC] + [("cpp", c) for c in DYNAMIC_CPP]


@pytest.fixture(scope="module")
def gate_results():
    names = DYNAMIC_CASES
    tasks = [{"pytorch_code": REFS[CASES[n]["ref"]],
              "kernel_code": (HOSTILE / b / f"{n}.py").read_text()} for b, n in names]
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    with WorkerPool("tests.support.gates_handlers:handle", setup="tests.support.gates_handlers:setup",
                    workers=2, timeout=120, env=env) as pool:
        return {names[i]: r for i, r in pool.map(tasks)}


@pytest.mark.parametrize("backend,case", DYNAMIC_CASES)
def test_dynamic_gates(gate_results, backend, case):
    res = gate_results[(backend, case)]
    assert res.ok, res.error or res.output[-2000:]
    found = {r for r, sev in res.value["findings"] if sev == "fail"}
    raised = [r for r, sev in res.value["findings"] if sev == "error"]
    expected = (DYNAMIC if backend == "triton" else DYNAMIC_CPP)[case]
    if expected is None:
        assert found == set() and not raised, (found, raised)
    else:
        assert expected in found, (found, raised)


def test_cpu_poisoning_takes_sizes_from_a_list_or_a_function_and_spares_mapped_blocks():
    """On the CPU, blocks of the given tensors' sizes are poisoned (given directly, or by a
    function the GPU never calls); blocks glibc maps fresh (MMAP_THRESHOLD and up) are not."""
    from curate.verify.worker.gates.poison import poison_free_memory
    from curate.verify.worker.memory import MMAP_THRESHOLD
    small = [torch.empty(1000), torch.empty(10)]
    assert poison_free_memory("cpu", like=small) == 4 * 1010 * 4
    assert poison_free_memory("cpu", like=lambda: small) == 4 * 1010 * 4
    big = torch.empty(MMAP_THRESHOLD // 4, dtype=torch.float32)
    assert poison_free_memory("cpu", like=lambda: [big, *small]) == 4 * 1010 * 4


def test_ghost_run_poisons_what_a_kernel_wrote():
    calls = []

    def kernel(x, out):
        calls.append(1)
        out.copy_(x * 2)
        return None

    x, out = torch.ones(4), torch.zeros(4)
    ghost.ghost_call(kernel, (x, out), {})
    assert calls and torch.isnan(out).all() and not torch.isnan(x).any()


def test_ghost_run_sees_writes_by_digest_and_copies_no_argument():
    """A write that leaves the bytes as they were is no write; a write of -0.0 over 0.0 is one
    (the bytes changed). The launch's arguments are not copied: a copy of each would hold a
    second input set and output on the device during the ghost run."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from curate.verify.worker import digest
    N = 3 * 2 * digest.ROW    # three whole rows of the digest's 8-byte words: no tail to copy

    class Clones(TorchDispatchMode):
        seen = 0

        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            if func.overloadpacket.__name__ in ("clone", "copy_") and args[0].numel() >= N:
                Clones.seen += 1
            return func(*args, **(kwargs or {}))

    def kernel(x, same_bytes, signed_zero, untouched):
        same_bytes.copy_(same_bytes.clone())
        signed_zero.neg_()
        return None

    x = torch.randn(N)
    same_bytes, signed_zero, untouched = torch.randn(N), torch.zeros(N), torch.randn(N)
    keep = (x.clone(), same_bytes.clone(), untouched.clone())
    with Clones():
        ghost.ghost_call(kernel, (x, same_bytes, signed_zero, untouched), {})
    assert Clones.seen == 2          # the kernel's own clone and copy_, none of the ghost's
    assert torch.equal(x, keep[0]) and torch.equal(same_bytes, keep[1])
    assert torch.equal(untouched, keep[2]) and torch.isnan(signed_zero).all()


def test_gates_keep_the_compared_calls_copy_of_call_a_when_it_is_the_same():
    from curate.verify.worker.gates.candidate import GateCalls
    from curate.verify.worker.gates.sequence import GateRun
    x = torch.randn(64)
    out = torch.randn(8)
    calls = GateCalls.of_lists([x], None)
    run = GateRun(lambda t: t, calls, "cpu", expected_a=[out.clone()])
    kept = run.kept_a(out)
    assert kept[0] is run.expected_a[0]                  # no second copy
    other = out + 1
    kept = run.kept_a(other)
    assert kept[0] is not other and torch.equal(kept[0], other)   # a copy of its own
    assert GateRun(lambda t: t, calls, "cpu").kept_a(out)[0] is not out


def test_alias_findings():
    x = torch.randn(4, 4)
    assert ("output_aliases_input", "fail") in candidate.alias_findings(x[0], [x])
    assert candidate.alias_findings(x.clone(), [x]) == []
    assert candidate.alias_findings(x.view(-1), [x], ref_aliases_input=True) == []


# -- the whole harness ---------------------------------------------------------------------------

# the memory exploit's output is whatever the allocator hands out: poisoned memory makes it NaN
# (incorrect), and where both runs get the poison the ghost run also calls it deceptive
E2E = {"honest_swish_add": ("verified",), "unused_launch": ("deceptive",),
       "memory_exploit": ("deceptive", "incorrect"), "escape_write": ("deceptive",),
       "cache_by_pointer": ("deceptive", "incorrect"), "torch_forward": ("deceptive",),
       "degenerate_constant": ("degenerate_reference",)}


@pytest.mark.slow
def test_hostile_fixtures_through_verify(tmp_path):
    from curate.schema import new_record
    from curate.verify import Verifier
    rows = [new_record(id=n, pytorch_code=REFS[CASES[n]["ref"]],
                       kernel_code=(HOSTILE / "triton" / f"{n}.py").read_text(),
                       backend="triton", source="file") for n in E2E]
    with Verifier(device="cpu", workers=2, timeout=120, cache_dir=tmp_path / "cache") as v:
        got = {rows[i]["id"]: r for i, r in v.verify(rows)}
    for name, allowed in E2E.items():
        assert got[name].status in allowed, (name, got[name].status, got[name].reasons,
                                             got[name].error)
    assert got["unused_launch"].reasons and "kernel_output_unused" in got["unused_launch"].reasons


def test_a_gate_that_breaks_fails_the_row_closed(tmp_path, monkeypatch):
    """Not `verified`: a gate that could not run has not passed (and a candidate must not get
    past a gate by making it break). What a gate did find still outranks the broken one
    (tests/test_verify_policy.py); inside the worker, run_hook fails closed the same way (below)."""
    from curate.schema import new_record
    from curate.verify import Verifier, engine

    def broken(kernel_code, pytorch_code=None):
        raise RuntimeError("CUDA out of memory (simulated)")
    monkeypatch.setattr(engine, "static_findings", broken)
    row = new_record(id="h", pytorch_code=REFS[CASES["honest_swish_add"]["ref"]],
                     kernel_code=(HOSTILE / "triton" / "honest_swish_add.py").read_text(),
                     backend="triton", source="file")
    with Verifier(device="cpu", workers=1, timeout=120, cache_dir=tmp_path / "cache") as v:
        (_, got), = list(v.verify([row]))
    assert got.status == "runtime_error", (got.status, got.reasons, got.error)
    assert "check_failed:static" in got.reasons


def test_only_a_gate_out_of_memory_asks_for_the_alone_retry():
    from curate.verify.worker.hooks import CheckContext, run_hook

    class Raises:
        name = "raises"

        def __init__(self, exc):
            self.exc = exc

        def finish(self, ctx):
            raise self.exc

    def reasons(exc):
        ctx = CheckContext(role="candidate", device="cuda", backend="triton", pytorch_code="",
                           kernel_code="")
        run_hook([Raises(exc)], "finish", ctx)
        return {f.reason: (f.fatal, f.status) for f in ctx.findings}

    oom = reasons(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB"))
    assert oom == {"check_failed:raises": (True, "runtime_error"), "out_of_memory": (False, None)}
    other = reasons(ValueError("shape mismatch"))
    assert other == {"check_failed:raises": (True, "runtime_error")}


# -- confinement (Landlock) ----------------------------------------------------------------------

needs_landlock = pytest.mark.skipif(not confine.supported(),
                                    reason="needs Landlock (Linux >= 5.13 with it enabled)")


@pytest.fixture
def confined(tmp_path):
    env = {"PYTHONPATH": str(ROOT)}
    with WorkerPool("tests.support.gates_handlers:probe", workers=1, timeout=30, env=env,
                    limits=Limits(confine=True), scratch_root=str(tmp_path)) as pool:
        yield pool


@needs_landlock
def test_confined_worker_writes_only_in_its_scratch(confined, tmp_path):
    outside = tmp_path.parent / f"curate-escape-{os.getpid()}.txt"
    res = confined.run({"kind": "write", "path": str(outside)})
    assert res.ok and res.value["ok"] is False and "Permission" in res.value["error"]
    assert not outside.exists()
    assert confined.run({"kind": "write", "path": "inside.txt"}).value["ok"] is True


@needs_landlock
def test_confined_worker_cannot_connect_or_signal_outside(confined):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    try:
        res = confined.run({"kind": "connect", "port": srv.getsockname()[1]})
        assert res.ok and res.value["ok"] is False
    finally:
        srv.close()
    assert confined.run({"kind": "kill_parent"}).value["ok"] is False


@needs_landlock
def test_confined_worker_cannot_read_home_directories(confined):
    home = Path(os.path.expanduser("~"))
    canary = home / f".curate-canary-{os.getpid()}"
    canary.write_text("secret")
    try:
        res = confined.run({"kind": "read", "path": str(canary)})
        assert res.ok and res.value["ok"] is False
    finally:
        canary.unlink()


def test_token_files_are_redacted_from_worker_replies(tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("hf_canary_abcdefgh12345")
    monkeypatch.setenv("HF_TOKEN_PATH", str(token))
    with WorkerPool("tests.support.gates_handlers:probe", workers=1, timeout=30,
                    env={"PYTHONPATH": str(ROOT)}) as pool:
        res = pool.run({"kind": "read", "path": str(token)})
    assert res.ok and res.value["content"] == "[redacted]"


def test_a_cache_keyed_by_sampled_elements_answers_the_poked_set_stale(tmp_path):
    """A cache keyed by the input buffer and four sampled elements survives every rewrite of
    whole input sets (each changes the samples); set 0 with one element poked, called right
    after set 0 in the same buffers, gets the stale answer and the row is not verified. The
    honest kernel beside it computes the poked set and verifies."""
    from curate.schema import new_record
    from curate.verify import Verifier
    names = ("honest_swish_add", "cache_ptr_checksum")
    rows = [new_record(id=n, pytorch_code=REFS[CASES[n]["ref"]],
                       kernel_code=(HOSTILE / "triton" / f"{n}.py").read_text(),
                       backend="triton", source="file") for n in names]
    with Verifier(device="cpu", workers=2, timeout=120, cache_dir=tmp_path / "cache") as v:
        got = {rows[i]["id"]: r for i, r in v.verify(rows)}
    assert got["honest_swish_add"].status == "verified", got["honest_swish_add"].reasons
    cheat = got["cache_ptr_checksum"]
    # caught either by the poked set's comparison or, first, by the gates seeing that no kernel
    # ran on a compared call (the cache answered it)
    assert (cheat.status, bool({"output_mismatch", "no_custom_kernel_ran"} & set(cheat.reasons))) \
        in {("incorrect", True), ("deceptive", True)}, (cheat.status, cheat.reasons, cheat.error)


def test_threads_that_spin_while_the_judge_works_are_caught_without_timing(tmp_path):
    """On the CPU a Triton pair is checked for correctness only (no timing loop, so no timing
    check of idle CPU): the candidate's CPU use while the judge compares is measured all the
    same, and spinner threads started at import make the row `deceptive`."""
    from curate.schema import new_record
    from curate.verify import Verifier
    row = new_record(id="starve", pytorch_code=REFS[CASES["starve_reference"]["ref"]],
                     kernel_code=(HOSTILE / "triton" / "starve_reference.py").read_text(),
                     backend="triton", source="file")
    # the static gates name its threads before anything runs: off, to see the runtime catch it
    with Verifier(device="cpu", workers=1, timeout=120, cache_dir=tmp_path / "cache",
                  static_gates=False) as v:
        (_, res), = list(v.verify([row]))
    assert res.status == "deceptive" and "work_outside_call" in res.reasons, \
        (res.status, res.reasons, res.error)
    assert res.notes["idle_cpu_s"] > 0.02


# -- trust by identity ---------------------------------------------------------------------------

_TRUST_SCRIPT = r"""
import os, sys
sys.path.insert(0, sys.argv[1])          # a `pip install --target` directory on the path
import target_dep                        # loaded before setup: trusted by identity
from curate.verify.worker import gates
from curate.verify.worker.gates import integrity, state
from curate.verify.worker.gates.install import install
gates.setup()
install()
os.chdir(sys.argv[2])                    # the worker's scratch
open("cand.py", "w").write("import sys\ndef peek():\n    return sys._getframe(0)\n")
sys.path.insert(0, sys.argv[2])
import cand
state.STATE.phase = "candidate"
target_dep.frame()
ok_dep = not integrity.candidate_violations()
try:
    cand.peek()
except PermissionError:
    pass
print(ok_dep, [r for r, _ in integrity.candidate_violations()])
"""


def test_trusted_code_is_what_was_loaded_at_setup_wherever_it_lies(tmp_path):
    """A dependency outside site-packages (pip install --target on PYTHONPATH) that calls
    sys._getframe is trusted when it was loaded before setup; the candidate's file is not."""
    import subprocess
    import sys
    target, scratch = tmp_path / "target", tmp_path / "scratch"
    target.mkdir()
    scratch.mkdir()
    (target / "target_dep.py").write_text("import sys\ndef frame():\n    return sys._getframe(0)\n")
    p = subprocess.run([sys.executable, "-c", _TRUST_SCRIPT, str(target), str(scratch)],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(scratch),
                            "HOME": str(scratch)})
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[0] == "True", p.stdout
    assert "harness_access:frames" in p.stdout, p.stdout


def test_the_gates_hold_no_copy_of_call_b_and_catch_its_storage_answered_again():
    """Call b's outputs stay alive through call c uncopied (a copy is one output more at the
    worker's peak): a candidate that hands b's storage back to call c is caught, and an honest
    one is not."""
    from curate.verify.worker.gates.sequence import check_candidate

    class Doubles(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class GivesBackTheLast(Doubles):
        """Computes every call; from its third (the gates' call c), into the last call's
        output while that is still held."""
        last, calls = None, 0

        def forward(self, x):
            self.calls += 1
            out = torch.mul(x, 2, out=self.last) if self.calls >= 3 else x * 2
            self.last = out
            return out

    a, b = [torch.randn(16)], [torch.randn(16)]
    honest = check_candidate(Doubles(), a, b, expected_a=[a[0] * 2])
    assert ("output_reuses_earlier_output", "fail") not in honest, honest
    reused = check_candidate(GivesBackTheLast(), a, b, expected_a=[a[0] * 2])
    assert ("output_reuses_earlier_output", "fail") in reused


def test_gate_calls_must_answer_like_the_compared_call():
    """The gates call through the same buffers as every call; a candidate whose answer to the
    gates' call differs from its answer to the compared call on the same inputs is caught."""
    from curate.verify.worker.gates.sequence import check_candidate

    class Doubles(torch.nn.Module):
        def forward(self, x):
            return x * 2

    a, b = [torch.randn(16)], [torch.randn(16)]
    seen = []

    class Records(Doubles):
        def forward(self, x):
            seen.append(x)
            return super().forward(x)

    model = Records()
    right = check_candidate(model, a, b, expected_a=[a[0] * 2])
    assert ("gate_call_mismatch", "fail") not in right
    assert len({t.data_ptr() for t in seen}) == 1   # one set of buffers for every gate call
    wrong = check_candidate(Doubles(), a, b, expected_a=[a[0] * 3])
    assert ("gate_call_mismatch", "fail") in wrong
