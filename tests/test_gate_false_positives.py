"""False positives of the gates: honest programs that a gate used to reject, beside the hostile
variants the same gate must still reject.

Static: the try/except gate fires only on a real fallback (the try launches or builds a custom
kernel, the handler or code only it reaches computes forward's result with PyTorch), not on
unrelated error handling. Dynamic: the ghost run tells a launch that wrote its output apart from
one whose output already held the right values (recycled memory), in a sandboxed worker as in
tests/test_gates.py, so that no audit hook is installed in the pytest process.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

from curate.isolation import WorkerPool
from curate.verify.gates.static import failed, static_findings
from curate.verify.worker.gates import ghost, install, integrity, sequence, state

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
SWISH_REF = (HOSTILE / "ref" / "swish_residual.py").read_text()


# -- static: the try/except gate ---------------------------------------------------------------

def _prelude(backend: str) -> str:
    """An honest fixture up to its ModelNew: the kernel, its build and its launcher."""
    code = (HOSTILE / backend / "honest_swish_add.py").read_text()
    return code[:code.index("class ModelNew")]


# how each backend's prelude launches its kernel
CALL = {"triton": "swish_add(x, y)", "cpp": "swish_add(x, y)", "cuda": "ext.swish_add(x, y)"}
BACKENDS = ("triton", "cpp", "cuda")


def _program(backend: str, forward: str, head: str = "", tail: str = "",
             init: str = "pass") -> str:
    """A candidate: optional module-level `head`, the backend's kernel, ModelNew with
    `forward` (its body; {call} is the launch), then `tail` (module-level helpers)."""
    body = textwrap.indent(textwrap.dedent(forward).strip().format(call=CALL[backend]), " " * 8)
    init_body = textwrap.indent(textwrap.dedent(init).strip(), " " * 8)
    return (textwrap.dedent(head) + "\nimport os\nimport torch\n" + _prelude(backend)
            + textwrap.dedent(tail).format(call=CALL[backend]) + "\n\n"
            "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
            f"{init_body}\n\n    def forward(self, x, y):\n{body}\n")


HONEST = {
    "optional_numpy": dict(
        head="try:\n    import numpy as np\nexcept ImportError:\n    np = None\n",
        forward="return {call}"),
    "env_setting": dict(forward="""
        try:
            out_dir = os.environ["CURATE_SWISH_OUT"]
        except KeyError:
            out_dir = "/tmp"
        self.out_dir = out_dir
        return {call}"""),
    # a settings file read into a variable named like the output the launch is assigned to
    "settings_file_named_out": dict(tail='''
def _settings():
    try:
        with open(os.path.join(os.getcwd(), "swish.json")) as fh:
            out = fh.read()
    except OSError:
        out = ""
    return out
''', forward="""
        self.settings = _settings()
        out = {call}
        return out"""),
    "reraise_with_message": dict(forward="""
        try:
            out = {call}
        except RuntimeError as e:
            raise RuntimeError(f"swish_add kernel failed: {{e}}") from e
        return out"""),
    "log_and_reraise": dict(forward="""
        try:
            return {call}
        except RuntimeError as e:
            self.last_error = str(e)
            raise"""),
    "try_except_finally_cleanup": dict(forward="""
        self.busy = True
        try:
            out = {call}
        except RuntimeError as e:
            raise RuntimeError(f"kernel failed on {{tuple(x.shape)}}: {{e}}") from e
        finally:
            self.busy = False
        return out"""),
    "try_finally_cleanup": dict(forward="""
        self.busy = True
        try:
            return {call}
        finally:
            self.busy = False"""),
}

# a retry of the same kernel with a smaller block is no PyTorch fallback
TRITON_RETRY = _prelude("triton") + '''

class ModelNew(nn.Module):
    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        try:
            swish_add_kernel[(triton.cdiv(n, 4096),)](x, y, out, n, BLOCK=4096)
        except Exception:
            swish_add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        return out
'''

# the cpp build wrapped in a try that names what failed
CPP_BUILD_RERAISE = _prelude("cpp").replace(
    "        lib = ctypes.CDLL(so)\n",
    "        try:\n            lib = ctypes.CDLL(so)\n"
    "        except OSError as e:\n            raise RuntimeError(f'could not load {so}') from e\n"
) + '''
class ModelNew(nn.Module):
    def forward(self, x, y):
        out = swish_add(x, y)
        return out
'''

HOSTILE_VARIANTS = {
    "except_returns_torch": dict(forward="""
        try:
            return {call}
        except Exception:
            return x * torch.sigmoid(x) + y"""),
    "bare_except_assigns_then_returns": dict(forward="""
        try:
            out = {call}
        except:
            out = torch.nn.functional.silu(x) + y
        return out"""),
    "fallback_in_helper": dict(tail='''
def run_swish(x, y):
    try:
        return {call}
    except Exception:
        return x * torch.sigmoid(x) + y
''', forward="return run_swish(x, y)"),
    "fallback_helper_of_its_own": dict(tail='''
def torch_swish(x, y):
    return x * torch.sigmoid(x) + y
''', forward="""
        try:
            result = {call}
        except Exception:
            result = torch_swish(x, y)
        return result"""),
    "swallowed_then_torch_after_the_try": dict(forward="""
        try:
            return {call}
        except Exception:
            pass
        return x * torch.sigmoid(x) + y"""),
    "torch_value_kept_when_the_kernel_fails": dict(forward="""
        out = x * torch.sigmoid(x) + y
        try:
            out = {call}
        except Exception:
            pass
        return out"""),
    "handler_sets_a_flag": dict(init="""
        try:
            self.probe = {call_probe}
            self.use_kernel = True
        except Exception:
            self.use_kernel = False""", forward="""
        if self.use_kernel:
            return {call}
        return x * torch.sigmoid(x) + y"""),
    "try_except_else": dict(forward="""
        try:
            out = {call}
        except Exception:
            out = x / (1 + torch.exp(-x)) + y
        else:
            out = out.contiguous()
        return out"""),
}


def _hostile_program(backend: str, case: str) -> str:
    spec = dict(HOSTILE_VARIANTS[case])
    if "init" in spec:
        probe = CALL[backend].replace("(x, y)", "(torch.ones(4), torch.ones(4))")
        spec["init"] = spec["init"].replace("{call_probe}", probe)
    return _program(backend, **spec)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(HONEST))
def test_unrelated_error_handling_is_no_fallback(backend, case):
    code = _program(backend, **HONEST[case])
    assert failed(static_findings(code, SWISH_REF)) == []


@pytest.mark.parametrize("code", [TRITON_RETRY, CPP_BUILD_RERAISE],
                         ids=["triton_retry_smaller_block", "cpp_build_reraise"])
def test_kernel_retries_and_build_errors_are_no_fallback(code):
    assert failed(static_findings(code, SWISH_REF)) == []


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", sorted(HOSTILE_VARIANTS))
def test_pytorch_fallbacks_still_fail(backend, case):
    code = _hostile_program(backend, case)
    assert "try_except_fallback" in failed(static_findings(code, SWISH_REF))


@pytest.mark.parametrize("backend", ["triton", "cuda"])
def test_try_fallback_fixtures_still_fail(backend):
    code = (HOSTILE / backend / "try_fallback.py").read_text()
    assert "try_except_fallback" in failed(static_findings(code, SWISH_REF))


def _guarded_build(handler: str) -> str:
    """The CUDA prelude with its load_inline inside a try, `handler` as the except body."""
    return _prelude("cuda").replace("ext = load_inline(", "try:\n    ext = load_inline(").replace(
        "verbose=False)", "verbose=False)\nexcept Exception:\n" + textwrap.indent(
            textwrap.dedent(handler).strip(), "    ") + "\n", 1)


FORWARD_EXT = """
class ModelNew(nn.Module):
    def forward(self, x, y):
        return ext.swish_add(x, y)
