"""Read and write record tables (.parquet or .jsonl) in batches, checked against the schema.

Tables are streamed: a reader yields lists of dicts a batch at a time, and a writer appends batch
by batch, so that a table of a million rows is never held twice in memory. Writers write to a
temporary file and rename it into place on close, so a crash never leaves a half-written table.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import BadInput
from .schema import SCHEMA_VERSION, conform, record_schema
from .schema import columns as schema_columns

FORMATS = (".parquet", ".jsonl")
DEFAULT_BATCH = 1024


def table_format(path: str | os.PathLike) -> str:
    suffix = Path(path).suffix.lower()
    if suffix == ".json":
        suffix = ".jsonl"
    if suffix not in FORMATS:
        raise BadInput(f"unknown table format {suffix or '(none)'!r}", path=str(path),
                       fix="name the file with a .parquet or .jsonl extension")
    return suffix


def sibling(path: str | os.PathLike, tag: str) -> Path:
    """`kb.parquet` -> `kb.<tag>.parquet` (e.g. the rejected table beside a stage's output)."""
    p = Path(path)
    return p.with_name(f"{p.stem}.{tag}{p.suffix}")


def read_batches(path: str | os.PathLike, batch_size: int = DEFAULT_BATCH, *,
                 require: tuple[str, ...] = ()) -> Iterator[list[dict]]:
    """Yield the rows of a table as lists of dicts, `batch_size` at a time.

    Every row is checked on the way in: the contract's columns must have the schema's types and
    the `require`d ones a value, so that a bad table fails here, naming its file and row, and
    not deep inside a stage.
    """
    path = _check_file(path)
    if table_format(path) == ".parquet":
        yield from _read_parquet(path, batch_size, require)
    else:
        yield from _read_jsonl(path, batch_size, require)


def open_input(path: str | os.PathLike, *, require: tuple[str, ...] = ()) -> int:
    """Check a stage's input before any work is done; return its number of rows.

    A parquet file is checked from its schema (its rows again as they are read); a jsonl file
    is read through once, so a bad line at the end fails before hours of work, not after.
    """
    path = _check_file(path)
    if table_format(path) == ".jsonl":
        return sum(len(b) for b in _read_jsonl(path, DEFAULT_BATCH, require))
    pf = _parquet_file(path)
    n = pf.metadata.num_rows
    _check_parquet_types(pf, path)
    if n:
        _check_present(pf.schema_arrow.names, require, path)
    return n


def required_columns() -> tuple[str, ...]:
    """What every stage's input must hold: the schema's non-null columns that have no default
    (the id is not one of them: a row without one gets its content hash)."""
    return tuple(c["name"] for c in schema_columns()
                 if not c.get("nullable", True) and "default" not in c and c["name"] != "id")


def count_filled(path: str | os.PathLike, column: str) -> tuple[int, int]:
    """(rows, rows whose `column` holds a non-empty value), read through the checking reader
    (a parquet file: that column only)."""
    path = _check_file(path)
    if table_format(path) == ".parquet":
        pf = _parquet_file(path)
        _check_parquet_types(pf, path)
        if column not in pf.schema_arrow.names:
            return pf.metadata.num_rows, 0
        values = pq.read_table(path, columns=[column]).column(column).to_pylist()
        return len(values), sum(1 for v in values if v not in (None, "", b""))
    rows = filled = 0
    for batch in read_batches(path):
        rows += len(batch)
        filled += sum(1 for r in batch if r.get(column) not in (None, ""))
    return rows, filled


def _check_file(path: str | os.PathLike) -> Path:
    path = Path(path)
    if path.is_dir():
        raise BadInput("is a folder, not a table", path=str(path),
                       fix="pass a .parquet or .jsonl file")
    if not path.is_file():
        raise BadInput("no such file", path=str(path), fix="check the path")
    table_format(path)
    if not os.access(path, os.R_OK):
        raise BadInput("the file cannot be read (permission denied)", path=str(path),
                       fix=f"check its permissions (chmod u+r {path})")
    return path


def _parquet_file(path: Path) -> pq.ParquetFile:
    if path.stat().st_size == 0:
        raise BadInput("the file is empty (0 bytes), so it is not a parquet table", path=str(path),
                       fix="write it again (a run killed while writing leaves such files); a "
                           "table with no rows is still a valid parquet file")
    try:
        return pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise BadInput(f"not a readable parquet file ({exc})", path=str(path),
                       fix="re-export the table as parquet, or pass a .jsonl file") from None


def _read_parquet(path: Path, batch_size: int, require: tuple[str, ...]) -> Iterator[list[dict]]:
    pf = _parquet_file(path)
    _check_parquet_types(pf, path)
    if pf.metadata.num_rows:
        _check_present(pf.schema_arrow.names, require, path)
    binary_cols = [f.name for f in pf.schema_arrow if pa.types.is_binary(f.type)
                   or pa.types.is_large_binary(f.type)]
    row0 = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_size):
            rows = batch.to_pylist()
            for i, r in enumerate(rows):
                for c in binary_cols:
                    if isinstance(r.get(c), (bytes, bytearray)):
                        r[c] = _decode(r[c], path, c, row=row0 + i)
                _check_required(r, require, path, row=row0 + i)
            row0 += len(rows)
            yield rows
    except pa.ArrowInvalid as exc:
        raise BadInput(f"parquet data could not be read near row {row0} ({exc})", path=str(path),
                       row=row0, fix="check that the file is complete and valid UTF-8") from None


