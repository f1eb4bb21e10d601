"""The verification record on verified and rejected rows, the second shape, and `curate replay`
(C++ candidates on the CPU; the Triton and CUDA variants are marked `gpu`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from curate.cli import main
from curate.errors import BadInput
from curate.hub.shards import write_shards
from curate.tableio import write_rows
from curate.verify import Verifier
from curate.verify import replay as replay_mod
from curate.verify.record import read
from curate.verify.replay import speed_agrees
from curate.verify.shapes import second_shape

FIX = Path(__file__).parent / "fixtures" / "verify"
REF = (FIX / "ref_scale_add.py").read_text()
REF_FIXED = (FIX / "ref_scale_add_fixed.py").read_text()


def pair(rid: str, kernel: str, ref: str = REF, backend: str = "cpp", **extra) -> dict:
    # each row its own code, so that its own compile cache (rows of one code share one)
    code = (FIX / f"{kernel}.py").read_text() + f"\n# {rid}\n"
    return {"id": rid, "pytorch_code": ref, "kernel_code": code, "backend": backend,
            "source": "file", **extra}


ROWS = [pair("honest", "cpp_honest"), pair("hidden_size", "cpp_hidden_size"),
        pair("sizes_inside", "cpp_honest", ref=REF_FIXED),
        pair("static_compile", "cpp_honest", generator="torch-2.13.0/inductor"),
        pair("compile_error", "cpp_compile_error"),
        pair("triton_hidden_size", "triton_hidden_size", backend="triton")]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("compile-cache")


@pytest.fixture(scope="module")
def verified(cache_dir):
    with Verifier(device="cpu", workers=2, timeout=60, cache_dir=cache_dir, memory_gb=4) as v:
        results = {ROWS[i]["id"]: r for i, r in v.verify(ROWS)}
    return results


def _rec(res) -> dict:
    rec = read(res.verification)
    assert rec is not None, "every row verify answers carries a record"
    return rec


# -- the record --------------------------------------------------------------------------------
def test_a_verified_row_records_what_was_checked_on_what(verified):
    res = verified["honest"]
    assert res.status == "verified"
    rec = _rec(res)
    assert rec["versions"]["curate"] and set(rec["versions"]["gates"]) == {"parent", "judge",
                                                                            "worker"}
    assert rec["outcome"]["status"] == "verified"
    assert "torch_in_forward" in rec["findings"]["passed"]          # parent gates ran
    assert "input_mutated" in rec["findings"]["passed"]             # worker gates ran
    assert rec["seeds"]["trials"] and "never recorded" in rec["seeds"]["secret"]
    (x, y), = [s for s in rec["inputs"][:1]]
    assert x["shape"] == [64, 256] and x["dtype"] == "float32" and x["min"] < 0 < x["max"]
    assert len(rec["inputs"]) == 3                                  # one per trial
    (out,) = rec["outputs"]
    assert out["atol"] == 0.01 and out["rtol"] == 0.01 and out["max_abs_err"] is not None
    t = rec["timing"]
    assert t["method"].startswith("wall clock") and t["kernel_ms"]["n"] >= 20
    assert t["interval"] == [pytest.approx(res.speedup_ci_low, rel=1e-4),
                             pytest.approx(res.speedup_ci_high, rel=1e-4)]
    # each side's harness cost per timed call by part (evidence of where the fixed cost goes)
    spent = t["check"]["harness_ms_per_call"]
    assert set(spent) == {"judge", "candidate"}
    for side in spent.values():
        assert set(side) == {"before", "after", "digest"} and all(v > 0 for v in side.values())
        assert sum(side.values()) < 10 * t["check"]["overhead_ms"] + 1
    assert rec["device"]["kind"] == "cpu" and rec["device"]["cores"]
    assert rec["software"]["torch"] and rec["software"]["flags"]["extra_cflags"] == ["-O2"]
    assert rec["sandbox"]["candidate"] == res.sandbox
    assert rec["second_shape"]["checked"] and rec["second_shape"]["sizes"] == {"N": [256, 512]}
    # the first pass's two workers ran it: no worker was started for the second shape
    assert rec["second_shape"]["reused_workers"] is True
    assert not any(k.startswith("second shape starting") for k in res.notes["phases_s"])
    assert rec["second_opinion"]["tool"] == "kernelguard"
    # inside the workers' requests, by part: the judge's loading, receiving and comparing,
    # and the candidate's worker's checks of its correctness calls and its exports
    work = rec["work_s"]
    assert {"load_model", "load_sets", "receive", "compare", "precision"} <= set(work["judge"])
    assert {"gates", "export"} <= set(work["candidate"])
    assert all(v >= 0 for side in work.values() for v in side.values())


def test_a_rejected_row_records_what_failed_and_where(verified):
    res = verified["compile_error"]
    assert res.status == "compile_error"
    rec = _rec(res)
    assert rec["outcome"]["status"] == "compile_error" and rec["outcome"]["error"]
    assert rec["outcome"]["phase"]                       # the phase it ended in
    assert rec["timing"] is None and rec["second_shape"]["checked"] is False


def test_a_kernel_written_for_one_shape_is_shape_specialized(verified):
    tri = verified["triton_hidden_size"]   # under the Triton interpreter: checked, not timed
    assert tri.status == "shape_specialized", (tri.reasons, tri.error)
    # uninitialized rows in its output: the gates or the comparison say so, at that size
    assert any(r.startswith("second_shape:") for r in tri.reasons)
    res = verified["hidden_size"]
    assert res.status == "shape_specialized", (res.reasons, res.error)
    assert "shape_specialized" in res.reasons and "second_shape:shape_mismatch" in res.reasons
    rec = _rec(res)
    assert rec["second_shape"]["sizes"] == {"N": [256, 512]}
    assert rec["second_shape"]["inputs"][0][0]["shape"] == [64, 512]
    assert rec["second_shape"]["reused_workers"] is True


def test_a_second_shape_that_cannot_grow_the_rows_memory_runs_on_fresh_workers(
        cache_dir, monkeypatch):
    """Where the row may not wait for the device's memory to take the second size beside its
    first (scheduler.MemoryGate.regrow), the row gives its reservation back and the second
    pass waits for one of its own, on a fresh pair of workers: the verdict is the same."""
    from curate.verify.row import RowRun
    from curate.verify.scheduler import MemoryGate
    need = RowRun._need
    # the second size needs more than the first (on the CPU both are the base estimate), and
    # the device has no room for the difference now
    monkeypatch.setattr(RowRun, "_need", lambda self, device, size_gb, scale=1.0:
                        need(self, device, size_gb) + (2.0 if scale != 1.0 else 0.0))
    monkeypatch.setattr(MemoryGate, "regrow", lambda self, grant, gb: False)
    rows = [pair("hidden_size_alone", "cpp_hidden_size")]
    with Verifier(device="cpu", workers=1, timeout=60, cache_dir=cache_dir, memory_gb=4) as v:
        (_, res), = v.verify(rows)
    assert res.status == "shape_specialized", (res.reasons, res.error)
    assert _rec(res)["second_shape"]["reused_workers"] is False
    assert any(k.startswith("second shape starting") for k in res.notes["phases_s"])


SLOW_FIRST = """
import time

