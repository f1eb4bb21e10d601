"""Evaluation sets to decontaminate against: KernelBench folders, problem files or tables.

A spec is a path or a named data set (`@kernelbench`, see curate/sources/locate.py). A named set
that cannot be found is not an error: the build goes on, says so loudly, and records that no
decontamination against it was done (the dataset card states it). An explicit path that does
not exist is bad input: a typo must not silently turn decontamination off.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput

log = logging.getLogger("curate")


@dataclass
class EvalSet:
    spec: str                      # as written: "@kernelbench", "path/to/kb"
    path: Path | None              # None: not found
    labels: list[str] = field(default_factory=list)   # "level1/19_ReLU.py"
    codes: list[str] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.path is not None


def resolve(spec: str) -> Path | None:
    """The path of an evaluation set; None for a named set that is not here."""
    from ..sources.ingest import resolve_path
    if spec.startswith("@"):
        try:
            path = resolve_path(spec)
        except BadInput:
            return None
        return path if path.exists() else None
    path = Path(spec).expanduser()
    if not path.exists():
        raise BadInput("no such evaluation set", path=str(path),
                       fix="point --against at a KernelBench folder or a table, or use "
                           "@kernelbench")
    return path


def fingerprint(path: Path | None) -> str:
    """Cheap identity of an evaluation set (file names, sizes, mtimes) for the step's cache key."""
    if path is None:
        return "missing"
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    import hashlib
    h = hashlib.sha256()
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(path) if f != path else f.name}:{st.st_size}:"
                 f"{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:16]


def load(spec: str, path: Path | None = None) -> EvalSet:
    """Read the reference programs of an evaluation set."""
    path = resolve(spec) if path is None else path
    ev = EvalSet(spec, path)
    if path is None:
        return ev
    if path.is_dir() or path.suffix == ".py":
        from ..sources.kernelbench import read_problems
        for batch in read_problems(path):
            for outcome in batch:
                row = outcome.dropped if outcome.dropped is not None else outcome.kept[0]
                ev.labels.append(row.get("path") or row["id"])
                ev.codes.append(row["pytorch_code"])
    else:
        from ..tableio import read_batches
        for batch in read_batches(path):
            for row in batch:
                if row.get("pytorch_code"):
                    ev.labels.append(row.get("path") or row.get("id") or f"row{len(ev.labels)}")
                    ev.codes.append(row["pytorch_code"])
    return ev