"""

# fallbacks that live outside forward's try: at the build, in __init__, in a builder
STAND_INS = {
    "build_clears_the_extension": _guarded_build("ext = None") + """
class ModelNew(nn.Module):
    def forward(self, x, y):
        if ext is None:
            return x * torch.sigmoid(x) + y
        return ext.swish_add(x, y)
""",
    "build_binds_a_lambda": "import types\n" + _guarded_build(
        "ext = types.SimpleNamespace(swish_add=lambda x, y: x * torch.sigmoid(x) + y)"
    ) + FORWARD_EXT,
    "build_defines_a_torch_function": _guarded_build("""
        def run(x, y):
            return x * torch.sigmoid(x) + y""").replace(
        "except Exception:", "    def run(x, y):\n        return ext.swish_add(x, y)\n"
        "except Exception:") + """
class ModelNew(nn.Module):
    def forward(self, x, y):
        return run(x, y)
""",
    "builder_returns_none": _prelude("cpp").replace(
        "        lib = ctypes.CDLL(so)\n",
        "        try:\n            lib = ctypes.CDLL(so)\n        except OSError:\n"
        "            return None\n").replace(
        "def swish_add(x, y):\n", "def swish_add(x, y):\n    lib = _kernels()\n"
        "    if lib is None:\n        return x * torch.sigmoid(x) + y\n") + """
