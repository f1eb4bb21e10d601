"""split-infill: prefix/core/suffix cuts of Triton, CUDA and C++ candidates (issue 7)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from click.testing import CliRunner

from curate.cli import main
from curate.infill import FIM_FORMATS, SplitConfig, check_row, find_cores, split_code, split_row
from curate.infill.solvable import check_solvable, passed, subprocess_verify
from curate.infill.step import SplitInfill
from curate.pipeline.single import run_single
from curate.schema import new_record
from curate.tableio import read_rows, sibling, write_rows

FIXTURES = Path(__file__).parent / "fixtures"
HERE = FIXTURES / "infill"
CANDIDATES = sorted((HERE / "candidates").glob("*.py"))
EXPECTED = yaml.safe_load((HERE / "expected.yaml").read_text())
CONFIGS = [SplitConfig(g, m) for g in ("kernel", "body") for m in ("per-kernel", "span")]


def code_of(name: str) -> str:
    return (HERE / "candidates" / name).read_text(encoding="utf-8")


def row_of(name: str, reference: str = "add_relu.py") -> dict:
    backend = "triton" if name.startswith("triton") else "cpp" if name.startswith("cpp") else "cuda"
    return new_record(id=Path(name).stem, pytorch_code=(HERE / "references" / reference).read_text(),
                      kernel_code=code_of(name), backend=backend, source="file")


def every_fixture_program() -> list[tuple[str, str]]:
    """Every candidate program in tests/fixtures/**: .py files defining ModelNew, and the
    kernel_code of every row of every fixture table (other stages' fixtures included)."""
    progs = []
    for path in sorted(FIXTURES.rglob("*")):
        if path.suffix == ".py" and path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            if "ModelNew" in text:
                progs.append((str(path.relative_to(FIXTURES)), text))
        elif path.suffix in (".parquet", ".jsonl") and path.is_file():
            try:
                rows = read_rows(path)
            except Exception:
                continue
            for i, r in enumerate(rows):
                if isinstance(r.get("kernel_code"), str) and r["kernel_code"]:
                    progs.append((f"{path.relative_to(FIXTURES)}#{i}", r["kernel_code"]))
    return progs


# -- every fixture: the invariant, and the cores we expect ------------------------------------

def test_every_candidate_fixture_is_listed_in_expected():
    assert {p.name for p in CANDIDATES} == set(EXPECTED)


@pytest.mark.parametrize("name", [p.name for p in CANDIDATES])
def test_fixture_cores(name):
    parts, reasons = split_code(code_of(name))
    want = EXPECTED[name]
    if "rejected" in want:
        assert parts == [] and reasons == want["rejected"]
        return
    assert reasons == []
    assert [p["core_name"] for p in parts] == want["names"]
    assert {p["core_kind"] for p in parts} == {want["kind"]}
    assert {p.get("_warn") for p in parts} == {want.get("warn")}


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.granularity}-{c.multi}")
def test_invariant_on_every_fixture_program(cfg):
    progs = every_fixture_program()
    assert len(progs) >= len(CANDIDATES)
    for where, code in progs:
        rows, reasons = split_row({"id": where, "kernel_code": code}, cfg)
        assert rows or reasons, where
        for r in rows:
            assert check_row(r), where
            assert (r["prefix"] + r["core"] + r["suffix"]).encode() == code.encode(), where
            assert r["core"].strip(), where


# -- the hard cases, one by one ----------------------------------------------------------------

def only(name: str, cfg: SplitConfig = SplitConfig()) -> dict:
    parts, reasons = split_code(code_of(name), cfg)
    assert len(parts) == 1, (parts, reasons)
    return parts[0]


def test_template_kernel_includes_template_and_leaves_device_helpers_in_scaffold():
    core = only("cuda_templates_macros.py")["core"]
    assert core.startswith("template <typename scalar_t, int BLOCK>\n__global__ void __launch_bounds__")
    assert core.rstrip().endswith("}")
    assert "warp_reduce_sum(T val)" not in core and "float gelu(float x)" not in core
    assert "#define" not in core


def test_extern_c_and_namespaced_kernels():
    parts, _ = split_code(code_of("cuda_several_kernels.py"))
    by = {p["core_name"]: p["core"] for p in parts}
    assert by["shift_kernel"].startswith('extern "C" __global__ void shift_kernel(')
    assert by["clamp_kernel"].startswith("__global__ void clamp_kernel(")
    assert "affine_clamp" not in "".join(by.values())


def test_fstring_core_reads_as_the_file_does():
    part = only("cuda_fstring.py")
    assert "{DTYPE}* __restrict__ x" in part["core"] and part["core"].endswith("}}")
    body = only("cuda_fstring.py", SplitConfig("body"))
    assert body["prefix"].endswith("int cols) {{") and body["suffix"].startswith("}}")
    assert "{BLOCK}" in body["core"] and not body["core"].startswith("{")


def test_concatenated_literals_and_dedent():
    part = only("cuda_concatenated.py")
    assert part["core"].startswith("__global__ void negate_kernel(")
    assert part["core"].endswith("}")  # the closing brace of the last literal
    assert '"    if (i < n) y[i] = -x[i];\\n"' in part["core"]


def test_kernel_split_across_variables_is_clipped_to_the_defining_literal():
    row, _ = split_row(row_of("cuda_split_across_variables.py"))
    assert row[0]["core"] == "__global__ void double_kernel(const float* x, float* y, int n) "
    assert "core_clipped" in row[0]["reasons"]
    body, _ = split_row(row_of("cuda_split_across_variables.py"), SplitConfig("body"))
    assert body[0]["core"].strip().startswith("int i = blockIdx.x")


def test_raw_string_with_macro_continuations():
    part = only("cuda_raw_string_macros.py")
    assert part["core"].startswith("__global__ void leaky_relu_kernel(")
    assert 'printf("bad size %d\\n", n);' in part["core"]
    assert "CUDA_KERNEL_LOOP(i, n) \\" in part["prefix"]


def test_source_from_a_variable_defined_elsewhere():
    part = only("cuda_variable_elsewhere.py")
    code = code_of("cuda_variable_elsewhere.py")
    assert code.index(part["core"]) < code.index("load_inline(")
    assert "elementwise_add_cuda(torch::Tensor a" in part["suffix"]


def test_two_load_inline_calls_and_list_sources():
    parts, _ = split_code(code_of("cuda_two_load_inline.py"))
    assert [p["core_name"] for p in parts] == ["relu_kernel", "square_kernel"]


def test_non_ascii_text_splits_on_characters():
    code = code_of("cuda_format_unicode.py")
    for cfg in CONFIGS:
        for p in split_code(code, cfg)[0]:
            assert p["prefix"] + p["core"] + p["suffix"] == code
    body = only("cuda_format_unicode.py", SplitConfig("body"))
    assert "index global — ✓" in body["core"] and "(乘以系数)" in body["prefix"]
    # byte offsets differ from str offsets here: a wrong mapping would cut mid-word
    assert body["prefix"].endswith("int n) {{")


def test_non_ascii_inside_every_piece():
    code = ('# ✨ ünïcödé\nimport triton\nimport triton.language as tl\n\n'
            '@triton.jit\ndef k(p):  # “quoted”\n    tl.store(p, 1)  # 中文\n\n'
            's = """\n// 注释 é\n__global__ void g(float* x) { x[0] = 1.f; /* ✓ */ }\n"""\n'
            'class ModelNew: pass\n')
    for cfg in CONFIGS:
        parts, _ = split_code(code, cfg)
        assert parts and all(p["prefix"] + p["core"] + p["suffix"] == code for p in parts)
    names = [p["core_name"] for p in split_code(code)[0]]
    assert names == ["k", "g"]


def test_triton_helpers_autotune_and_body():
    parts, _ = split_code(code_of("triton_softmax_helpers.py"))
    soft = parts[0]
    assert soft["core"].startswith("@triton.jit\ndef softmax_kernel(")
    assert "@triton.autotune(" in soft["prefix"] and "def _row_max(x)" in soft["prefix"]
    body = split_code(code_of("triton_softmax_helpers.py"), SplitConfig("body"))[0][0]
    assert body["prefix"].endswith("BLOCK: tl.constexpr):\n")
    assert body["core"].startswith("    row = tl.program_id(0)\n")


def test_inductor_triton_kernels_in_strings():
    parts, _ = split_code(code_of("triton_inductor_strings.py"))
    assert parts[0]["core"].startswith("@triton.jit\ndef triton_poi_fused_add_0(")
    assert "@triton_heuristics.pointwise(" in parts[0]["prefix"]


def test_inductor_cpp_kernel():
    part = only("cpp_inductor_add_relu.py")
    assert part["core"].startswith('extern "C"  void  kernel(const float* in_ptr0,')
    assert part["prefix"].endswith("#include <torch/csrc/inductor/cpp_prefix.h>\n")
    assert part["suffix"].startswith("\n''')")


def test_span_covers_every_kernel():
    part = only("cuda_several_kernels.py", SplitConfig("kernel", "span"))
    assert part["core_kind"] == "cuda_kernels"
    assert part["core_name"] == "scale_kernel,shift_kernel,clamp_kernel"
    assert part["core"].startswith("__global__ void scale_kernel") and part["core"].endswith("}")
    body = only("cuda_several_kernels.py", SplitConfig("body", "span"))
    assert body["core_kind"] == "cuda_kernel_bodies"
    single = only("triton_add_relu.py", SplitConfig("kernel", "span"))
    assert single["core_kind"] == "triton_kernel"


def test_find_cores_offsets_are_bytes():
    code = code_of("cuda_format_unicode.py").encode()
    core = find_cores(code).cores[0]
    assert code[core.start:core.end].decode().startswith("__global__ void scale_kernel")


@pytest.mark.parametrize("fmt", [f for f in FIM_FORMATS if f != "none"])
def test_fim_text(fmt):
    part = split_code(code_of("triton_add_relu.py"), SplitConfig(fim_format=fmt))[0][0]
    pre, suf, mid, end = FIM_FORMATS[fmt]
    text = part["text"]
    assert text == pre + part["prefix"] + suf + part["suffix"] + mid + part["core"] + end
    assert text.index(part["suffix"]) < text.rindex(part["core"])


def test_fim_tokens_of_the_common_conventions():
    assert FIM_FORMATS["starcoder"][:3] == ("<fim_prefix>", "<fim_suffix>", "<fim_middle>")
    assert FIM_FORMATS["codellama"][:3] == ("<PRE> ", " <SUF>", " <MID>")
    assert FIM_FORMATS["deepseek"][:3] == ("<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>")
    assert "text" not in split_code(code_of("triton_add_relu.py"))[0][0]


# -- the step, the stand-alone command, the build directory ------------------------------------

def candidate_table(path: Path) -> list[dict]:
    rows = [row_of(p.name) for p in CANDIDATES]
    write_rows(path, rows)
    return rows


def test_step_keeps_columns_and_rejects_with_reasons(tmp_path):
    inp = tmp_path / "cands.parquet"
    rows = candidate_table(inp)
    out = tmp_path / "infill.parquet"
    st = run_single(SplitInfill(), inp, out, progress=False)
    kept = read_rows(out)
    rejected = read_rows(sibling(out, "rejected"))
    assert st.rows_in == len(rows) and st.dropped == 2
    assert sorted(r["id"] for r in rejected) == ["none_kernel_in_macro", "none_pure_torch"]
    assert all(r["stage"] == "split-infill" and r["reasons"] for r in rejected)
    n_expected = sum(len(v.get("names", [])) for v in EXPECTED.values())
    assert len(kept) == n_expected
    assert all(check_row(r) and r["backend"] and r["pytorch_code"] for r in kept)


def test_cli_table_mode_with_fim(tmp_path):
    inp = tmp_path / "cands.parquet"
    candidate_table(inp)
    out = tmp_path / "infill.jsonl"
    res = CliRunner().invoke(main, ["split-infill", str(inp), "-o", str(out), "--quiet",
                                    "--granularity", "body", "--multi", "span",
                                    "--fim-format", "deepseek"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == len(CANDIDATES) - 2
    assert all(r["text"].startswith("<｜fim▁begin｜>") and check_row(r) for r in rows)
    assert {r["core_kind"] for r in rows} >= {"cuda_kernel_bodies", "cpp_kernel_body"}


def test_cli_default_reads_build_dir_and_writes_hub_shards(tmp_path, monkeypatch):
    build = tmp_path / "build"
    (build / "data").mkdir(parents=True)
    rows = [row_of(p.name) for p in CANDIDATES]
    write_rows(build / "data" / "train-00000-of-00002.parquet", rows[:9])
    write_rows(build / "data" / "train-00001-of-00002.parquet", rows[9:])
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["split-infill", "--quiet"])
    assert res.exit_code == 0, res.output
    shards = sorted((build / "infill").glob("*.parquet"))
    assert [p.name for p in shards] == ["train-00000-of-00001.parquet"]
    table = pq.read_table(shards[0]).to_pylist()
    assert all(check_row(r) for r in table)
    config = json.loads((build / "infill" / "config.json").read_text())
    assert config["pairs_in"] == len(rows) and config["pairs_rejected"] == 2
    assert config["rows"] == len(table) and config["granularity"] == "kernel"
    assert config["reasons"] == {"no_core": 1, "core_unparsed:cuda": 1}
    assert set(config["core_kinds"]) == {"cuda_kernel", "cpp_kernel", "triton_kernel"}
    assert (build / config["rejected_table"]).is_file()


def test_cli_errors_and_help(tmp_path):
    env_cmd = [sys.executable, "-m", "curate", "split-infill"]
    res = subprocess.run(env_cmd, cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 2 and "curate build" in res.stderr
    (tmp_path / "build" / "data").mkdir(parents=True)
    res = subprocess.run(env_cmd + ["build"], cwd=tmp_path, capture_output=True, text=True)
    assert res.returncode == 2 and "data/*.parquet" in res.stderr
    res = CliRunner().invoke(main, ["split-infill", "--help"])
    assert "Example:" in res.output and "--fim-format" in res.output


# -- solvability --------------------------------------------------------------------------------

def test_check_solvable_logic_with_a_fake_verifier():
    rows, _ = split_row(row_of("cuda_several_kernels.py"))

    def verify(row):  # "verifies" exactly when all three kernels are there
        return "verified" if row["kernel_code"].count("__global__ void") == 3 else "compile_error"

    res = check_solvable(rows, verify)
    assert [r.solvable for r in res] == [True, True, True]
    assert all(r.full == "verified" and r.empty == "compile_error" for r in res)
    assert not check_solvable(rows, lambda row: True)[0].solvable  # empty core passing: unsolvable
    assert len(check_solvable(rows, verify, sample=2)) == 2
    assert passed({"status": "verified"}) and not passed({"status": "incorrect"}) and passed(True)


@pytest.fixture(scope="module")
def inductor_cache(tmp_path_factory):
    """One inductor cache for this file's C++ compiles: the first one pays for the headers."""
    return str(tmp_path_factory.mktemp("inductor-cache"))


