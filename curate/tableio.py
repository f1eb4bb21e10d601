"""Read and write record tables (.parquet or .jsonl) in batches, checked against the schema.

Tables are streamed: a reader yields lists of dicts a batch at a time, and a writer appends batch
by batch, so that a table of a million rows is never held twice in memory. Writers write to a
temporary file and rename it into place on close, so a crash never leaves a half-written table.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from .errors import BadInput
from .schema import conform

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


def read_batches(path: str | os.PathLike, batch_size: int = DEFAULT_BATCH) -> Iterator[list[dict]]:
    """Yield the rows of a table as lists of dicts, `batch_size` at a time."""
    path = Path(path)
    if not path.is_file():
        raise BadInput("no such file", path=str(path), fix="check the path")
    fmt = table_format(path)
    if fmt == ".parquet":
        yield from _read_parquet(path, batch_size)
    else:
        yield from _read_jsonl(path, batch_size)


def _read_parquet(path: Path, batch_size: int) -> Iterator[list[dict]]:
    try:
        pf = pq.ParquetFile(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise BadInput(f"not a readable parquet file ({exc})", path=str(path),
                       fix="re-export the table as parquet, or pass a .jsonl file") from None
    binary_cols = [f.name for f in pf.schema_arrow if pa.types.is_binary(f.type)
                   or pa.types.is_large_binary(f.type)]
    row0 = 0
    try:
        for batch in pf.iter_batches(batch_size=batch_size):
            rows = batch.to_pylist()
            for i, r in enumerate(rows):
                for c in binary_cols:
                    if isinstance(r.get(c), (bytes, bytearray)):
                        r[c] = _decode(r[c], path, row0 + i, c)
            row0 += len(rows)
            yield rows
    except pa.ArrowInvalid as exc:
        raise BadInput(f"parquet data could not be read near row {row0} ({exc})", path=str(path),
                       row=row0, fix="check that the file is complete and valid UTF-8") from None


def _decode(raw: bytes, path: Path, row: int, column: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"column {column!r} is not UTF-8 text ({exc.reason} at byte {exc.start})",
                       path=str(path), row=row,
                       fix="re-encode the text as UTF-8 before ingesting") from None


def _read_jsonl(path: Path, batch_size: int) -> Iterator[list[dict]]:
    batch: list[dict] = []
    with open(path, "rb") as fh:
        for i, raw in enumerate(fh):
            if not raw.strip():
                continue
            line = _decode(raw, path, i, "(line)")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadInput(f"invalid JSON ({exc.msg} at column {exc.colno})", path=str(path),
                               row=i, fix="write one JSON object per line") from None
            if not isinstance(row, dict):
                raise BadInput("a line is not a JSON object", path=str(path), row=i,
                               fix="write one JSON object per line")
            batch.append(row)
            if len(batch) >= batch_size:
                yield batch
                batch = []
    if batch:
        yield batch


def read_rows(path: str | os.PathLike) -> list[dict]:
    """The whole table as a list of dicts (for small tables and tests)."""
    return [r for b in read_batches(path) for r in b]


def columns_of(path: str | os.PathLike) -> list[str]:
    """Column names of a table without reading it all (jsonl: union over the first batch)."""
    path = Path(path)
    if table_format(path) == ".parquet":
        try:
            return list(pq.read_schema(path).names)
        except (pa.ArrowInvalid, OSError) as exc:
            raise BadInput(f"not a readable parquet file ({exc})", path=str(path),
                           fix="re-export the table as parquet, or pass a .jsonl file") from None
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


def write_rows(path: str | os.PathLike, rows: list[dict]) -> Path:
    with TableWriter(path) as w:
        w.write(rows)
    return w.path
