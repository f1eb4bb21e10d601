"""The ingest source: any mix of KernelBench folders, problem files and tables."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..errors import BadInput
from ..pipeline.step import Outcome, Source
from .kernelbench import is_kernelbench_dir, read_problems
from .tables import detect_table_format, read_table

FORMATS = ("auto", "kernelbench", "kernelbook", "table")


def resolve_path(p: str) -> Path:
    """Paths in pipelines may name bundled data: `@examples`, `@kernelbench`."""
    if p.startswith("@"):
        from .locate import named_path
        return named_path(p[1:])
    return Path(p).expanduser()


class IngestSource(Source):
    name = "ingest"

    def __init__(self, paths: Iterable[str], format: str = "auto"):
        self.paths = [str(p) for p in paths]
        if format not in FORMATS:
            raise BadInput(f"unknown format {format!r}", fix=f"use one of {', '.join(FORMATS)}")
        self.format = format
        if not self.paths:
            raise BadInput("nothing to ingest", fix="name at least one folder or table")

    def config(self) -> dict:
        return {"paths": [str(resolve_path(p).resolve()) for p in self.paths],
                "format": self.format}

    def read(self) -> Iterable[list[Outcome]]:
        for p in self.paths:
            path = resolve_path(p)
            if not path.exists():
                raise BadInput("no such file or folder", path=str(path), fix="check the path")
            fmt = self.format
            if fmt == "auto":
                if path.is_dir() or path.suffix == ".py":
                    fmt = "kernelbench"
                else:
                    fmt = detect_table_format(path)
            if fmt == "kernelbench":
                if path.is_dir() and not is_kernelbench_dir(path):
                    raise BadInput("folder holds no level*/ folders and no .py problems",
                                   path=str(path), fix="point at a KernelBench checkout's folder")
                yield from read_problems(path)
            else:
                yield from read_table(path, fmt)
