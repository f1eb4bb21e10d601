"""Bad input and bad options fail before any work: exit 2, naming the file, the row and the fix.

The commands run through `curate.cli.run`, the console entry point, so that the exit codes are
the ones a user sees (CliRunner alone stops short of the edge that maps errors onto codes).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.cli import run
from curate.errors import BadInput
from curate.pipeline.single import require_candidates
from curate.tableio import open_input, read_rows, write_rows

ROOT = Path(__file__).resolve().parents[1]
REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"


@pytest.fixture
def curate(monkeypatch, capsys):
    """Run `curate ARGS...` in this process; return (exit code, stdout, stderr)."""
    def call(*argv):
        monkeypatch.setattr(sys, "argv", ["curate", *map(str, argv)])
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            with pytest.raises(SystemExit) as exc:
                run()
        finally:
            for s, h in handlers.items():  # run() installs the CLI's own
                signal.signal(s, h)
        out, err = capsys.readouterr()
        return exc.value.code, out, err
    return call


def _int_column(path: Path, column: str) -> Path:
    cols = {"id": ["a", "b"], "pytorch_code": [REF, REF], column: pa.array([1, 2], pa.int64())}
    pq.write_table(pa.table(cols), path)
    return path


STAGES = {
    "verify": ["--device", "cpu"],
    "dedup": [],
    "split-infill": [],
}


@pytest.mark.parametrize("column", ["pytorch_code", "kernel_code"])
@pytest.mark.parametrize("stage", list(STAGES))
def test_code_column_that_is_not_text_is_bad_input(tmp_path, curate, stage, column):
    src = _int_column(tmp_path / "ints.parquet", column)
    code, _, err = curate(stage, src, "-o", tmp_path / "out.parquet", *STAGES[stage])
    assert code == 2, err
    assert f"{src}, row 0: column {column!r} is int64" in err
    assert "fix:" in err and "AttributeError" not in err
    assert not (tmp_path / "out.parquet").exists()
    assert not (tmp_path / "out.ledger.sqlite").exists()  # refused before any work


def test_jsonl_value_of_wrong_type_names_the_line(tmp_path, curate):
    src = tmp_path / "t.jsonl"
    src.write_text('{"pytorch_code": "x"}\n{"pytorch_code": "y", "kernel_code": 5}\n')
    code, _, err = curate("dedup", src, "-o", tmp_path / "out.jsonl")
    assert code == 2
    assert f"{src}, line 2: column 'kernel_code' is int (5)" in err and "fix:" in err


def test_missing_reference_names_the_line(tmp_path, curate):
    src = tmp_path / "t.jsonl"
    src.write_text('{"pytorch_code": "x"}\n{"kernel_code": "y"}\n')
    code, _, err = curate("dedup", src, "-o", tmp_path / "out.jsonl")
    assert code == 2
    assert f"{src}, line 2: 'pytorch_code' is missing or null" in err and "fix:" in err


def _zero_bytes(p: Path) -> Path:
    p = p / "zero.parquet"
    p.write_bytes(b"")
    return p


def _folder(p: Path) -> Path:
    (p / "dir.parquet").mkdir()
    return p / "dir.parquet"


@pytest.mark.parametrize("make,words", [
    (_zero_bytes, "the file is empty (0 bytes)"),
    (lambda p: p / "missing.parquet", "no such file"),
    (_folder, "is a folder, not a table"),
], ids=["zero-bytes", "missing", "folder"])
@pytest.mark.parametrize("stage", ["verify", "dedup"])
def test_unusable_input_file_is_bad_input(tmp_path, curate, make, words, stage):
    src = make(tmp_path)
    code, _, err = curate(stage, src, "-o", tmp_path / "out.parquet", *STAGES[stage])
    assert code == 2, err
    assert f"{src}: {words}" in err and "fix:" in err and "ArrowInvalid" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every file")
def test_unreadable_input_is_bad_input(tmp_path, curate):
    src = write_rows(tmp_path / "t.parquet", [{"id": "a", "pytorch_code": REF}])
    src.chmod(0)
    code, _, err = curate("dedup", src, "-o", tmp_path / "out.parquet")
    assert code == 2 and "permission denied" in err and str(src) in err


def _no_rows(p: Path) -> Path:
    pq.write_table(pa.table({"id": pa.array([], pa.string()),
                             "pytorch_code": pa.array([], pa.string())}), p / "t.parquet")
    return p / "t.parquet"


def _no_columns(p: Path) -> Path:
    pq.write_table(pa.table({}), p / "t.parquet")
    return p / "t.parquet"


def _empty_jsonl(p: Path) -> Path:
    (p / "t.jsonl").write_text("")
    return p / "t.jsonl"


@pytest.mark.parametrize("make", [_no_rows, _no_columns, _empty_jsonl],
                         ids=["no-rows", "no-columns", "empty-jsonl"])
@pytest.mark.parametrize("stage", ["verify", "dedup"])
def test_empty_table_warns_and_writes_an_empty_output(tmp_path, curate, caplog, make, stage):
    src = make(tmp_path)
    out = tmp_path / f"out{src.suffix}"
    with caplog.at_level(logging.WARNING, logger="curate"):
        code, stdout, err = curate(stage, src, "-o", out, *STAGES[stage])
    assert code == 0, err
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{src} has no rows" in m for m in warned), warned
    assert out.is_file() and read_rows(out) == []
    assert "0 rows in" in stdout


def test_empty_table_warning_reaches_stderr(tmp_path):
    """The warning goes through logging: check that a user running the command sees it."""
    src = _empty_jsonl(tmp_path)
    res = subprocess.run([sys.executable, "-m", "curate", "dedup", str(src), "-o",
                          str(tmp_path / "out.jsonl")], cwd=ROOT, capture_output=True, text=True,
                         check=False,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, res.stderr
    assert "WARNING" in res.stderr and f"{src} has no rows" in res.stderr


def test_jsonl_errors_count_lines_from_one_and_read_plainly(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text('{"pytorch_code": "x"}\n\n{"pytorch_code": "unterminated')
    with pytest.raises(BadInput) as exc:
        open_input(src)
    msg = str(exc.value)
    assert f"{src}, line 3: invalid JSON: Unterminated string starting at column" in msg
    assert "at at" not in msg and "row" not in msg.split("\n")[0]


def test_jsonl_line_that_is_not_an_object_names_the_line(tmp_path):
    src = tmp_path / "t.jsonl"
    src.write_text('{"pytorch_code": "x"}\n[1, 2]\n')
    with pytest.raises(BadInput, match=r"line 2: the line is a JSON list, not an object"):
        open_input(src)


# -- options out of range ------------------------------------------------------------------

@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "fast"])
def test_build_threshold_out_of_range_is_refused_before_any_work(tmp_path, curate, value):
    out = tmp_path / "b"
    code, _, err = curate("build", "--threshold", value, "--out", out, "--device", "cpu")
    assert code == 2 and "--threshold" in err
    assert not out.exists()


@pytest.mark.parametrize("setting,words", [
    ("threshold: -1\nsteps: []", "threshold = -1 is out of range"),
    ("threshold: .nan\nsteps: []", "threshold = nan is out of range"),
    ("steps:\n  - dedup: {jaccard: 2}", "step 'dedup': jaccard = 2 is out of range"),
    ("steps:\n  - verify: {workers: 0}", "step 'verify': workers = 0 is out of range"),
    ("steps:\n  - verify: {timeout: -5}", "step 'verify': timeout = -5 is out of range"),
    ("device: tpu\nsteps: []", "device 'tpu' is not one of"),
], ids=["threshold", "threshold-nan", "jaccard", "workers", "timeout", "device"])
def test_pipeline_settings_out_of_range_are_refused_before_any_work(tmp_path, curate, setting,
                                                                    words):
    spec = tmp_path / "p.yaml"
    spec.write_text(f'source:\n  ingest: {{paths: ["@examples"]}}\n{setting}\n')
    out = tmp_path / "b"
    code, _, err = curate("build", "--pipeline", spec, "--out", out)
    assert code == 2, err
    assert f"{spec}: " in err and words in err and "fix:" in err
    assert not out.exists()


@pytest.mark.parametrize("argv,option", [
    (["dedup", "IN", "-o", "OUT", "--jaccard", "2"], "--jaccard"),
    (["dedup", "IN", "-o", "OUT", "--jaccard", "0"], "--jaccard"),
    (["dedup", "IN", "-o", "OUT", "--jaccard", "nan"], "--jaccard"),
    (["dedup", "IN", "-o", "OUT", "--workers", "0"], "--workers"),
    (["synth", "inductor", "IN", "-o", "OUT", "--workers", "0"], "--workers"),
    (["synth", "inductor", "IN", "-o", "OUT", "--timeout", "0"], "--timeout"),
    (["split-infill", "IN", "-o", "OUT", "--check-solvable", "-1"], "--check-solvable"),
])
def test_stage_options_out_of_range_are_usage_errors(tmp_path, curate, argv, option):
    src = write_rows(tmp_path / "in.parquet", [{"id": "a", "pytorch_code": REF}])
    argv = [str(src) if a == "IN" else str(tmp_path / "out.parquet") if a == "OUT" else a
            for a in argv]
    code, _, err = curate(*argv)
    assert code == 2 and option in err and "Invalid value" in err
    assert not (tmp_path / "out.parquet").exists()


# -- verify without candidates -------------------------------------------------------------

def test_verify_with_no_candidate_at_all_says_synthesis_has_not_run(tmp_path, curate):
    src = write_rows(tmp_path / "refs.parquet", [{"id": f"r{i}", "pytorch_code": REF}
                                                 for i in range(3)])
    code, _, err = curate("verify", src, "-o", tmp_path / "v.parquet", "--device", "cpu")
    assert code == 2
    assert "none of the 3 rows has a kernel_code: synthesis has not run" in err
    assert f"curate synth inductor {src} -o" in err
    assert not (tmp_path / "v.parquet").exists()


def test_verify_warns_when_most_rows_have_no_candidate(tmp_path, caplog):
    rows = [{"id": f"r{i}", "pytorch_code": REF} for i in range(4)]
    rows[0]["kernel_code"] = "class ModelNew: pass\n"
    src = write_rows(tmp_path / "mixed.jsonl", rows)
    with caplog.at_level(logging.WARNING, logger="curate"):
        require_candidates(src)
    [msg] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "3 of 4 rows have no kernel_code" in msg and "curate synth inductor" in msg


def test_verify_with_candidates_says_nothing(tmp_path, caplog):
    src = write_rows(tmp_path / "c.parquet", [{"id": "a", "pytorch_code": REF,
                                                "kernel_code": "k"}])
    with caplog.at_level(logging.WARNING, logger="curate"):
        require_candidates(src)
    assert not caplog.records