import torch
import torch.nn as nn

CALLS, SLOWED = [0], []


class ModelNew(nn.Module):
    # the reference's own arithmetic: slow in its first calls, and once at the second size
    def __init__(self, n):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(n))

    def forward(self, x, y):
        CALLS[0] += 1
        if x.shape[-1] != 256 and not SLOWED:
            SLOWED.append(1)
            time.sleep(5.0)
        elif CALLS[0] <= 4:
            time.sleep(2.0)
        return x * 2.0 + y + self.bias
"""


def test_a_second_shape_gets_its_own_phase_budgets(cache_dir):
    """The second pass's correctness has a budget of its own: an honest candidate whose first
    pass spent most of the correctness budget (6-8 of 10 s) and needs 5 s at the second size
    stays `verified`; sharing the first pass's budget, it timed out there and was called
    `shape_specialized`."""
    row = {"id": "slow_first", "pytorch_code": REF, "kernel_code": SLOW_FIRST,
           "backend": "cpp", "source": "file"}
    with Verifier(device="cpu", workers=1, timeout=10, cache_dir=cache_dir, memory_gb=4,
                  gates=False) as v:
        (_, res), = v.verify([row])
    note = _rec(res)["second_shape"]
    assert res.status == "verified", (res.status, res.reasons, res.error, note)
    assert note["checked"] is True and note["status"] == "verified", note


def test_sizes_inside_functions_keep_the_status_and_say_so(verified):
    res = verified["sizes_inside"]
    assert res.status == "verified"
    got = _rec(res)["second_shape"]
    assert got["checked"] is False and got["why"] == "sizes_not_module_constants"


def test_a_static_compile_is_not_checked_at_a_second_shape_by_default(verified):
    got = _rec(verified["static_compile"])["second_shape"]
    assert verified["static_compile"].status == "verified", verified["static_compile"].error
    assert got == {"mode": "auto", "checked": False, "why": "static_compile"}


# -- the second shape's rewrite (source text only) ----------------------------------------------
def test_second_shape_doubles_the_first_and_last_size_constants():
    code = "import torch\nbatch_size = 16\nhidden = 32\nkernel_size = 3\n" \
           "def get_inputs():\n    return [torch.randn(batch_size, 8, hidden)]\n"
    got = second_shape(code)
    assert got.sizes == {"batch_size": (16, 32), "hidden": (32, 64)}
    assert "batch_size = 32" in got.code and "hidden = 64" in got.code
    assert "kernel_size = 3" in got.code


def test_second_shape_reads_tuple_assignments_and_keeps_the_rest_of_the_line():
    code = "import torch\nROWS, HIDDEN = 16, 8  # sizes\n" \
           "def get_inputs():\n    return [torch.randn(ROWS, HIDDEN)]\n"
    got = second_shape(code)
    assert got.sizes == {"ROWS": (16, 32), "HIDDEN": (8, 16)}
    assert "ROWS, HIDDEN = 32, 16  # sizes" in got.code


def test_second_shape_is_not_possible_for_sizes_inside_functions():
    assert second_shape(REF_FIXED).why == "sizes_not_module_constants"
    assert second_shape("x = 1\n").why == "no_get_inputs"


# -- the second opinion --------------------------------------------------------------------------
def test_the_second_opinion_labels_a_cache_and_a_hang_costs_only_the_label(monkeypatch):
    from curate.verify import opinion
    got = opinion.second_opinion((FIX / "stale_cache.py").read_text())
    assert got["tool"] == "kernelguard" and got["flagged"] and got["labels"]
    assert opinion.second_opinion((FIX / "cpp_honest.py").read_text())["flagged"] is False
    monkeypatch.setattr(opinion, "TIMEOUT_S", 0.5)
    with pytest.raises(TimeoutError):       # as if its patterns backtracked for ever
        opinion._ask(60, fn=time.sleep)
    assert opinion.second_opinion("x = 1\n")["flagged"] is False   # a fresh helper


# -- replay ------------------------------------------------------------------------------------
def test_speed_agrees_within_the_intervals_noise():
    cpu = {"kind": "cpu", "cpu": "x"}
    then = {"speedup": 2.0, "speedup_ci_low": 1.9, "speedup_ci_high": 2.1, "device": cpu}
    assert speed_agrees(then, {"speedup": 2.3, "device": cpu}, "cpu")[0]
    assert not speed_agrees(then, {"speedup": 3.0, "device": cpu}, "cpu")[0]
    # a replay's own interval counts: two measurements agree when their intervals meet
    assert speed_agrees(then, {"speedup": 3.0, "speedup_ci_low": 2.2, "speedup_ci_high": 3.2,
                               "device": cpu}, "cpu")[0]
    assert not speed_agrees(then, {"speedup": 3.0, "speedup_ci_low": 2.9,
                                   "speedup_ci_high": 3.2, "device": cpu}, "cpu")[0]
    other = {"speedup": 9.0, "device": {"kind": "cuda", "gpu": "H200"}}
    assert speed_agrees(then, other, "cuda")[0]   # another device: status only


@pytest.fixture()
def table(verified, tmp_path):
    rows = []
    for row in ROWS[:1]:
        res = verified[row["id"]]
        rows.append({**row, **res.columns(), "reasons": list(res.reasons)})
    path = tmp_path / "verified.parquet"
    write_rows(path, rows)
    return path, rows


def test_replay_agrees_on_an_honest_row_of_a_downloaded_dataset(table, monkeypatch, tmp_path):
    # a shared CI machine moves a small CPU kernel's speed by 2x between two runs (0.39x then,
    # 0.77x now): this test holds the downloaded layout, the status and that a speed was compared
    # on the same device; test_speed_agrees_within_the_intervals_noise holds the noise rule
    monkeypatch.setitem(replay_mod.NOISE, "cpu", 1.5)
    _, rows = table
    copy = tmp_path / "copy"          # what `huggingface-cli download` leaves: data/ shards
    write_shards(None, copy / "data", rows=rows)
    res = CliRunner().invoke(main, ["replay", str(copy), "honest"])
    assert res.exit_code == 0, res.output
    assert "agree     yes" in res.output and "1 of 1 rows agree" in res.output
    assert "speedup within the interval's noise" in res.output


def test_replay_disagrees_when_the_kernel_was_changed(table, tmp_path):
    _, rows = table
    changed = dict(rows[0])
    changed["kernel_code"] = changed["kernel_code"].replace("* 2.0f", "* 2.5f")
    path = tmp_path / "changed.jsonl"
    write_rows(path, [changed])
    res = CliRunner().invoke(main, ["replay", str(path), "honest"])
    assert res.exit_code == 1, res.output
    assert "status verified then, incorrect now" in res.output


def test_replay_bad_input_names_the_file_and_the_fix(table, tmp_path):
    # BadInput is exit 2 at the console entry point (tests/test_bad_input.py holds that edge)
    path, _ = table
    res = CliRunner().invoke(main, ["replay", str(path), "no-such-row"])
    assert isinstance(res.exception, BadInput) and str(path) in str(res.exception)
    assert "fix:" in str(res.exception)
    res = CliRunner().invoke(main, ["replay", str(tmp_path / "missing"), "honest"])
    assert isinstance(res.exception, BadInput) and "fix:" in str(res.exception)


# -- GPU variants --------------------------------------------------------------------------------
@pytest.mark.gpu
def test_gpu_records_and_shape_specialized_for_triton_and_cuda(tmp_path):
    rows = [pair("triton_honest", "triton_honest", backend="triton"),
            pair("cuda_gelu", "cuda_fused_gelu", backend="cuda",
                 ref=(FIX / "ref_gelu_residual.py").read_text()),
            pair("cuda_hidden", "cuda_hidden_size", backend="cuda"),
            pair("triton_hidden", "triton_hidden_size", backend="triton")]
    with Verifier(device="cuda", timeout=120, cache_dir=tmp_path) as v:
        got = {rows[i]["id"]: r for i, r in v.verify(rows)}
    for name in ("triton_honest", "cuda_gelu"):
        rec = _rec(got[name])
        assert got[name].status == "verified", (name, got[name].reasons, got[name].error)
        assert rec["device"]["kind"] == "cuda" and rec["device"]["gpu"]
        assert rec["device"]["capability"] and rec["timing"]["l2_flush"] is True
        assert rec["second_shape"]["checked"], rec["second_shape"]
    for name in ("cuda_hidden", "triton_hidden"):
        assert got[name].status == "shape_specialized", (name, got[name].reasons,
                                                         got[name].error)
    assert json.loads(got["triton_honest"].verification)["software"]["triton"]
    # each worker's allocator peak by kind of request: which request holds the most copies
    mem = _rec(got["cuda_gelu"])["memory"]
    assert {"Load", "Calls"} <= set(mem["candidate_peak_by_request_gb"]), mem
    # the judge's correctness outputs come by Reference (its Calls are timed ones only)
    assert {"Load", "Reference", "Compare"} <= set(mem["judge_peak_by_request_gb"]), mem
    assert mem["candidate_peak_gb"] >= max(mem["candidate_peak_by_request_gb"].values()), mem


@pytest.mark.gpu
@pytest.mark.gpu_timing
def test_gpu_replay_agrees_on_an_honest_row_and_not_on_a_changed_one(tmp_path):
    """A row whose kernel the clock can resolve (the fused GELU over 256 MiB tensors, about 2x):
    a tiny one (a few microseconds) is below the harness's per-call cost, its speedup is that
    cost's noise, and a replay of it need not fall within the interval."""
    row = pair("gelu", "triton_gelu_residual", backend="triton",
               ref=(FIX / "ref_gelu_residual.py").read_text())
    with Verifier(device="cuda", timeout=120, cache_dir=tmp_path / "cache") as v:
        res = v.verify_one(row)
    assert res.status == "verified", (res.reasons, res.error)
    full = {**row, **res.columns(), "reasons": list(res.reasons)}
    write_shards(None, tmp_path / "copy" / "data", rows=[full])
    got = CliRunner().invoke(main, ["replay", str(tmp_path / "copy"), "gelu"])
    assert got.exit_code == 0, got.output
    wrong = full["kernel_code"].replace("g + tl.load(r_ptr", "g - tl.load(r_ptr")
    assert wrong != full["kernel_code"]
    write_rows(tmp_path / "changed.parquet", [{**full, "kernel_code": wrong}])
    got = CliRunner().invoke(main, ["replay", str(tmp_path / "changed.parquet"), "gelu"])
    assert got.exit_code == 1 and "incorrect now" in got.output, got.output


