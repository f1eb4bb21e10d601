"""Record schema and table IO: round trips, extra columns, errors that name file and row."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from curate.errors import BadInput
from curate.record import content_hash
from curate.schema import column_names, conform, new_record, record_schema
from curate.tableio import TableWriter, read_batches, read_rows, write_rows


def _rows(n=5):
    return [new_record(id=f"r{i}", pytorch_code=f"code {i}", kernel_code=None,
                       reasons=["a", "b"] if i % 2 else [], speedup=1.5 * i, correct=bool(i % 2),
                       extra_col=i, note=f"n{i}") for i in range(n)]


@pytest.mark.parametrize("ext", ["parquet", "jsonl"])
def test_round_trip_keeps_values_types_and_extra_columns(tmp_path, ext):
    rows = _rows()
    path = write_rows(tmp_path / f"t.{ext}", rows)
    back = read_rows(path)
    assert back == rows
    if ext == "parquet":
        schema = pq.read_schema(path)
        for f in record_schema():
            assert schema.field(f.name).type == f.type
        assert schema.names[-2:] == ["extra_col", "note"]
        assert schema.metadata[b"curate.schema_version"] == b"1"


def test_every_contract_column_is_in_the_schema():
    for name in ["id", "pytorch_code", "kernel_code", "original_kernel_code", "backend", "source",
                 "entry_point", "repo", "path", "commit", "license", "generator", "reasoning",
                 "status", "correct", "speedup", "speedup_ci_low", "speedup_ci_high", "ref_ms",
                 "kernel_ms", "max_abs_err", "max_rel_err", "reasons", "gpu", "torch_version",
                 "triton_version", "cuda_version", "cluster_id", "dup_of", "prefix", "core",
                 "suffix", "core_kind", "core_name"]:
        assert name in column_names()


def test_wrong_type_names_the_row_and_the_column():
    rows = _rows(3)
    rows[2]["speedup"] = "fast"
    with pytest.raises(BadInput) as exc:
        conform(rows, where="t.parquet")
    assert "row 2" in str(exc.value) and "speedup" in str(exc.value)


def test_writer_streams_batches_with_changing_extra_columns(tmp_path):
    with TableWriter(tmp_path / "t.parquet") as w:
        w.write([new_record(id="a", pytorch_code="x")])
        w.write([new_record(id="b", pytorch_code="y", late=1.5)])
    rows = read_rows(tmp_path / "t.parquet")
    assert [r["id"] for r in rows] == ["a", "b"] and rows[0]["late"] is None
    assert list(tmp_path.iterdir()) == [tmp_path / "t.parquet"]  # no temp files left


def test_writer_leaves_nothing_on_error(tmp_path):
    with pytest.raises(RuntimeError):
        with TableWriter(tmp_path / "t.parquet") as w:
            w.write([new_record(id="a", pytorch_code="x")])
            raise RuntimeError("crash")
    assert list(tmp_path.iterdir()) == []


def test_batches_are_bounded(tmp_path):
    write_rows(tmp_path / "t.parquet", [new_record(id=str(i), pytorch_code="x") for i in range(50)])
    sizes = [len(b) for b in read_batches(tmp_path / "t.parquet", batch_size=16)]
    assert sizes == [16, 16, 16, 2]


def test_unreadable_parquet_is_bad_input(tmp_path):
    p = tmp_path / "broken.parquet"
    p.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(BadInput) as exc:
        list(read_batches(p))
    assert "broken.parquet" in str(exc.value) and "fix:" in str(exc.value)


def test_non_utf8_jsonl_names_the_row(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_bytes(json.dumps({"pytorch_code": "ok"}).encode() + b"\n" + b'{"pytorch_code": "\xff\xfe"}\n')
    with pytest.raises(BadInput) as exc:
        list(read_batches(p))
    assert "line 2" in str(exc.value) and "UTF-8" in str(exc.value)  # lines count from 1


def test_non_utf8_binary_parquet_column_names_the_row(tmp_path):
    p = tmp_path / "t.parquet"
    pq.write_table(pa.table({"pytorch_code": pa.array([b"ok", b"\xff\xfe"], pa.binary())}), p)
    with pytest.raises(BadInput) as exc:
        list(read_batches(p))
    assert "row 1" in str(exc.value) and "pytorch_code" in str(exc.value)


def test_content_hash_ignores_cosmetic_whitespace_only():
    a = content_hash("x = 1\ny = 2\n", "k")
    assert a == content_hash("x = 1   \r\ny = 2\n\n", "k")
    assert a != content_hash("x = 1\ny = 3\n", "k")
    assert a != content_hash("x = 1\ny = 2\n", None)