def _decode(raw: bytes, path: Path, column: str | None, *, row: int | None = None,
            line: int | None = None) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        what = f"column {column!r}" if column else "the line"
        raise BadInput(f"{what} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                       path=str(path), row=row, line=line,
                       fix="re-encode the text as UTF-8 before ingesting") from None


def _read_jsonl(path: Path, batch_size: int, require: tuple[str, ...]) -> Iterator[list[dict]]:
    batch: list[dict] = []
    with open(path, "rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if not raw.strip():
                continue
            row = _parse_line(raw, path, line_no)
            _check_values(row, path, line_no)
            _check_required(row, require, path, line=line_no)
            batch.append(row)
            if len(batch) >= batch_size:
                yield batch
                batch = []
    if batch:
        yield batch


def _parse_line(raw: bytes, path: Path, line_no: int) -> dict:
    text = _decode(raw, path, None, line=line_no)
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        # json's own messages may end in "at" ("Unterminated string starting at")
        what = exc.msg.removesuffix(" at")
        raise BadInput(f"invalid JSON: {what} at column {exc.colno}", path=str(path),
                       line=line_no, fix="write one JSON object per line") from None
    if not isinstance(row, dict):
        raise BadInput(f"the line is a JSON {type(row).__name__}, not an object", path=str(path),
                       line=line_no, fix="write one JSON object per line")
    return row


# -- the schema's types, as a reader checks them ------------------------------------------------

def _describe(typ: pa.DataType) -> str:
    words = {"string": "text (string)", "double": "a number (float64)",
             "int64": "an integer (int64)", "bool": "true/false (bool)"}
    return words.get(str(typ), "a list of strings" if pa.types.is_list(typ) else str(typ))


def _arrow_fits(got: pa.DataType, want: pa.DataType) -> bool:
    """Whether a parquet column of type `got` reads into the schema's `want` (as conform does)."""
    t = pa.types
    if t.is_null(got) or got == want:
        return True
    if t.is_dictionary(got):
        return _arrow_fits(got.value_type, want)
    if t.is_string(want):
        return t.is_string(got) or t.is_large_string(got) or t.is_binary(got) \
            or t.is_large_binary(got)
    if t.is_floating(want):
        return t.is_floating(got) or t.is_integer(got)
    if t.is_integer(want):
        return t.is_integer(got)
    if t.is_list(want):
        return (t.is_list(got) or t.is_large_list(got)) and _arrow_fits(got.value_type,
                                                                         want.value_type)
    return False


def _value_fits(v, want: pa.DataType) -> bool:
    """Whether a JSON value fits the schema's type (bool is not a number here, on purpose)."""
    t = pa.types
    if v is None:
        return True
    if t.is_string(want):
        return isinstance(v, str)
    if t.is_boolean(want):
        return isinstance(v, bool)
    if isinstance(v, bool):
        return False
    if t.is_floating(want):
        return isinstance(v, (int, float))
    if t.is_integer(want):
        return isinstance(v, int) or (isinstance(v, float) and v.is_integer())
    if t.is_list(want):
        return isinstance(v, list) and all(_value_fits(x, want.value_type) for x in v)
    return True


def _type_fix(name: str) -> str:
    return (f"store {name!r} as the schema's type (schemas/record.v{SCHEMA_VERSION}.yaml lists "
            "every column's), or rename the column if it holds something else")


def _check_parquet_types(pf: pq.ParquetFile, path: Path) -> None:
    schema = record_schema()
    for f in pf.schema_arrow:
        if f.name in schema.names:
            want = schema.field(f.name).type
            if not _arrow_fits(f.type, want):
                raise BadInput(f"column {f.name!r} is {f.type}, the schema says {_describe(want)}",
                               path=str(path), row=_first_valid(path, f.name),
                               fix=_type_fix(f.name))


def _first_valid(path: Path, column: str) -> int | None:
    """The first row holding a value in `column` (the row at fault for a wrongly typed one)."""
    col = pq.read_table(path, columns=[column]).column(column)
    valid = col.is_valid().to_pylist()
    return valid.index(True) if True in valid else None


def _check_values(row: dict, path: Path, line: int) -> None:
    schema = record_schema()
    for name, v in row.items():
        if name in schema.names and not _value_fits(v, want := schema.field(name).type):
            raise BadInput(f"column {name!r} is {type(v).__name__} ({_short(v)}), the schema "
                           f"says {_describe(want)}", path=str(path), line=line,
                           fix=_type_fix(name))


def _short(v) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_present(names: list[str], require: tuple[str, ...], path: Path) -> None:
    for name in require:
        if name not in names:
            shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "") or "none"
            raise BadInput(f"missing required column {name!r} (columns: {shown})",
                           path=str(path), fix=_require_fix(name))