SOLVABLE = [(name, spec["reference"]) for name, spec in EXPECTED.items() if "reference" in spec]


@pytest.mark.slow
@pytest.mark.parametrize("name,reference,granularity", [
    ("triton_add_relu.py", "add_relu.py", "kernel"),
    ("triton_softmax_helpers.py", "row_softmax.py", "kernel"),  # two kernels, a jit helper
    ("cpp_ctypes_add_relu.py", "add_relu.py", "kernel"),
])
def test_rows_are_solvable_in_a_cpu_subprocess(name, reference, granularity):
    rows, _ = split_row(row_of(name, reference), SplitConfig(granularity))
    res = check_solvable(rows, subprocess_verify)
    assert [r.full for r in res] == ["verified"] * len(rows), res
    assert all(r.solvable for r in res), res


@pytest.mark.slow
def test_triton_and_cpp_rows_are_solvable_through_the_verify_harness():
    """The check through curate.verify (sandboxed workers, gates) on the CPU device: Triton under
    its interpreter, C++ built with the host compiler."""
    from curate.infill.solvable import harness_verify
    rows = []
    for name in ("triton_add_relu.py", "cpp_ctypes_add_relu.py"):
        rows += split_row(row_of(name, "add_relu.py"), SplitConfig("body"))[0]
    with harness_verify("cpu", workers=1, compile_ahead=False, timeout=300) as verify:
        res = check_solvable(rows, verify)
    assert [r.full for r in res] == ["verified", "verified"], res
    assert all(r.solvable for r in res), res


