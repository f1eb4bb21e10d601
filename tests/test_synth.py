"""synth-inductor: GPU-captured inductor output -> standalone Triton programs that run under the
Triton interpreter and match the reference; the CPU path end to end on bundled examples."""

import ast
import copy
import json
import os
from pathlib import Path

import pytest
import torch

from curate.synth.check import check_many
from curate.synth.rewrite import RewriteError
from curate.synth.rewrite_triton import build_triton_program

FIX = Path(__file__).parent / "fixtures" / "inductor"
ROOT = Path(__file__).parents[1]
CAPTURES = json.loads((FIX / "captures.json").read_text())
OK = sorted(k for k, v in CAPTURES.items() if v.get("ok"))
INTERPRET = {"TRITON_INTERPRET": "1"}
# Under the interpreter a reduction's combine function runs in Python per element: these two
# take ~40 s each (64-128 programs); the same kernel kinds are covered by faster fixtures
# (bmm_scale_softmax: persistent softmax; row_sum_looped, full_sum_scalar: looped reductions).
SLOW = {"softmax_persistent", "column_mean_dim0"}
RUN_SLOW = os.environ.get("CURATE_SLOW_TESTS") == "1"


def reference(name: str) -> str:
    return (FIX / "modules" / f"{name}.py").read_text()


def program(name: str, capture: dict | None = None) -> tuple[str, list[str]]:
    return build_triton_program(reference(name), capture or CAPTURES[name], "torch-2.11.0/inductor")


def test_fixtures_cover_the_kernel_kinds_the_issue_names():
    assert len(OK) >= 10
    assert all(CAPTURES[k]["versions"]["torch"].startswith("2.11") for k in OK)
    kernels = {launch["kernel"] for k in OK for launch in CAPTURES[k]["launches"]}
    assert any(k.startswith("triton_poi_") for k in kernels)   # pointwise
    assert any(k.startswith("triton_red_") for k in kernels)   # looped reduction
    assert any(k.startswith("triton_per_") for k in kernels)   # persistent reduction
    assert any(len(CAPTURES[k]["outputs"]) > 1 for k in OK)    # multiple outputs
    assert any("extern_kernels.mm" in CAPTURES[k]["codes"][0] for k in OK)
    assert any(len(launch["grid"]) == 3 and launch["grid"][1] > 1
               for k in OK for launch in CAPTURES[k]["launches"])  # a 2D grid


@pytest.fixture(scope="module")
def fixture_results():
    pairs, names = [], []
    for name in OK:
        if name in SLOW and not RUN_SLOW:
            continue
        code, _ = program(name)
        pairs.append((reference(name), code))
        names.append(name)
    # the same-shape module with its two parameters' slots swapped: must NOT match
    cap = copy.deepcopy(CAPTURES["pointwise_same_shape_params"])
    slots = cap["slots"]
    ia = next(i for i, s in enumerate(slots) if s.get("name") == "a")
    ib = next(i for i, s in enumerate(slots) if s.get("name") == "b")
    slots[ia], slots[ib] = slots[ib], slots[ia]
    pairs.append((reference("pointwise_same_shape_params"),
                  program("pointwise_same_shape_params", cap)[0]))
    names.append("swapped")
    return dict(zip(names, check_many(pairs, env=INTERPRET, atol=1e-4, rtol=1e-4)))


@pytest.mark.parametrize("name", OK)
def test_rewritten_triton_program_matches_reference_under_interpreter(fixture_results, name):
    if name in SLOW and not RUN_SLOW:
        pytest.skip("~40 s under the Triton interpreter: set CURATE_SLOW_TESTS=1 to run it")
    res = fixture_results[name]
    assert res["ok"], res


def test_wiring_by_graph_order_matters(fixture_results):
    """Two parameters of one shape: a shape-matching wiring could swap them; ours does not, and
    the swapped program is caught as a mismatch (the check can fail)."""
    assert fixture_results["pointwise_same_shape_params"]["ok"]
    assert fixture_results["swapped"]["status"] == "mismatch"
    slots = CAPTURES["pointwise_same_shape_params"]["slots"]
    assert [s.get("name", s.get("index")) for s in slots].count("a") == 1