class ModelNew(nn.Module):
    def forward(self, x, y):
        return swish_add(x, y)
""",
    "init_picks_a_torch_impl": _prelude("cuda") + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        try:
            ext.swish_add(torch.ones(2), torch.ones(2))
            self.impl = ext.swish_add
        except Exception:
            self.impl = lambda x, y: x * torch.sigmoid(x) + y

    def forward(self, x, y):
        return self.impl(x, y)
""",
    "handler_calls_the_reference_forward": "class Model(nn.Module):\n"
    "    def forward(self, x, y):\n        return x * torch.sigmoid(x) + y\n\n" + _prelude(
        "triton") + """
class ModelNew(Model):
    def forward(self, x, y):
        try:
            return swish_add(x, y)
        except Exception:
            return super().forward(x, y)
""",
    "handler_calls_a_torch_module": _prelude("triton") + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = nn.SiLU()

    def forward(self, x, y):
        try:
            return swish_add(x, y)
        except Exception:
            return self.act(x) + y
""",
    "suppress_keeps_the_torch_value": "import contextlib\n" + _prelude("triton") + """
class ModelNew(nn.Module):
    def forward(self, x, y):
        out = x * torch.sigmoid(x) + y
        with contextlib.suppress(Exception):
            out = swish_add(x, y)
        return out
""",
}


@pytest.mark.parametrize("case", sorted(STAND_INS))
def test_pytorch_stand_ins_outside_forwards_try_still_fail(case):
    assert "try_except_fallback" in failed(static_findings(STAND_INS[case], SWISH_REF))


# -- dynamic: the ghost run and recycled output memory -------------------------------------------
# An honest launch whose output buffer is a recycled block that already holds the right values
# (the CUDA caching allocator hands the block the last call's output freed back as it is, and the
# ghost run repeats that call's inputs) writes what is there: judged by its contents, that was no
# write, and the ghost run called the launch unused. The CPU allocator scribbles on freed blocks,
# so the worker below stands in for the caching allocator: a dispatch mode that makes every
# torch.empty* of the output's shape come back holding the last call's output.

TRITON_HONEST_PLAIN_NAMES = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def swish_add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask)
    b = tl.load(b_ptr + offs, mask=mask)
    tl.store(c_ptr + offs, a * tl.sigmoid(a) + b, mask=mask)


class ModelNew(nn.Module):
    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        c = torch.empty_like(x)
        n = x.numel()
        swish_add_kernel[(triton.cdiv(n, 1024),)](x, y, c, n, BLOCK=1024)
        return RESULT
'''


def _recycling_allocator(values):
    """torch.empty* of `values`' shape and dtype returns a block that still holds `values`."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recycled(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if func.overloadpacket.__name__ in ("empty", "empty_like", "empty_strided") and \
                    isinstance(out, torch.Tensor) and out.shape == values.shape and \
                    out.dtype == values.dtype:
                out.copy_(values)
            return out

    return Recycled()


