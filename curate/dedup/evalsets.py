"""Evaluation sets to decontaminate against: KernelBench folders, problem files or tables.

A spec is a path, a named data set (`@kernelbench`, see curate/sources/locate.py) or a Hub
dataset id (`ScalingIntelligence/KernelBench`, or `hf://datasets/ORG/NAME`), downloaded once with
huggingface_hub and read from its cache afterwards (also offline). `@kernelbench` is the local
copy where one is named, else the Hub dataset: a fresh clone decontaminates too. A named set or Hub dataset that
cannot be read is not an error: the build goes on, says so loudly, and records that no
decontamination against it was done (the dataset card states it). An explicit path that does
not exist is bad input: a typo must not silently turn decontamination off.
"""

from __future__ import annotations

import logging
import re
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


HUB_ID = re.compile(r"^(?:hf://datasets/)?([A-Za-z0-9][\w.-]*/[\w.-]+)$")
HUB_FILES = ["*.parquet", "*.jsonl", "*.py", "*.json"]
KERNELBENCH_HUB = "ScalingIntelligence/KernelBench"


def resolve(spec: str) -> Path | None:
    """The path of an evaluation set; None for a named set or Hub dataset that cannot be read."""
    from ..sources.ingest import resolve_path
    if spec == "@kernelbench":
        return kernelbench()
    if spec.startswith("@"):
        try:
            path = resolve_path(spec)
        except BadInput:
            return None
        return path if path.exists() else None
    path = Path(spec).expanduser()
    if path.exists():
        return path
    hub = HUB_ID.match(spec)
    if hub and (spec.startswith("hf://") or not spec.startswith((".", "/", "~"))):
        return hub_snapshot(hub.group(1))
    raise BadInput("no such evaluation set", path=str(path),
                   fix="point --against at a KernelBench folder or a table, a Hub dataset id "
                       "(ORG/NAME), or use @kernelbench")


def kernelbench() -> Path | None:
    """The local KernelBench copy where one is named, else the Hub's (cached once read).

    A copy named in CURATE_KERNELBENCH that does not exist is not replaced by the Hub's: the
    user asked for that copy, so the build says loudly that it was not found."""
    from ..sources.locate import KERNELBENCH_ENV, kernelbench_path
    local = kernelbench_path()
    if local is not None:
        if not local.exists():
            log.warning("%s=%s does not exist", KERNELBENCH_ENV, local)
        return local if local.exists() else None
    log.info("@kernelbench: no local copy (%s unset, no shared/data/kernelbench beside the "
             "repository): reading %s from the Hub", KERNELBENCH_ENV, KERNELBENCH_HUB)
    return hub_snapshot(KERNELBENCH_HUB)


def hub_snapshot(repo_id: str) -> Path | None:
    """A Hub dataset's problem files, from huggingface_hub's cache when it holds them (no
    network then), else downloaded into it. None when it can be read neither way."""
    from huggingface_hub import snapshot_download
    for local_only in (True, False):
        try:
            return Path(snapshot_download(repo_id, repo_type="dataset", allow_patterns=HUB_FILES,
                                          local_files_only=local_only))
        except Exception as exc:  # noqa: BLE001 - not cached / offline / no such repo
            err = exc
    log.warning("evaluation set %s could not be read from the Hub: %s: %s", repo_id,
                type(err).__name__, str(err).splitlines()[0][:200] if str(err) else "")
    return None


def files_stamp(path: Path | None) -> str:
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
    tables = _tables_in(path) if path.is_dir() else []
    if (path.is_dir() and not tables) or path.suffix == ".py":
        from ..sources.kernelbench import read_problems
        for batch in read_problems(path):
            for outcome in batch:
                row = outcome.dropped if outcome.dropped is not None else outcome.kept[0]
                ev.labels.append(row.get("path") or row["id"])
                ev.codes.append(row["pytorch_code"])
        return ev
    from ..tableio import read_batches
    for table in tables or [path]:
        for batch in read_batches(table):
            for row in batch:
                code = row.get("pytorch_code") or row.get("code")  # KernelBench on the Hub: code
                if code:
                    ev.labels.append(_label(row, len(ev.labels)))
                    ev.codes.append(code)
    return ev


def _tables_in(folder: Path) -> list[Path]:
    """Tables of a folder that holds no problem files (a Hub dataset's snapshot)."""
    if any(folder.rglob("*.py")):
        return []
    return sorted(p for p in folder.rglob("*") if p.suffix in (".parquet", ".jsonl")
                  and p.is_file())


def _label(row: dict, n: int) -> str:
    if row.get("path"):
        return str(row["path"])
    if row.get("name") is not None and row.get("level") is not None:
        return f"level{row['level']}/{row['name']}"
    return str(row.get("name") or row.get("id") or f"row{n}")