@pytest.mark.slow
@pytest.mark.skipif(not __import__("os").environ.get("CURATE_SLOW_TESTS"),
                    reason="needs CURATE_SLOW_TESTS=1: a minute of compiling inductor's "
                           "cpp_prefix.h (the ctypes C++ fixture covers the same check fast)")
def test_inductor_style_cpp_row_is_solvable_on_cpu(inductor_cache, monkeypatch):
    """Inductor-style C++ (AsyncCompile.cpp_pybinding): the first compile takes a minute."""
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", inductor_cache)
    rows, _ = split_row(row_of("cpp_inductor_add_relu.py", "add_relu.py"), SplitConfig("body"))
    (res,) = check_solvable(rows, subprocess_verify)
    assert res.full == "verified" and res.empty == "incorrect" and res.solvable, res


def test_pipeline_step_from_yaml_settings():
    from curate.errors import BadInput
    from curate.pipeline import config as pconfig
    (step,) = pconfig.build_steps({"steps": [{"split-infill": {"granularity": "body",
                                                               "fim_format": "qwen"}}]})
    assert isinstance(step, SplitInfill) and step.config()["granularity"] == "body"
    with pytest.raises(BadInput):
        pconfig.build_steps({"steps": [{"split-infill": {"granularity": "line"}}]})