def test_replay_finds_a_row_by_prefix_in_a_builds_stages_and_says_when_it_is_ambiguous(
        tmp_path):
    from curate.errors import BadInput
    from curate.verify.replay import find_rows
    build = tmp_path / "build"
    (build / "stages").mkdir(parents=True)
    rec = json.dumps({"settings": {"device": "cpu"}})
    base = {"pytorch_code": REF, "kernel_code": "x", "backend": "cpp"}
    write_rows(build / "stages" / "02-dedup.parquet", [{**base, "id": "abcdef01"}])
    write_rows(build / "stages" / "03-verify.parquet",
               [{**base, "id": "abcdef01", "verification": rec},
                {**base, "id": "abcdef02", "verification": rec}])
    (row,) = find_rows(build, ["abcdef01"])        # the copy with a record, not dedup's
    assert row["verification"] == rec
    with pytest.raises(BadInput, match="2 rows have ids starting"):
        find_rows(build, ["abcdef"])


def test_what_the_second_pass_blames_on_the_candidate():
    from curate.verify.resized import not_judged
    assert not_judged("incorrect", ["shape_mismatch"], "cpu") is None
    assert not_judged("crashed", ["signal:SIGSEGV"], "cuda") is None
    assert not_judged("timeout", ["candidate_timeout"], "cpu") is None   # it hung, not the ref
    # cut by what was left of the row's deadline: the first pass spent it
    assert not_judged("timeout", ["candidate_timeout", "row_deadline"], "cpu") == "row_deadline"
    assert not_judged("timeout", ["correctness_deadline"], "cpu") == "timeout"
    assert not_judged("reference_error", ["judge_timeout"], "cuda") == "reference_fails"
    assert not_judged("runtime_error", ["out_of_memory"], "cuda") == "out_of_memory"
    assert not_judged("runtime_error", ["out_of_memory"], "cpu") is None