def _check_required(rec: dict, require: tuple[str, ...], path: Path, *, row: int | None = None,
                    line: int | None = None) -> None:
    for name in require:
        if rec.get(name) is None:
            raise BadInput(f"{name!r} is missing or null", path=str(path), row=row, line=line,
                           fix=_require_fix(name))


def _require_fix(name: str) -> str:
    if name == "pytorch_code":
        return ("give every row its reference program in 'pytorch_code' (`curate ingest` maps "
                "KernelBook's 'python_code'), or drop the rows without one")
    return f"give every row a {name!r}"


def read_rows(path: str | os.PathLike) -> list[dict]:
    """The whole table as a list of dicts (for small tables and tests)."""
    return [r for b in read_batches(path) for r in b]


def columns_of(path: str | os.PathLike) -> list[str]:
    """Column names of a table without reading it all (jsonl: union over the first batch)."""
    path = _check_file(path)
    if table_format(path) == ".parquet":
        return list(_parquet_file(path).schema_arrow.names)
    names: list[str] = []
    for batch in read_batches(path):
        for r in batch:
            names += [k for k in r if k not in names]
        break
    return names


class TableWriter:
    """Append batches of rows to a .parquet or .jsonl table; the file appears on close()."""

    def __init__(self, path: str | os.PathLike, *, compression: str = "zstd"):
        self.path = Path(path)
        self.format = table_format(self.path)
        self.compression = compression
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmpdir = Path(tempfile.mkdtemp(prefix=f".{self.path.name}.", dir=self.path.parent))
        self._parts: list[Path] = []
        self._jsonl = open(self._tmpdir / "out.jsonl", "w", encoding="utf-8") \
            if self.format == ".jsonl" else None
        self.rows = 0

    def write(self, rows: list[dict]) -> None:
        if not rows:
            return
        table = conform(rows, where=str(self.path))
        if self._jsonl is not None:
            for r in table.to_pylist():
                self._jsonl.write(json.dumps(r, ensure_ascii=False) + "\n")
        else:
            part = self._tmpdir / f"part-{len(self._parts):06d}.parquet"
            pq.write_table(table, part, compression=self.compression)
            self._parts.append(part)
        self.rows += len(rows)

    def close(self) -> Path:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        if self._jsonl is not None:
            self._jsonl.close()
            os.replace(self._tmpdir / "out.jsonl", tmp)
        else:
            _merge_parts(self._parts, tmp, self.compression)
        os.replace(tmp, self.path)
        shutil.rmtree(self._tmpdir, ignore_errors=True)
        return self.path

    def abort(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        shutil.rmtree(self._tmpdir, ignore_errors=True)

    def __enter__(self) -> "TableWriter":
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is None:
            self.close()
        else:
            self.abort()


def _merge_parts(parts: list[Path], dest: Path, compression: str) -> None:
    """Stream the part files into one parquet file under a unified schema."""
    if not parts:
        pq.write_table(conform([]), dest, compression=compression)
        return
    schemas = [pq.read_schema(p) for p in parts]
    schema = pa.unify_schemas(schemas, promote_options="permissive")
    schema = schema.with_metadata(schemas[0].metadata)
    with pq.ParquetWriter(dest, schema, compression=compression) as writer:
        for p in parts:
            t = pq.read_table(p)
            for name in schema.names:
                if name not in t.schema.names:
                    t = t.append_column(name, pa.nulls(t.num_rows, schema.field(name).type))
            writer.write_table(t.select(schema.names).cast(schema))


_LEFTOVER = re.compile(r"^\.(?P<name>.+\.(parquet|jsonl))\.([a-z0-9_]{8}|tmp)$")


def clear_leftovers(folder: str | os.PathLike, name: str | None = None) -> int:
    """Remove what killed TableWriters left in `folder` (hidden part folders, .tmp files), for
    the table `name` or, with no name, for every table there; return how many were removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return 0
    removed = 0
    for entry in folder.iterdir():
        m = _LEFTOVER.match(entry.name)
        if m and (name is None or m.group("name") == name):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            removed += 1
    return removed


def write_rows(path: str | os.PathLike, rows: list[dict]) -> Path:
    with TableWriter(path) as w:
        w.write(rows)
    return w.path