def test_launches_use_the_recorded_grid_and_config():
    cap = CAPTURES["row_sum_looped"]
    code, _ = program("row_sum_looped")
    launch = cap["launches"][0]
    call = next(n for n in ast.walk(ast.parse(code))
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript))
    assert ast.literal_eval(call.func.slice) == tuple(launch["grid"])
    kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert kw["num_warps"] == launch["num_warps"] and kw["num_stages"] == launch["num_stages"]
    assert all(kw[k] == v for k, v in launch["kwargs"].items())
    assert "R0_BLOCK" in launch["kwargs"]  # a looped reduction's chunk size was recorded
    assert "@triton.jit" in code and "triton_heuristics" not in code
    assert "async_compile" not in code and "torch.compile(" not in code


def test_extern_kernels_are_reasons_and_stay_torch_calls():
    code, reasons = program("linear_relu_extern_mm")
    assert "extern_kernels:mm" in reasons and "extern_kernels:addmm" in reasons
    assert "class ModelNew(Model)" in code


def test_unknown_wrapper_name_and_missing_launch_are_rewrite_errors():
    cap = copy.deepcopy(CAPTURES["pointwise_gelu_bias"])
    cap["codes"][0] = cap["codes"][0].replace("        args.clear()",
                                              "        args.clear()\n        mystery_helper()")
    with pytest.raises(RewriteError) as e:
        program("pointwise_gelu_bias", cap)
    assert e.value.reason == "synth:unsupported_wrapper"
    cap = copy.deepcopy(CAPTURES["pointwise_gelu_bias"])
    cap["launches"] = []
    with pytest.raises(RewriteError) as e:
        program("pointwise_gelu_bias", cap)
    assert e.value.reason == "synth:no_launch_record"


def test_graph_break_was_captured_as_a_reason():
    assert CAPTURES["graph_break_item"]["reason"] == "synth:graph_break"


# -- the CPU path, end to end ------------------------------------------------------------------

EXAMPLES = ["01_gelu_bias_residual.py", "21_conv2d_relu_bias.py", "24_mlp_gelu.py"]
HANGS = '''import time
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x + 1


def get_inputs():
    time.sleep(3600)
    return [torch.randn(4)]


def get_init_inputs():
    return []
'''
DIES = HANGS.replace("time.sleep(3600)", "import os; os._exit(3)")


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    from curate.pipeline.single import run_single
    from curate.record import new_record
    from curate.synth.inductor import InductorSynth
    from curate.tableio import read_rows, write_rows
    d = tmp_path_factory.mktemp("synth")
    rows = [new_record(id=f"ex{i}", pytorch_code=(ROOT / "examples" / n).read_text(),
                       source="file", path=n, license="MIT") for i, n in enumerate(EXAMPLES)]
    rows.append(new_record(id="gb", pytorch_code=reference("graph_break_item"), source="file"))
    rows.append(new_record(id="hang", pytorch_code=HANGS, source="file"))
    rows.append(new_record(id="dies", pytorch_code=DIES, source="file"))
    write_rows(d / "refs.parquet", rows)
    st = run_single(InductorSynth(device="cpu", workers=2, timeout=45), d / "refs.parquet",
                    d / "cands.parquet", progress=False)
    return st, read_rows(d / "cands.parquet"), read_rows(d / "cands.rejected.parquet")


def test_cpu_synth_keeps_examples_and_rejects_failures_with_reasons(cpu_run):
    st, kept, rejected = cpu_run
    assert sorted(r["ref_id"] for r in kept) == [f"ex{i}" for i in range(len(EXAMPLES))]
    why = {r["id"]: r["reasons"] for r in rejected}
    assert "synth:graph_break" in why["gb"]
    assert "synth:timeout" in why["hang"]
    assert set(why["dies"]) & {"synth:crashed", "synth:reference_error"}
    for r in kept:
        assert r["backend"] == "cpp" and r["generator"].startswith("torch-")
        assert "cpp_pybinding" in r["original_kernel_code"]
        assert "class ModelNew(Model)" in r["kernel_code"] and "CPP_KERNELS" in r["kernel_code"]
        assert r["license"] == "MIT" and r["source"] == "file"
        assert r["id"] not in {f"ex{i}" for i in range(len(EXAMPLES))}
    assert any("extern_kernels:convolution" in r["reasons"] for r in kept)


