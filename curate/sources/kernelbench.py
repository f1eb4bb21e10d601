"""KernelBench-format problem files: a folder of level folders, a flat folder, or single files."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

from ..errors import BadInput
from ..record import content_hash, new_record
from ..pipeline.step import Outcome
from .problem import entry_point, problem_reasons

_LEVEL = re.compile(r"^level\d+$")


def _natural(p: Path):
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.as_posix())]


def problem_files(root: Path) -> list[Path]:
    """Problem files under `root`: level*/ *.py when there are level folders, else *.py."""
    if root.is_file():
        return [root]
    levels = [d for d in root.iterdir() if d.is_dir() and _LEVEL.match(d.name)]
    if levels:
        files = [f for d in levels for f in d.glob("*.py")]
    else:
        files = [f for f in root.glob("*.py") if not f.name.startswith("_")]
    return sorted(files, key=_natural)


def is_kernelbench_dir(root: Path) -> bool:
    return root.is_dir() and (any(_LEVEL.match(d.name) for d in root.iterdir() if d.is_dir())
                              or any(root.glob("*.py")))


def _provenance(root: Path) -> dict:
    """repo, commit and license from files beside the problems (SOURCE.md, LICENSE), if any."""
    info: dict = {"repo": None, "commit": None, "license": None}
    base = root if root.is_dir() else root.parent
    src = base / "SOURCE.md"
    if src.is_file():
        text = src.read_text(errors="replace")
        m = re.search(r"\b([\w.-]+/KernelBench|curate/examples)\b", text)
        info["repo"] = m.group(1) if m else None
        m = re.search(r"commit\s+([0-9a-f]{7,40})", text)
        info["commit"] = m.group(1) if m else None
    lic = base / "LICENSE"
    if lic.is_file():
        head = lic.read_text(errors="replace")[:400]
        if "MIT License" in head or "Permission is hereby granted, free of charge" in lic.read_text(errors="replace"):
            info["license"] = "MIT"
        elif "Apache License" in head:
            info["license"] = "Apache-2.0"
    return info


def read_problems(root: Path, *, source: str | None = None, batch: int = 256,
                  repo: str | None = None, license: str | None = None) -> Iterator[list[Outcome]]:
    """One record per problem file; a file that is not a usable problem becomes a dropped row."""
    root = Path(root)
    files = problem_files(root)
    if not files:
        raise BadInput("no problem files (*.py) found", path=str(root),
                       fix="point at a KernelBench folder (level1/ ...) or a folder of .py problems")
    prov = _provenance(root)
    is_kb = any(_LEVEL.match(f.parent.name) for f in files)
    src = source or ("kernelbench" if is_kb else "file")
    base = root if root.is_dir() else root.parent
    out: list[Outcome] = []
    for f in files:
        raw = f.read_bytes()
        try:
            code = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadInput(f"not UTF-8 text ({exc.reason} at byte {exc.start})", path=str(f),
                           fix="re-encode the file as UTF-8") from None
        rel = f.relative_to(base).as_posix()
        rec = new_record(
            id=content_hash(code), pytorch_code=code, source=src,
            entry_point=entry_point(code), repo=repo or prov["repo"], path=rel,
            commit=prov["commit"], license=license or prov["license"])
        reasons = problem_reasons(code)
        out.append(Outcome.drop(rec, *reasons) if reasons else Outcome.keep(rec))
        if len(out) >= batch:
            yield out
            out = []
    if out:
        yield out