# -- real inductor output ---------------------------------------------------------------------

CAPTURES = FIXTURES / "inductor" / "captures.json"


@pytest.mark.skipif(not CAPTURES.is_file(),
                    reason="needs tests/fixtures/inductor/captures.json (inductor GPU output "
                           "recorded by the synth fixtures)")
def test_real_inductor_triton_output_yields_exactly_the_launched_kernels():
    import ast
    captures = json.loads(CAPTURES.read_text())
    checked = 0
    for name, cap in captures.items():
        launches, codes = cap.get("launches") or [], cap.get("codes") or []
        launches = ast.literal_eval(launches) if isinstance(launches, str) else launches
        codes = ast.literal_eval(codes) if isinstance(codes, str) else codes
        got = []
        for code in codes:
            for cfg in CONFIGS:
                for p in split_code(code, cfg)[0]:
                    assert p["prefix"] + p["core"] + p["suffix"] == code, name
            got += [p["core_name"] for p in split_code(code)[0]]
        assert set(got) == {launch["kernel"] for launch in launches}, name
        checked += bool(codes)
    assert checked >= 10


RECORDED_CPU = HERE / "recorded" / "inductor_cpu_softmax_relu.py"


def test_recorded_inductor_cpu_output_yields_one_cpp_kernel_per_pybinding():
    """Real inductor C++ output (recorded with torch.compile on CPU, see the file's header)."""
    code = RECORDED_CPU.read_text(encoding="utf-8")
    n = code.count("async_compile.cpp_pybinding(")
    assert n == 2
    for cfg in CONFIGS:
        parts, reasons = split_code(code, cfg)
        assert parts and all(p["prefix"] + p["core"] + p["suffix"] == code for p in parts)
    parts, _ = split_code(code)
    assert [p["core_name"] for p in parts] == ["cpp_fused_add_relu_sum_0",
                                               "cpp_fused__softmax_add_mean_relu_sub_1"]
    assert {p["core_kind"] for p in parts} == {"cpp_kernel"}
    assert all(p["core"].startswith('extern "C"  void  kernel(') and p["core"].endswith("}")
               for p in parts)
    bodies, _ = split_code(code, SplitConfig("body"))
    assert all(b["prefix"].endswith("{") and b["suffix"].startswith("}\n''')") for b in bodies)


