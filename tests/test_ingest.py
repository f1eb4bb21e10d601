"""curate ingest: KernelBench folders, KernelBook-style and own tables, and bad input."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from curate.cli import main
from curate.sources.ingest import IngestSource
from curate.tableio import read_rows

PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        return torch.relu(x) * 2

def get_inputs():
    return [torch.randn(16, 16)]

def get_init_inputs():
    return []
'''



def run_cli(*args):
    """Run through the console entry point so exit codes are the contract's."""
    import subprocess
    import sys
    return subprocess.run([sys.executable, "-m", "curate", *args], capture_output=True, text=True)


def test_kernelbench_accounts_for_every_problem(kernelbench_dir, tmp_path):
    out = tmp_path / "kb.parquet"
    res = CliRunner().invoke(main, ["ingest", str(kernelbench_dir), "-o", str(out)])
    assert res.exit_code == 0, res.output
    kept = read_rows(out)
    rejected = read_rows(tmp_path / "kb.rejected.parquet")
    files = sorted(p.relative_to(kernelbench_dir).as_posix()
                   for p in kernelbench_dir.glob("level*/*.py"))
    assert len(files) == 270
    assert sorted(r["path"] for r in kept + rejected) == files
    assert len({r["id"] for r in kept}) == len(kept)
    level4 = [r for r in rejected if r["path"].startswith("level4/")]
    assert len(level4) == 20
    assert all("needs_pretrained_weights" in r["reasons"] for r in level4)
    assert all(r["stage"] == "ingest" for r in rejected)
    assert {r["source"] for r in kept} == {"kernelbench"}
    assert {r["license"] for r in kept} == {"MIT"}
    assert all(r["entry_point"] == "Model" for r in kept)


def test_problem_without_model_becomes_a_rejected_row(tmp_path):
    d = tmp_path / "problems" / "level1"
    d.mkdir(parents=True)
    (d / "1_ok.py").write_text(PROBLEM)
    (d / "2_no_inputs.py").write_text(PROBLEM.replace("def get_inputs", "def make_inputs"))
    (d / "3_broken.py").write_text("class Model(:\n")
    out = tmp_path / "o.jsonl"
    res = CliRunner().invoke(main, ["ingest", str(tmp_path / "problems"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert [r["path"] for r in read_rows(out)] == ["level1/1_ok.py"]
    rej = {r["path"]: r["reasons"] for r in read_rows(tmp_path / "o.rejected.jsonl")}
    assert rej == {"level1/2_no_inputs.py": ["missing_get_inputs"],
                   "level1/3_broken.py": ["syntax_error:line1"]}


def test_kernelbook_columns_are_mapped(tmp_path):
    src = tmp_path / "kb.parquet"
    pq.write_table(pa.table({
        "python_code": [PROBLEM], "triton_code": ["class ModelNew: pass"],
        "original_triton_code": ["raw"], "repo_name": ["a/b"], "licenses": [["MIT"]],
        "stars": [3]}), src)
    out = tmp_path / "o.parquet"
    res = CliRunner().invoke(main, ["ingest", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.output
    (row,) = read_rows(out)
    assert row["pytorch_code"] == PROBLEM and row["kernel_code"] == "class ModelNew: pass"
    assert row["original_kernel_code"] == "raw" and row["repo"] == "a/b"
    assert row["license"] == "MIT" and row["source"] == "kernelbook" and row["backend"] == "triton"
    assert row["stars"] == 3


def test_own_table_keeps_its_ids(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(json.dumps({"id": "mine", "pytorch_code": PROBLEM}) + "\n"
                   + json.dumps({"pytorch_code": PROBLEM + "\n# v2\n"}) + "\n")
    out = tmp_path / "o.parquet"
    assert CliRunner().invoke(main, ["ingest", str(src), "-o", str(out)]).exit_code == 0
    ids = [r["id"] for r in read_rows(out)]
    assert ids[0] == "mine" and len(ids[1]) == 16


@pytest.mark.parametrize("case", ["missing_column", "unreadable", "non_utf8_file", "no_such"])
def test_bad_input_exits_2_naming_file_and_fix(tmp_path, case):
    if case == "missing_column":
        bad = tmp_path / "t.jsonl"
        bad.write_text(json.dumps({"code": "x"}) + "\n")
    elif case == "unreadable":
        bad = tmp_path / "t.parquet"
        bad.write_bytes(b"garbage")
    elif case == "non_utf8_file":
        bad = tmp_path / "probs"
        bad.mkdir()
        (bad / "1_x.py").write_bytes(b"# \xff\xfe\n")
    else:
        bad = tmp_path / "nothing.parquet"
    res = run_cli("ingest", str(bad), "-o", str(tmp_path / "o.parquet"))
    assert res.returncode == 2, res.stderr
    assert bad.name in res.stderr and "fix:" in res.stderr
    assert not (tmp_path / "o.parquet").exists()


def test_examples_are_all_usable(examples_dir):
    batches = list(IngestSource([str(examples_dir)]).read())
    outcomes = [o for b in batches for o in b]
    assert len(outcomes) >= 30
    assert all(o.kept and not o.dropped for o in outcomes), [o.reasons for o in outcomes if o.dropped]
