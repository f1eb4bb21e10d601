"""curate dedup: tokens, signatures, banding, clusters, decontamination, the Redis index, CLI."""

from __future__ import annotations

import logging
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from curate.cli import main
from curate.dedup import tokens as T
from curate.dedup.core import dedup
from curate.dedup.index import candidate_pairs, lsh_params
from curate.dedup.minhash import SketchConfig, shingle_set, sketch, sketch_parallel
from curate.dedup.step import Dedup
from curate.errors import BadInput
from curate.pipeline.single import run_single
from curate.record import content_hash
from curate.tableio import read_rows, write_rows

FIX = Path(__file__).parent / "fixtures" / "dedup"
EVALSET = FIX / "evalset"

PROGRAM = '''import torch
import torch.nn as nn


def scaled_gelu(hidden_states, scale_factor):
    gated = torch.nn.functional.gelu(hidden_states) * scale_factor
    return gated + hidden_states.mean(dim=-1, keepdim=True)


class Model(nn.Module):
    """A block that mixes a projection, a GELU and a residual."""

    def __init__(self, in_features, out_features):
        super().__init__()
        self.projection = nn.Linear(in_features, out_features)
        self.norm = nn.LayerNorm(out_features)

    def forward(self, inputs):
        projected = self.projection(inputs)
        normalized = self.norm(projected)
        activated = scaled_gelu(normalized, 1.702)
        return torch.clamp(activated, min=-6.0, max=6.0) + projected


batch_size = 128
in_features = 1024
out_features = 512


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
'''

OTHER = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, channels, kernel):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels * 2, kernel, padding=kernel // 2)
        self.pool = nn.MaxPool2d(2)

    def forward(self, image):
        feature_map = torch.sigmoid(self.conv(image))
        return self.pool(feature_map).flatten(1).softmax(dim=1)


def get_inputs():
    return [torch.rand(16, 3, 64, 64)]


def get_init_inputs():
    return [3, 5]