def test_recorded_synth_cpp_candidate():
    """A real `curate synth inductor --device cpu` candidate: kernels in a CPP_KERNELS dict of raw
    strings, entry points renamed from kernel() to the kernel's name, called through ctypes."""
    code = (HERE / "recorded" / "synth_cpp_gelu_bias_residual.py").read_text(encoding="utf-8")
    (part,), reasons = split_code(code)
    assert part["core_name"] == "cpp_fused_add_gelu_0" and part["core_kind"] == "cpp_kernel"
    assert part["core"].startswith('extern "C"  void  cpp_fused_add_gelu_0(const float* in_ptr0,')
    assert "CPP_KERNELS = {" in part["prefix"] and "def _load_kernels" in part["suffix"]
    (body,), _ = split_code(code, SplitConfig("body"))
    assert body["prefix"].endswith("float* out_ptr0)\n{") and body["suffix"].startswith("}\n'''),")


def test_cli_check_solvable_records_the_sample_in_config(tmp_path, monkeypatch):
    """--check-solvable plumbing (the verifier is faked here; the real one is tested above)."""
    import contextlib

    import curate.infill.solvable as solvable

    @contextlib.contextmanager
    def fake_harness(device="cpu", **_):
        yield lambda row: "verified" if row["kernel_code"].count("def ") >= 2 or \
            "extern" in row["kernel_code"] else "compile_error"

    monkeypatch.setattr(solvable, "harness_verify", fake_harness)
    build = tmp_path / "b"
    (build / "data").mkdir(parents=True)
    write_rows(build / "data" / "train-00000-of-00001.parquet",
               [row_of("triton_add_relu.py"), row_of("cpp_inductor_add_relu.py"),
                row_of("cuda_fstring.py")])
    res = CliRunner().invoke(main, ["split-infill", str(build), "--quiet", "--check-solvable", "5"])
    assert res.exit_code == 0, res.output
    sol = json.loads((build / "infill" / "config.json").read_text())["solvability"]
    assert sol["device"] == "cpu" and sol["checked"] == 2  # the CUDA row needs a GPU
    assert "solvability: " in res.output


