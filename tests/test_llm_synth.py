"""`curate synth llm` and the synth-llm step against the loopback server (tests/support/llmserver.py):
the rows it writes, the response cache, refinement turns on the CPU, resume after SIGKILL,
and a whole build (synth-llm -> dedup -> verify -> select -> keep) on replayed replies."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parent))
from tests.support.llmserver import LLMServer, Replay  # noqa: E402

from curate.cli import main  # noqa: E402
from curate.tableio import read_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

TINY = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
'''

OTHER = TINY.replace("torch.relu(x) * 2.0 + 1.0", "torch.sigmoid(x) - 0.5")

TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_affine_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0) * 2.0 + 1.0, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_affine_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
'''
TRITON_WRONG = TRITON.replace("* 2.0 + 1.0", "* 3.0 + 1.0")

CUDA = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>
__global__ void relu_affine(const float* x, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i], 0.f) * 2.f + 1.f;
}
torch::Tensor relu_affine_cuda(torch::Tensor x) {
    auto out = torch::empty_like(x);
    int n = x.numel();
    relu_affine<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), out.data_ptr<float>(), n);
    return out;
}
"""

ext = load_inline(name="relu_affine", cpp_sources="torch::Tensor relu_affine_cuda(torch::Tensor x);",
                  cuda_sources=source, functions=["relu_affine_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_affine_cuda(x.contiguous())
'''


def fence(code: str, before: str = "Here is the program:") -> str:
    return f"{before}\n\n```python\n{code}```\n"


@pytest.fixture()
def problems(tmp_path):
    """Two small reference programs, and replies for the first only (the second gets none)."""
    ex = tmp_path / "examples"
    ex.mkdir()
    (ex / "01_tiny.py").write_text(TINY)
    (ex / "02_other.py").write_text(OTHER)
    rp = tmp_path / "replay" / "01_tiny"
    rp.mkdir(parents=True)
    (rp / "triton-s0-t0.md").write_text("<think>one pass</think>\n" + fence(TRITON_WRONG))
    (rp / "triton-s0-t1.md").write_text(fence(TRITON, "The scale was wrong; fixed:"))
    (rp / "triton-s1-t0.md").write_text("Unfenced:\n\n" + TRITON + "\nDone.\n")
    (rp / "triton-s1-t0.reasoning.txt").write_text("reasoning field")
    (rp / "cuda-s0-t0.md").write_text(fence(CUDA))
    return ex, tmp_path / "replay"


@pytest.fixture()
def replay_server(problems):
    ex, folder = problems
    with LLMServer(Replay(folder, ex)) as s:
        yield s


def refs(tmp_path, ex) -> Path:
    out = tmp_path / "refs.parquet"
    res = CliRunner().invoke(main, ["ingest", str(ex), "-o", str(out)])
    assert res.exit_code == 0, res.output
    return out


def synth(server, inp, out, *extra):
    return CliRunner().invoke(main, ["synth", "llm", str(inp), "-o", str(out), "--model", "replay",
                                     "--base-url", server.url, "--api-key-env", "NO_SUCH_KEY_VAR",
                                     "--backend", "triton", "--samples", "2", "--price-input",
                                     "1.0", "--price-output", "4.0", *extra])


def test_rows_carry_the_conversation_reasoning_tokens_and_cost(tmp_path, problems, replay_server):
    inp = refs(tmp_path, problems[0])
    out = tmp_path / "cands.parquet"
    res = synth(replay_server, inp, out)
    assert res.exit_code == 0, res.output
    rows = {(r["sample"], r["turn"]): r for r in read_rows(out)}
    assert set(rows) == {(0, 0), (1, 0)}
    s0, s1 = rows[(0, 0)], rows[(1, 0)]
    assert s0["kernel_code"] == TRITON_WRONG and s1["kernel_code"].strip() == TRITON.strip()
    assert s0["reasoning"] == "one pass" and s1["reasoning"] == "reasoning field"
    assert s0["backend"] == "triton" and s0["model"] == "replay" and s0["parent_id"] is None
    ref = next(r for r in read_rows(inp) if "relu" in r["pytorch_code"])
    assert s0["ref_id"] == ref["id"]
    msgs = json.loads(s0["messages"])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant"]
    assert TINY.strip() in msgs[1]["content"] and s0["prompt"] == msgs[1]["content"]
    assert s0["prompt_tokens"] > 100 and s0["completion_tokens"] > 50 and s0["latency_s"] > 0
    want = (s0["prompt_tokens"] * 1.0 + s0["completion_tokens"] * 4.0) / 1e6
    assert s0["cost_usd"] == pytest.approx(want)
    assert json.loads(s0["sampling"]) == {"temperature": 0.7, "top_p": 1.0,
                                          "max_tokens": 8192, "seed": 0}
    rejected = read_rows(tmp_path / "cands.rejected.parquet")
    assert len(rejected) == 2 and {r["sample"] for r in rejected} == {0, 1}
    assert all(r["reasons"] == ["synth:no_code"] and r["stage"] == "synth-llm" for r in rejected)


def test_a_rerun_sends_zero_requests(tmp_path, problems, replay_server):
    inp = refs(tmp_path, problems[0])
    out = tmp_path / "cands.parquet"
    assert synth(replay_server, inp, out).exit_code == 0
    sent = len(replay_server.state.requests)
    assert sent == 4
    first = sorted((r["id"], r["cost_usd"]) for r in read_rows(out))
    # the ledger gone too: only the response cache stands between the rerun and the server
    for p in tmp_path.glob("cands.*"):
        if "llm-cache" not in p.name:
            p.unlink()
    assert synth(replay_server, inp, out).exit_code == 0
    assert len(replay_server.state.requests) == sent
    assert sorted((r["id"], r["cost_usd"]) for r in read_rows(out)) == first


def refine_cuda(server, inp, out, device):
    return CliRunner().invoke(main, ["synth", "llm", str(inp), "-o", str(out), "--model", "replay",
                                     "--base-url", server.url, "--backend", "cuda", "--turns", "2",
                                     "--device", device])


def test_cuda_refinement_on_the_cpu_says_it_could_not_check(tmp_path, problems, replay_server):
    inp = refs(tmp_path, problems[0])
    out = tmp_path / "cands.parquet"
    assert refine_cuda(replay_server, inp, out, "cpu").exit_code == 0
    turn1 = [r for r in replay_server.state.requests if len(r["messages"]) == 4]
    assert len(turn1) == 2  # both problems, the second answered without code at turn 0
    said = {r["messages"][-1]["content"] for r in turn1}
    assert any("CPU" in s and "unsupported" in s and "static checks" in s for s in said)
    assert any("no complete program" in s for s in said)
    rows = {r["turn"]: r for r in read_rows(out)}
    assert rows[1]["parent_id"] == rows[0]["id"] and "unsupported" in rows[0]["feedback"]
    assert json.loads(rows[1]["messages"])[3]["content"] == rows[0]["feedback"]


def _pipeline(tmp_path: Path, ex: Path, url: str, steps: str, **synth) -> Path:
    args = {"model": "replay", "base_url": url, "api_key_env": "", "backend": "triton",
            "samples": 2, "turns": 1, **synth}
    p = tmp_path / "pipe.yaml"
    p.write_text(f"name: t\ndevice: cpu\nthreshold: 0.0\nsource:\n  ingest: {{paths: "
                 f"[{json.dumps(str(ex))}]}}\nsteps:\n  - synth-llm: {json.dumps(args)}\n"
                 f"{steps}")
    return p


@pytest.mark.parametrize("executor", ["local", "ray"])
def test_build_on_replayed_replies_refines_verifies_and_selects(tmp_path, problems,
                                                               replay_server, executor, request):
    """ingest -> synth-llm (2 samples, 2 turns, Triton checked under the interpreter) -> dedup
    -> verify -> select -> keep, and the turn-1 prompt carries the turn-0 mismatch; streamed
    here and on a Ray cluster alike."""
    if executor == "ray":
        request.getfixturevalue("ray_cluster")
    ex, _ = problems
    pipe = _pipeline(tmp_path, ex, replay_server.url,
                     '  - dedup: {jaccard: 0.9, "on": kernel}\n  - verify: {}\n'
                     "  - select: {by: concise, per_problem: 1}\n  - keep: {}\n", turns=2)
    out = tmp_path / "b"
    res = CliRunner().invoke(main, ["build", "--pipeline", str(pipe), "--out", str(out),
                                    "--quiet", "--executor", executor])
    assert res.exit_code == 0, res.output
    fix = [r for r in replay_server.state.requests
           if len(r["messages"]) == 4 and r["seed"] == 0 and TINY.strip() in
           r["messages"][1]["content"]]
    assert len(fix) == 1
    assert "do not match the reference" in fix[0]["messages"][-1]["content"]
    assert "max absolute error" in fix[0]["messages"][-1]["content"]
    stats = json.loads((out / "stats.json").read_text())
    by = {s["name"]: s for s in stats["stages"]}
    assert by["synth-llm"]["rows_out"] == 4 and by["synth-llm"]["dropped"] == 4
    assert by["synth-llm"]["extra"]["turn0_incorrect"] == 1
    assert by["synth-llm"]["extra"]["turn0_correct"] == 1
    # verify sees every candidate (dedup comes after it: the turn-0 mismatch is verified too);
    # of its near copies, dedup keeps the verified one
    assert by["verify"]["statuses"] == {"verified": 3, "incorrect": 1}
    assert {r["status"] for r in read_rows(out / "stages" / "04-dedup.parquet")} == {"verified"}
    assert by["select"]["rows_out"] == 1 and by["select"]["extra"]["rule"] == "concise"
    chosen = read_rows(out / "stages" / "05-select.parquet")
    assert chosen[0]["status"] == "verified" and "relu_affine_kernel" in chosen[0]["kernel_code"]
    assert "* 2.0 + 1.0" in chosen[0]["kernel_code"]
    assert by["keep"]["reasons"] == {"speed_not_measured": 1}  # the CPU measures no Triton speed
    card = (out / "README.md").read_text()
    assert "**LLM synthesis:**" in card and "**Selection:**" in card
    traces = read_rows(out / "stages" / "02-synth-llm.parquet")
    t1 = next(r for r in traces if r["sample"] == 0 and r["turn"] == 1)
    t0 = next(r for r in traces if r["sample"] == 0 and r["turn"] == 0)
    assert t1["parent_id"] == t0["id"] and "do not match" in t0["feedback"]


def test_resume_after_sigkill_pays_for_no_reply_twice(tmp_path, problems):
    ex, folder = problems
    replay = Replay(folder, ex)
    delay = {"s": 0.4}

    def slow(req):
        time.sleep(delay["s"])
        return replay(req)

    with LLMServer(slow) as server:
        pipe = _pipeline(tmp_path, ex, server.url, "", samples=3, concurrency=1, batch_size=1)
        out = tmp_path / "b"
        cmd = [sys.executable, "-m", "curate", "build", "--pipeline", str(pipe), "--out", str(out),
               "--quiet"]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while len(server.state.requests) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        first = len(server.state.requests)
        assert 4 <= first < 6  # cut short: 6 requests in all (2 problems x 3 samples)
        db = sqlite3.connect(out / "llm-cache.sqlite")
        paid = db.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
        db.close()
        assert paid >= 3
        delay["s"] = 0.0
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert len(server.state.requests) - first == 6 - paid
        keys = {(json.dumps(r["messages"]), r["seed"]) for r in server.state.requests}
        assert len(keys) == 6
    rows = read_rows(out / "stages" / "01-synth-llm.parquet")
    rejected = read_rows(out / "stages" / "01-synth-llm.rejected.parquet")
    assert len(rows) + len(rejected) == 6


@pytest.mark.gpu
def test_gpu_refinement_tells_the_model_its_measured_speedup(tmp_path, problems, replay_server):
    """On the GPU the CUDA candidate is compiled, checked and timed, and turn 1 hears how fast."""
    inp = refs(tmp_path, problems[0])
    out = tmp_path / "cands.parquet"
    res = refine_cuda(replay_server, inp, out, "cuda")
    assert res.exit_code == 0, res.output
    t0 = next(r for r in read_rows(out) if r["turn"] == 0 and "relu_affine" in r["kernel_code"])
    assert "as fast as the reference on" in t0["feedback"], t0["feedback"]