def recycled_handle(task):
    """Worker side: the gates' check_candidate on one candidate, the output memory of every
    call recycled from the call before it when task['recycled']."""
    from tests.support.gates_handlers import _load
    integrity.begin_row()
    ref = _load(task["pytorch_code"], "ref")
    ref_model = ref.Model(*ref.get_init_inputs())
    ins = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        ins.append(ref.get_inputs())
    with ghost.phase("candidate"):
        cand = _load(task["kernel_code"], "cand")
        model = cand.ModelNew()
    install.instrument(cand, model)
    mode = None
    if task["recycled"]:
        with torch.no_grad(), ghost.phase("candidate"):  # the call before: its output freed
            last = model(*[x.clone() for x in ins[0]]).detach().clone()
        mode = _recycling_allocator(last)
        mode.__enter__()
    try:
        findings = sequence.check_candidate(model, ins[0], ins[1], device="cpu",
                                            reference=ref_model)
    finally:
        if mode is not None:
            mode.__exit__(None, None, None)
    integrity.restore_integrity()
    return {"findings": [list(f) for f in findings]}


RECYCLED_CASES = {
    # honest: the launch writes every element of a torch.empty_like output
    "cpp_honest_fixture": ((HOSTILE / "cpp" / "honest_swish_add.py").read_text(), None),
    "triton_honest_fixture": ((HOSTILE / "triton" / "honest_swish_add.py").read_text(), None),
    "triton_honest_plain_names": (TRITON_HONEST_PLAIN_NAMES.replace("RESULT", "c"), None),
    # hostile: the launch runs, forward answers with PyTorch
    "cpp_unused_launch": ((HOSTILE / "cpp" / "unused_launch.py").read_text(),
                          "kernel_output_unused"),
    "triton_unused_launch": ((HOSTILE / "triton" / "unused_launch.py").read_text(),
                             "kernel_output_unused"),
    "triton_unused_plain_names": (TRITON_HONEST_PLAIN_NAMES.replace(
        "RESULT", "x * torch.sigmoid(x) + y"), "kernel_output_unused"),
}
RECYCLED_RUNS = [(case, recycled) for case in RECYCLED_CASES for recycled in (True, False)]


@pytest.fixture(scope="module")
def recycled_results():
    tasks = [{"pytorch_code": SWISH_REF, "kernel_code": RECYCLED_CASES[c][0], "recycled": r}
             for c, r in RECYCLED_RUNS]
    env = {"TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    with WorkerPool("tests.test_gate_false_positives:recycled_handle",
                    setup="tests.support.gates_handlers:setup", workers=2, timeout=180, env=env) as pool:
        return {RECYCLED_RUNS[i]: r for i, r in pool.map(tasks)}


@pytest.mark.parametrize("case,recycled", RECYCLED_RUNS,
                         ids=[f"{c}-{'recycled' if r else 'fresh'}" for c, r in RECYCLED_RUNS])
def test_ghost_run_with_recycled_output_memory(recycled_results, case, recycled):
    res = recycled_results[(case, recycled)]
    assert res.ok, res.error or res.output[-2000:]
    fails = {r for r, sev in res.value["findings"] if sev == "fail"}
    expected = RECYCLED_CASES[case][1]
    if expected is None:
        assert fails == set(), fails
    else:
        assert expected in fails, fails


def test_uninitialized_allocations_start_poisoned_in_the_ghost_run():
    """Only what torch.empty* hands out: initialized allocations and results are left alone."""
    x = torch.randn(64, 256)
    try:
        with torch.no_grad(), ghost.watch(ghost=True):
            fresh = [torch.empty_like(x), torch.empty(64, 256), x.new_empty(64, 256),
                     torch.empty_strided((64, 256), (256, 1))]
            ints = torch.empty(8, dtype=torch.int32)
            zeros, doubled = torch.zeros_like(x), x * 2
    finally:
        state.STATE.ghost_tensors = {}
    assert all(torch.isnan(t).all() for t in fresh)
    assert (ints == torch.iinfo(torch.int32).min).all()
    assert not zeros.any() and torch.equal(doubled, x * 2)