def test_cli_build_dir_to_a_table(tmp_path):
    build = tmp_path / "b"
    (build / "data").mkdir(parents=True)
    write_rows(build / "data" / "train-00000-of-00002.parquet", [row_of("triton_add_relu.py")])
    write_rows(build / "data" / "train-00001-of-00002.parquet", [row_of("cuda_fstring.py")])
    out = tmp_path / "infill.parquet"
    res = CliRunner().invoke(main, ["split-infill", str(build), "-o", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    assert [r["core_name"] for r in read_rows(out)] == ["add_relu_kernel", "rowsum_kernel"]
    assert not (build / "infill").exists()


@pytest.mark.parametrize("code,core,warn", [
    # a variable extended by itself: the definition spans two assignments -> clipped
    ('src = "__global__ void k(float* x) {"\nsrc = src + "x[0]=1;}"\nm = load_inline("a", "", src)\n',
     '__global__ void k(float* x) {', "core_clipped"),
    # "\n".join over a list in a variable: the pieces sit side by side in one list
    ('parts = ["#include <x>", "__global__ void k(float* x) {", "  x[0] = 1;", "}"]\n'
     'src = "\\n".join(parts)\nload_inline("n", "", src)\n',
     '__global__ void k(float* x) {", "  x[0] = 1;", "}', None),
    # %-formatting: placeholders (and printf's) do not break the parse
    ('src = """__global__ void k(float* x) { x[0] = %d; printf("%s %%", "a"); }""" % 3\n'
     'load_inline("n", "", src)\n',
     '__global__ void k(float* x) { x[0] = %d; printf("%s %%", "a"); }', None),
    # cupy's RawKernel, a bytes literal
    ('k = cp.RawKernel(r"""extern "C" __global__ void add(float* b) { b[0] = 1; }""", "add")\n',
     'extern "C" __global__ void add(float* b) { b[0] = 1; }', None),
    ('src = b"""__global__ void k(float* x) { x[0] = 1; }"""\n',
     '__global__ void k(float* x) { x[0] = 1; }', None),
])
def test_more_ways_to_build_a_source(code, core, warn):
    (row,), _ = split_row({"kernel_code": code, "reasons": []})
    assert row["core"] == core and check_row(row)
    assert (warn in row["reasons"]) if warn else row["reasons"] == []
