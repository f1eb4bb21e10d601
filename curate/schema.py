"""The record schema, built from schemas/record.v*.yaml: the one source of truth for columns."""

from __future__ import annotations

import functools
from typing import Any, Iterable

import pyarrow as pa
import yaml

from .errors import BadInput
from .datadirs import data_dir

SCHEMA_VERSION = 1

_TYPES = {
    "string": pa.string(),
    "bool": pa.bool_(),
    "float64": pa.float64(),
    "int64": pa.int64(),
    "list<string>": pa.list_(pa.string()),
}


@functools.lru_cache(maxsize=None)
def columns() -> tuple[dict, ...]:
    spec = yaml.safe_load((data_dir("schemas") / f"record.v{SCHEMA_VERSION}.yaml").read_text())
    return tuple(spec["columns"])


@functools.lru_cache(maxsize=None)
def record_schema() -> pa.Schema:
    """The pyarrow schema of the contract's columns (extra columns are appended per table)."""
    fields = [pa.field(c["name"], _TYPES[c["type"]], nullable=c.get("nullable", True))
              for c in columns()]
    return pa.schema(fields, metadata={"curate.schema_version": str(SCHEMA_VERSION)})


def column_names() -> list[str]:
    return [c["name"] for c in columns()]


def defaults() -> dict[str, Any]:
    return {c["name"]: c.get("default") for c in columns()}


def new_record(**values: Any) -> dict:
    """A record with every contract column present (defaults filled), plus `values`."""
    rec = {k: (list(v) if isinstance(v, list) else v) for k, v in defaults().items()}
    rec.update(values)
    return rec


def conform(rows: Iterable[dict], *, where: str = "table") -> pa.Table:
    """Rows -> a table whose contract columns have the schema's types; extras pass through.

    Raises BadInput naming the row when a value does not fit its column.
    """
    rows = list(rows)
    schema = record_schema()
    extra: list[str] = []
    for r in rows:
        for k in r:
            if k not in schema.names and k not in extra:
                extra.append(k)
    arrays, fields = [], []
    for f in schema:
        default = defaults()[f.name]
        values = [r.get(f.name, default) for r in rows]
        if f.name == "reasons":
            values = [list(v) if v is not None else [] for v in values]
        try:
            arr = pa.array(values, type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError) as exc:
            bad = _first_bad(values, f.type)
            raise BadInput(f"column {f.name!r} holds a value that is not {f.type}: {exc}",
                           path=where, row=bad,
                           fix=f"make {f.name!r} a {f.type} (see schemas/record.v{SCHEMA_VERSION}.yaml)")
        if not f.nullable and arr.null_count:
            bad = next(i for i, v in enumerate(values) if v is None)
            raise BadInput(f"column {f.name!r} must not be null", path=where, row=bad,
                           fix=f"give every row a {f.name!r}")
        arrays.append(arr)
        fields.append(f)
    for name in extra:
        arr = pa.array([r.get(name) for r in rows])
        arrays.append(arr)
        fields.append(pa.field(name, arr.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))


def _first_bad(values: list, typ: pa.DataType) -> int | None:
    for i, v in enumerate(values):
        try:
            pa.array([v], type=typ)
        except Exception:
            return i
    return None


def check_table(table: pa.Table, *, where: str = "table") -> None:
    """Check that a table's contract columns have the schema's types (extras are not checked)."""
    schema = record_schema()
    for f in schema:
        if f.name not in table.schema.names:
            continue
        got = table.schema.field(f.name).type
        if got != f.type and not pa.types.is_null(got):
            raise BadInput(f"column {f.name!r} has type {got}, the schema says {f.type}",
                           path=where, fix=f"cast {f.name!r} to {f.type}")