def test_cpu_candidates_run_on_their_own_and_match(cpu_run):
    _, kept, _ = cpu_run
    results = check_many([(r["pytorch_code"], r["kernel_code"]) for r in kept],
                         atol=1e-4, rtol=1e-4)
    assert all(res["ok"] for res in results), results


def test_max_autotune_mode_is_recorded_and_its_candidates_match(tmp_path):
    from curate.pipeline.single import run_single
    from curate.record import new_record
    from curate.synth.inductor import InductorSynth, generator_name
    from curate.tableio import read_rows, write_rows
    assert generator_name({"torch": "2.11.0+cu130", "triton": "3.6.0"}, "cuda") == \
        "torch-2.11.0/inductor+triton-3.6.0"
    write_rows(tmp_path / "refs.jsonl", [new_record(
        id="ex0", pytorch_code=(ROOT / "examples" / EXAMPLES[0]).read_text(), source="file")])
    run_single(InductorSynth(device="cpu", workers=1, timeout=90, mode="max-autotune"),
               tmp_path / "refs.jsonl", tmp_path / "cands.jsonl", progress=False)
    kept = read_rows(tmp_path / "cands.jsonl")
    assert len(kept) == 1 and kept[0]["generator"].endswith("/inductor:max-autotune")
    res = check_many([(kept[0]["pytorch_code"], kept[0]["kernel_code"])], atol=1e-4, rtol=1e-4)
    assert res[0]["ok"], res


def test_synth_llm_on_a_missing_table_names_it(tmp_path):
    import subprocess
    import sys
    res = subprocess.run([sys.executable, "-m", "curate", "synth", "llm", "missing.parquet", "-o",
                          "out.parquet", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"],
                         capture_output=True, text=True, cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 2, res.stderr
    assert "missing.parquet" in res.stderr + res.stdout


def test_synth_help_has_examples():
    from click.testing import CliRunner
    from curate.cli import main as cli
    for args in (["synth", "--help"], ["synth", "inductor", "--help"], ["synth", "llm", "--help"]):
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 0 and "Example:" in res.output


@pytest.mark.gpu
def test_triton_candidate_on_gpu(tmp_path):
    """On a GPU machine: compile a fixture module on cuda and check the candidate there."""
    from curate.synth.inductor import InductorSynth
    from curate.record import new_record
    step = InductorSynth(device="cuda", workers=1)
    step.setup()
    try:
        [(_, outcome)] = list(step.process([new_record(id="x", pytorch_code=reference(
            "linear_relu_extern_mm"))]))
    finally:
        step.teardown()
    [row] = outcome.kept
    [res] = check_many([(row["pytorch_code"], row["kernel_code"])], device="cuda")
    assert res["ok"], res
    assert torch.cuda.is_available()


@pytest.mark.skipif(not __import__("curate.isolation.confine", fromlist=["x"]).supported(),
                    reason="needs Landlock (Linux >= 5.13 with Landlock enabled)")
def test_reference_programs_cannot_write_outside_their_sandbox_on_cpu(tmp_path):
    """Scraped reference programs are untrusted: synth's CPU workers are confined (bubblewrap,
    where the folder is not even there, else Landlock, where the write is refused)."""
    from curate.pipeline.single import run_single
    from curate.record import new_record
    from curate.synth.inductor import InductorSynth
    from curate.tableio import read_rows, write_rows
    target = tmp_path / "outside" / "planted.txt"
    target.parent.mkdir()
    hostile = (ROOT / "examples" / EXAMPLES[0]).read_text() + (
        f"\nopen({str(target)!r}, 'w').write('x')\n")
    write_rows(tmp_path / "refs.jsonl", [new_record(id="w", pytorch_code=hostile, source="file")])
    run_single(InductorSynth(device="cpu", workers=1, timeout=90), tmp_path / "refs.jsonl",
               tmp_path / "cands.jsonl", progress=False)
    assert not target.exists()
    rejected = read_rows(tmp_path / "cands.rejected.jsonl")
    assert [r["id"] for r in rejected] == ["w"] and rejected[0]["reasons"]
    error = rejected[0].get("error") or ""
    assert "Permission" in error or ("No such file" in error and str(target) in error), error