'''


def commented(code: str) -> str:
    """The same program with comments, blank lines and another docstring."""
    lines = []
    for line in code.split("\n"):
        lines.append(line.replace('"""A block that mixes a projection, a GELU and a residual."""',
                                  '"""Another docstring entirely."""'))
        if line.strip().startswith("return"):
            lines.append("        # a comment")
            lines.append("")
    return "\n".join(lines)


def renamed(code: str) -> str:
    """A renamed copy: a few identifiers get new names."""
    for old, new in (("projected", "proj_out"), ("normalized", "normed"),
                     ("activated", "act")):
        code = re.sub(rf"\b{old}\b", new, code)
    return code


def near_copy(code: str) -> str:
    """A near duplicate (Jaccard ~0.89): one local variable renamed."""
    return re.sub(r"\bactivated\b", "act", code)


def row(code: str, kernel: str | None = None, **extra) -> dict:
    return {"id": content_hash(code, kernel), "pytorch_code": code, "kernel_code": kernel,
            "reasons": [], **extra}


# --- tokens -----------------------------------------------------------------------------------

def test_lexer_agrees_with_tree_sitter_on_examples_and_tricky_code(examples_dir):
    files = sorted(examples_dir.glob("*.py")) + [FIX / "tricky.py"]
    assert len(files) > 5
    for f in files:
        code = f.read_text()
        assert T.lex_tokens(code) == T.ts_tokens(code), f


def test_lexer_agrees_with_tree_sitter_on_kernelbench(kernelbench_dir):
    files = sorted(kernelbench_dir.glob("level*/*.py"))
    assert files
    for f in files:
        code = f.read_text()
        assert T.lex_tokens(code) == T.ts_tokens(code), f


def test_tokens_drop_comments_docstrings_and_layout_but_keep_strings_in_code():
    toks = T.tokens((FIX / "tricky.py").read_text())
    text = " ".join(T.readable(t) for t in toks).encode()
    assert all(T.split_words(t) == [t] for t in toks)
    for gone in (b"Module docstring", b"a comment", b"after a semicolon", b"Docstring: dropped",
                 b"A statement string", b"a CUDA comment", b"dropped too"):
        assert gone not in text, gone
    for kept in (b"an element at the start", b"an argument: kept", b"not at a line start",
                 b"the body of a lambda", b"expr: kept", b"docstring on the class line"):
        assert kept in text, kept
    # a multi-line string holding CUDA is tokenized as code
    assert b"__global__" in toks and b"threadIdx" in toks
    assert T.tokens(PROGRAM) == T.tokens(commented(PROGRAM))
    assert T.tokens(PROGRAM) != T.tokens(renamed(PROGRAM))


def test_abstraction_makes_renamed_copies_equal_but_keeps_the_computation():
    def abstract(code):
        return T.abstract_tokens(T.tokens(code), code)
    assert abstract(PROGRAM) == abstract(renamed(PROGRAM))
    assert abstract(PROGRAM) != abstract(OTHER)
    relu = "import torch\ndef f(x, k=2):\n    return torch.relu(x) * k + self.w\n"
    toks = b" ".join(abstract(relu))
    assert toks == b"import torch def ID ( ID , ID = NUM ) : return torch . relu ( ID ) * ID + ID . ID"
    assert abstract(relu.replace("relu", "sigmoid")) != abstract(relu)
    assert T.imported_names("import torch.nn as nn\nfrom a import (b,\n c as d)\n") == {
        b"nn", b"b", b"d"}


def test_lexer_hands_what_it_cannot_read_to_tree_sitter():
    broken = "x = 'unterminated\ny = 2\n"
    assert T.lex_tokens(broken) is None
    assert T.tokens(broken) == T.ts_tokens(broken)
    assert T.tokens(None) == [] and T.tokens("") == []


# --- signatures and banding -------------------------------------------------------------------

def test_signatures_equal_datasketch_minhash():
    from datasketch import MinHash
    cfg = SketchConfig()
    codes = [PROGRAM, OTHER, "x", "a = b"]
    sk = sketch(codes, cfg)
    for i, code in enumerate(codes):
        m = MinHash(num_perm=cfg.num_perm, seed=cfg.seed, hashfunc=lambda v: v)
        m.update_batch(shingle_set(code, cfg).tolist())
        assert np.array_equal(m.hashvalues, sk.sigs[i]), code
    assert sk.exact[0] != sk.exact[1] and all(sk.exact)


def test_parallel_signatures_equal_serial():
    cfg = SketchConfig()
    codes = [PROGRAM, OTHER, renamed(PROGRAM), None, commented(OTHER)] * 6
    serial = sketch(codes, cfg)
    par = sketch_parallel(codes, cfg, workers=2, chunk=7, min_parallel=0)
    assert np.array_equal(serial.sigs, par.sigs)
    assert serial.exact == par.exact


def test_numpy_banding_finds_the_pairs_minhashlsh_finds():
    from datasketch import LeanMinHash, MinHashLSH
    rng = np.random.default_rng(0)
    b, r = lsh_params(0.8, 128)
    sigs = rng.integers(0, 2 ** 32, (300, 128), dtype=np.uint64).astype(np.uint32)
    for i in range(0, 300, 3):  # plant similar rows: copy, then change some values
        sigs[i + 1] = sigs[i]
        change = rng.random(128) < 0.15
        sigs[i + 1][change] = rng.integers(0, 2 ** 32, change.sum(), dtype=np.uint64)
    lsh = MinHashLSH(num_perm=128, params=(b, r))
    mh = [LeanMinHash(seed=1, hashvalues=s, scheme="affine32") for s in sigs]
    for i, m in enumerate(mh):
        lsh.insert(i, m)
    expected = {(min(i, j), max(i, j)) for i, m in enumerate(mh) for j in lsh.query(m) if i != j}
    found = {tuple(p) for p in candidate_pairs(sigs, b, r).tolist()}
    assert expected and found == expected


# --- clusters -----------------------------------------------------------------------------------

def test_exact_and_near_duplicates_cluster_and_first_is_kept():
    rows = [row(PROGRAM), row(OTHER), row(commented(PROGRAM)), row(near_copy(PROGRAM))]
    res = dedup(rows, on="pytorch", workers=1)
    d = res.decisions
    assert [x.keep for x in d] == [True, True, False, False]
    assert d[2].reasons == ["duplicate:exact"] and d[3].reasons == ["duplicate:near"]
    assert d[2].dup_of == d[3].dup_of == rows[0]["id"]
    assert d[0].cluster_id == d[2].cluster_id == d[3].cluster_id == rows[0]["id"]
    assert d[1].cluster_id == rows[1]["id"] and d[1].dup_of is None
    assert res.stats["clusters"] == 1 and res.stats["exact_duplicates"] == 1


def test_after_verify_the_fastest_verified_row_is_kept():
    rows = [row(PROGRAM, "k1", status="incorrect", speedup=9.0),
            row(PROGRAM, "k2", status="verified", speedup=1.5),
            row(PROGRAM, "k3", status="verified", speedup=3.0)]
    d = dedup(rows, on="pytorch", workers=1).decisions
    assert [x.keep for x in d] == [False, False, True]
    assert d[0].dup_of == rows[2]["id"]


def test_on_selects_the_compared_column():
    kernel_a = "import triton\n@triton.jit\ndef k(x_ptr, n):\n    pid = tl.program_id(0)\n" * 3
    kernel_b = OTHER.replace("Model", "ModelNew")
    rows = [row(PROGRAM, kernel_a), row(PROGRAM, kernel_b), row(OTHER, kernel_a)]
    keep = lambda on: [x.keep for x in dedup(rows, on=on, workers=1).decisions]  # noqa: E731
    assert keep("pytorch") == [True, False, True]
    assert keep("kernel") == [True, True, False]
    assert keep("both") == [True, True, True]


def test_rows_without_the_compared_column_are_kept():
    rows = [row(PROGRAM), row(OTHER)]
    d = dedup(rows, on="kernel", workers=1).decisions
    assert all(x.keep for x in d) and d[0].cluster_id == rows[0]["id"]


# --- decontamination ---------------------------------------------------------------------------

def _evalset_rows(root: Path) -> list[dict]:
    from curate.sources.kernelbench import read_problems
    return [o.dropped or o.kept[0] for batch in read_problems(root) for o in batch]


def test_decontamination_flags_problems_fed_back_and_renamed_copies(tmp_path):
    rows = _evalset_rows(EVALSET)
    relu = next(r for r in rows if r["path"] == "level1/19_ReLU.py")
    copy = re.sub(r"\bx\b", "inputs", relu["pytorch_code"]).replace("rectified", "ReLU")
    copy = re.sub(r"\bdim\b", "features", copy)
    rows += [row(copy), row(PROGRAM)]
    inp, out = tmp_path / "in.parquet", tmp_path / "out.parquet"
    write_rows(inp, rows)
    st = run_single(Dedup(against=[str(EVALSET)]), inp, out, progress=False)
    kept = list(read_rows(out))
    rejected = {r["id"]: r for r in read_rows(tmp_path / "out.rejected.parquet")}
    assert [r["pytorch_code"] for r in kept] == [PROGRAM]
    for r in rows[:-1]:
        assert r["id"] in rejected
    assert rejected[rows[-2]["id"]]["reasons"] == ["contaminated:level1/19_ReLU.py"]
    for r in rows[:3]:
        assert rejected[r["id"]]["reasons"] == [f"contaminated:{r['path']}"]
        assert rejected[r["id"]]["stage"] == "dedup"
    assert st.extra["decontaminated"] is True and st.extra["evalset_problems"] == 3


def test_decontamination_against_kernelbench_flags_every_problem(kernelbench_dir, tmp_path):
    rows = _evalset_rows(kernelbench_dir)
    relu = next(r for r in rows if r["path"] == "level1/19_ReLU.py")
    rows.append(row(re.sub(r"\bdim\b", "width", re.sub(r"\bx\b", "inputs",
                                                         relu["pytorch_code"]))))
    res = dedup(rows, on="pytorch", workers=2,
                evalsets=[__import__("curate.dedup.evalsets", fromlist=["load"])
                          .load("@kernelbench")])
    reasons = [d.reasons for d in res.decisions]
    assert all(not d.keep for d in res.decisions)
    assert all(len(why) == 1 and why[0].startswith("contaminated:level") for why in reasons)
    # problems that differ only in constants are the same problem once abstracted: the reason
    # may name the first of them; most name themselves
    own = sum(why == [f"contaminated:{r.get('path')}"] for r, why in zip(rows, reasons))
    assert own >= 0.85 * (len(rows) - 1)
    assert reasons[-1] == ["contaminated:level1/19_ReLU.py"]


def test_bundled_examples_are_not_flagged_as_kernelbench_copies(kernelbench_dir, examples_dir):
    from curate.dedup import evalsets
    rows = _evalset_rows(examples_dir)
    res = dedup(rows, on="pytorch", workers=1, evalsets=[evalsets.load("@kernelbench")])
    assert res.stats["dropped_contaminated"] == 0


def test_missing_named_evalset_warns_and_records_no_decontamination(tmp_path, monkeypatch,
                                                                       caplog):
    monkeypatch.setenv("CURATE_KERNELBENCH", str(tmp_path / "nowhere"))
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_rows(inp, [row(PROGRAM), row(OTHER)])
    step = Dedup(against=["@kernelbench"])
    with caplog.at_level(logging.WARNING, logger="curate"):
        st = run_single(step, inp, out, progress=False)
    assert st.rows_out == 2
    assert st.extra["decontaminated"] is False
    assert st.extra["evalsets_missing"] == ["@kernelbench"]
    assert "NO DECONTAMINATION" in caplog.text
    assert step.config()["against"] == {"@kernelbench": "missing"}


def test_evalset_given_as_a_table(tmp_path):
    evalrows = _evalset_rows(EVALSET)
    write_rows(tmp_path / "eval.jsonl", evalrows)
    softmax = next(r for r in evalrows if r["path"].endswith("23_Softmax.py"))
    write_rows(tmp_path / "in.jsonl", [row(softmax["pytorch_code"]), row(PROGRAM)])
    res = CliRunner().invoke(main, ["dedup", str(tmp_path / "in.jsonl"), "-o",
                                    str(tmp_path / "out.jsonl"), "--against",
                                    str(tmp_path / "eval.jsonl")])
    assert res.exit_code == 0, res.output
    (rej,) = list(read_rows(tmp_path / "out.rejected.jsonl"))
    assert rej["reasons"] == ["contaminated:level1/23_Softmax.py"]


def test_missing_explicit_evalset_is_bad_input(tmp_path):
    with pytest.raises(BadInput):
        Dedup(against=[str(tmp_path / "typo")])


def test_default_pipeline_step_settings_are_accepted(monkeypatch):
    import yaml
    from curate.dedup import evalsets
    from curate.pipeline import config as pconfig
    from curate.datadirs import data_dir
    monkeypatch.setattr(evalsets, "hub_snapshot", lambda repo_id: None)  # no download in tests
    spec = yaml.safe_load((data_dir("pipelines") / "default.yaml").read_text())
    entry = next(e for e in spec["steps"] if isinstance(e, dict) and "dedup" in e)
    (step,) = pconfig.build_steps({"steps": [entry]})
    assert isinstance(step, Dedup) and step.against == ["@kernelbench"]


# --- command line ----------------------------------------------------------------------------

@pytest.mark.parametrize("ext", [".parquet", ".jsonl"])
def test_cli_on_both_table_formats(tmp_path, ext):
    inp, out = tmp_path / f"in{ext}", tmp_path / f"out{ext}"
    rows = [row(PROGRAM), row(near_copy(PROGRAM)), row(OTHER)]
    write_rows(inp, rows)
    res = CliRunner().invoke(main, ["dedup", str(inp), "-o", str(out), "--on", "pytorch"])
    assert res.exit_code == 0, res.output
    assert "1 dropped" in res.output
    assert [r["id"] for r in read_rows(out)] == [rows[0]["id"], rows[2]["id"]]
    (rej,) = list(read_rows(tmp_path / f"out.rejected{ext}"))
    assert rej["dup_of"] == rows[0]["id"] and rej["reasons"] == ["duplicate:near"]


def test_cli_abstract_catches_renamed_copies_as_exact(tmp_path):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    write_rows(inp, [row(PROGRAM), row(renamed(PROGRAM))])
    res = CliRunner().invoke(main, ["dedup", str(inp), "-o", str(out), "--abstract"])
    assert res.exit_code == 0, res.output
    (rej,) = list(read_rows(tmp_path / "out.rejected.jsonl"))
    assert rej["reasons"] == ["duplicate:exact"]


def test_cli_help_has_an_example():
    res = CliRunner().invoke(main, ["dedup", "--help"])
    assert res.exit_code == 0 and "Example" in res.output and "--against" in res.output
    assert "ScalingIntelligence/KernelBench" in res.output  # a Hub id works too


# --- the Redis index ------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_url(tmp_path):
    """A Redis index address: on the server CI started ($CURATE_TEST_REDIS_URL) under a fresh
    name, else on a redis-server started here on a free port."""
    import os
    import uuid
    pytest.importorskip("redis", reason="needs the redis Python package")
    import redis
    name = f"test-{uuid.uuid4().hex[:12]}"
    given = os.environ.get("CURATE_TEST_REDIS_URL")
    if given:
        from curate.dedup.index import parse_index_url
        try:
            where = parse_index_url(given)
        except BadInput:
            where = {"host": given.split("//")[-1].split(":")[0],
                     "port": int(given.rsplit(":", 1)[-1].split("/")[0])}
        try:
            redis.Redis(host=where["host"], port=where["port"]).ping()
        except redis.exceptions.ConnectionError:
            pytest.fail(f"CURATE_TEST_REDIS_URL={given} is set but no server answers there")
        yield f"redis://{where['host']}:{where['port']}/{name}"
        return
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("needs redis-server (the Debian package redis-server) on PATH, or "
                    "CURATE_TEST_REDIS_URL")
    port = _free_port()
    proc = subprocess.Popen([binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--daemonize", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(100):
        try:
            client.ping()
            break
        except redis.exceptions.ConnectionError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("redis-server did not start")
    yield f"redis://127.0.0.1:{port}/{name}"
    proc.terminate()
    proc.wait(timeout=10)


def test_redis_index_deduplicates_across_runs(tmp_path, redis_url):
    first = [row(PROGRAM), row(OTHER)]
    write_rows(tmp_path / "a.parquet", first)
    st = run_single(Dedup(index=redis_url, on="pytorch"), tmp_path / "a.parquet",
                    tmp_path / "a.out.parquet", progress=False)
    assert st.rows_out == 2 and st.extra["index_added"] == 2 and st.extra["index_size"] == 2

    new = '''import torch\n\ndef get_inputs():\n    return [torch.ones(3) * 7 + torch.arange(3)]\n'''
    second = [row(near_copy(PROGRAM)), row(new)]
    write_rows(tmp_path / "b.parquet", second)
    st = run_single(Dedup(index=redis_url, on="pytorch"), tmp_path / "b.parquet",
                    tmp_path / "b.out.parquet", progress=False)
    assert [r["pytorch_code"] for r in read_rows(tmp_path / "b.out.parquet")] == [new]
    (rej,) = list(read_rows(tmp_path / "b.out.rejected.parquet"))
    assert rej["reasons"] == ["duplicate:indexed"]
    assert rej["dup_of"] == rej["cluster_id"] == first[0]["id"]
    assert st.extra["index_size"] == 3

    # running the first table again is a rebuild: its rows are the indexed rows themselves
    st = run_single(Dedup(index=redis_url, on="pytorch"), tmp_path / "a.parquet",
                    tmp_path / "a2.out.parquet", progress=False)
    assert st.rows_out == 2 and st.extra["index_added"] == 0


def test_redis_index_refuses_other_settings(tmp_path, redis_url):
    write_rows(tmp_path / "a.jsonl", [row(PROGRAM)])
    run_single(Dedup(index=redis_url), tmp_path / "a.jsonl", tmp_path / "o1.jsonl",
               progress=False)
    with pytest.raises(BadInput, match="other settings"):
        run_single(Dedup(index=redis_url, abstract=True), tmp_path / "a.jsonl",
                   tmp_path / "o2.jsonl", progress=False)


def test_bad_index_address_is_bad_input():
    with pytest.raises(BadInput):
        Dedup(index="http://localhost/x")


def test_evalset_from_a_hub_dataset_is_read_once_then_from_the_cache(tmp_path, monkeypatch,
                                                                     caplog):
    """`--against ORG/NAME`: a Hub dataset in KernelBench's Hub layout (parquet with `code`,
    `level`, `name`), here served by the Hub on loopback; read again with the server gone."""
    import sys
    import huggingface_hub.constants as c
    import pyarrow as pa
    import pyarrow.parquet as pq
    from huggingface_hub import HfApi
    sys.path.insert(0, str(Path(__file__).parent))
    from tests.support.hubserver import HubServer, Token
    server = HubServer({"hf_w": Token("alice", orgs=["kb"])}).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf_home"))
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_home" / "hub"))
        monkeypatch.setattr(c, "HF_HUB_DISABLE_XET", True)
        monkeypatch.setattr(c, "HF_HUB_OFFLINE", False)
        monkeypatch.setattr(c, "HF_HUB_CACHE", str(tmp_path / "hf_home" / "hub"))
        monkeypatch.setattr(c, "ENDPOINT", server.url)
        monkeypatch.setattr(c, "HUGGINGFACE_CO_URL_TEMPLATE",
                            server.url + "/{repo_id}/resolve/{revision}/{filename}")
        evalrows = _evalset_rows(EVALSET)
        table = pa.table({"code": [r["pytorch_code"] for r in evalrows],
                          "level": [int(r["path"][5]) for r in evalrows],
                          "name": [r["path"].split("/")[1] for r in evalrows]})
        pq.write_table(table, tmp_path / "level_1.parquet")
        api = HfApi(endpoint=server.url, token="hf_w")
        api.create_repo("kb/evalset", repo_type="dataset")
        api.upload_file(path_or_fileobj=str(tmp_path / "level_1.parquet"),
                        path_in_repo="data/level_1-00000-of-00001.parquet",
                        repo_id="kb/evalset", repo_type="dataset")
        relu = next(r for r in evalrows if r["path"] == "level1/19_ReLU.py")
        inp = tmp_path / "in.jsonl"
        write_rows(inp, [row(relu["pytorch_code"]), row(PROGRAM)])
        st = run_single(Dedup(against=["kb/evalset"]), inp, tmp_path / "out.jsonl",
                        progress=False)
        assert st.extra["decontaminated"] is True and st.extra["evalset_problems"] == 3
        rejected = read_rows(tmp_path / "out.rejected.jsonl")
        assert [r["reasons"] for r in rejected] == [["contaminated:level1/19_ReLU.py"]]
    finally:
        server.stop()
    # the server is gone: the cached copy answers, without the network
    st = run_single(Dedup(against=["hf://datasets/kb/evalset"]), inp, tmp_path / "out2.jsonl",
                    progress=False)
    assert st.extra["decontaminated"] is True and st.rows_out == 1
    # a Hub dataset that cannot be read is a loud "no decontamination", not a failed build
    with caplog.at_level(logging.WARNING, logger="curate"):
        st = run_single(Dedup(against=["kb/missing"]), inp, tmp_path / "out3.jsonl",
                        progress=False)
    assert st.extra["decontaminated"] is False and st.extra["evalsets_missing"] == ["kb/missing"]
    assert "NO DECONTAMINATION" in caplog.text
    # a path-like spec that does not exist is still a typo, not a Hub id
    with pytest.raises(BadInput):
        Dedup(against=["./kb/evalset"])
