"""Tables of pairs: our own schema, and KernelBook-style tables mapped onto it."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from ..errors import BadInput
from ..record import ensure_id, new_record
from ..pipeline.step import Outcome
from ..tableio import columns_of, read_batches
from .problem import problem_reasons

# KernelBook's column names -> ours (DESIGN.md, "Ingest maps other datasets' names").
KERNELBOOK_COLUMNS = {
    "python_code": "pytorch_code",
    "triton_code": "kernel_code",
    "original_triton_code": "original_kernel_code",
    "repo_name": "repo",
    "sha": "commit",
    "licenses": "license",
}


def detect_table_format(path: Path) -> str:
    cols = columns_of(path)
    if "pytorch_code" in cols:
        return "table"
    if "python_code" in cols:
        return "kernelbook"
    raise BadInput(f"missing required column 'pytorch_code' (columns: {', '.join(cols[:12])})",
                   path=str(path),
                   fix="name the reference program column 'pytorch_code' "
                       "(or 'python_code' for a KernelBook-style table)")


def _map_kernelbook(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        out[KERNELBOOK_COLUMNS.get(k, k)] = v
    lic = out.get("license")
    if isinstance(lic, (list, tuple)):
        out["license"] = " AND ".join(str(x) for x in lic) if lic else None
    out.setdefault("source", "kernelbook")
    if out.get("kernel_code") and not out.get("backend"):
        out["backend"] = "triton"
    return out


def read_table(path: Path, fmt: str, batch: int = 1024) -> Iterator[list[Outcome]]:
    """Rows of a table as records; rows without a usable reference are dropped with reasons."""
    required = "python_code" if fmt == "kernelbook" else "pytorch_code"
    if required not in columns_of(path):
        raise BadInput(f"missing required column {required!r}", path=str(path),
                       fix=f"add a {required!r} column holding the reference program")
    row_no = 0
    for rows in read_batches(path, batch):
        out = []
        for r in rows:
            if fmt == "kernelbook":
                r = _map_kernelbook(r)
            code = r.get("pytorch_code")
            if code is not None and not isinstance(code, str):
                raise BadInput(f"'pytorch_code' is {type(code).__name__}, not text", path=str(path),
                               row=row_no, fix="store the reference program as a UTF-8 string")
            rec = ensure_id(new_record(**{**r, "reasons": list(r.get("reasons") or [])}))
            if not rec.get("source"):
                rec["source"] = "file"
            reasons = ["empty_reference"] if not code else problem_reasons(code)
            out.append(Outcome.drop(rec, *reasons) if reasons else Outcome.keep(rec))
            row_no += 1
        yield out
