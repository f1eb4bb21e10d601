"""What the dataset card says from the rows' verification records (the `verification` column):
the checks, devices and versions they name, the second shape's coverage and what it found, and
the rows that the second opinion (kernelguard) flags although verify kept them."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from ..hub.shards import list_shards

SHOWN = 20   # rows listed by id at most, per list
WHY = {"static_compile": "compiled for the problem's own shapes (torch.compile, static shapes)",
       "sizes_not_module_constants": "sizes not module-level integer constants",
       "no_get_inputs": "no get_inputs", "reference_fails": "the reference fails at the second size",
       "out_of_memory": "out of memory at the second size", "timeout": "time ran out",
       "off": "second shape switched off", "too_large": "too large for the device at the second size",
       "harness_error": "the check itself failed", "unsupported": "unsupported",
       "not_verified": "not verified"}


@dataclass
class RecordFacts:
    rows: int = 0                  # kept rows
    recorded: int = 0              # kept rows with a record
    example_id: str | None = None
    devices: list = field(default_factory=list)          # (what, rows)
    software: list = field(default_factory=list)
    gate_versions: list = field(default_factory=list)
    timing: list = field(default_factory=list)
    trials: list = field(default_factory=list)
    second_checked: int = 0
    second_why: list = field(default_factory=list)       # (why not checked, rows)
    specialized: list = field(default_factory=list)      # rejected rows: {id, sizes, error}
    specialized_total: int = 0
    opinion_tool: str | None = None
    opinion_missing: int = 0
    flagged: list = field(default_factory=list)          # kept rows it flags: {id, labels}
    flagged_total: int = 0
    flagged_labels: list = field(default_factory=list)   # (label, kept rows)


def _records(path: Path) -> list[tuple[str, str | None, dict]]:
    names = set(pq.read_schema(path).names)
    if "verification" not in names:
        return []
    cols = [c for c in ("id", "status", "verification") if c in names]
    t = pq.read_table(path, columns=cols).to_pylist()
    out = []
    for r in t:
        try:
            rec = json.loads(r["verification"]) if r.get("verification") else None
        except ValueError:
            rec = None
        if isinstance(rec, dict):
            out.append((str(r.get("id")), r.get("status"), rec))
    return out


def gather_records(build: Path) -> RecordFacts:
    f = RecordFacts()
    kept = [rec for ps in list_shards(build / "data").values() for p in ps
            for rec in _records(p)]
    f.rows = sum(pq.ParquetFile(p).metadata.num_rows
                 for ps in list_shards(build / "data").values() for p in ps)
    f.recorded = len(kept)
    if kept:
        f.example_id = kept[0][0]
        _kept_facts(f, [rec for _, _, rec in kept])
        _opinion(f, kept)
    rejected = build / "rejected.parquet"
    if rejected.is_file():
        spec = [(i, rec) for i, st, rec in _records(rejected) if st == "shape_specialized"]
        f.specialized_total = len(spec)
        f.specialized = [{"id": i, "sizes": (rec.get("second_shape") or {}).get("sizes") or {},
                          "error": ((rec.get("outcome") or {}).get("error") or "")[:160]}
                         for i, rec in spec[:SHOWN]]
    return f


def _kept_facts(f: RecordFacts, recs: list[dict]) -> None:
    def count(fn) -> list:
        return Counter(fn(r) for r in recs).most_common()
    f.devices = count(_device)
    f.software = count(lambda r: ", ".join(f"{k} {v}" for k, v in sorted(
        (r.get("software") or {}).items()) if k in ("torch", "triton", "cuda", "cxx", "nvcc")
        and v))
    f.gate_versions = count(lambda r: " ".join(
        f"{k}:{v}" for k, v in sorted(((r.get("versions") or {}).get("gates") or {}).items())))
    f.timing = count(lambda r: (r.get("timing") or {}).get("method") or "not timed")
    f.trials = count(lambda r: (r.get("settings") or {}).get("trials"))
    second = [r.get("second_shape") or {} for r in recs]
    f.second_checked = sum(1 for s in second if s.get("checked"))
    f.second_why = Counter(s.get("why") or "unknown" for s in second
                           if not s.get("checked")).most_common()


def _device(rec: dict) -> str:
    d = rec.get("device") or {}
    if d.get("kind") == "cuda":
        extra = ", ".join(x for x in (d.get("capability") and f"sm {d['capability']}",
                                      d.get("driver") and f"driver {d['driver']}",
                                      d.get("cuda") and f"CUDA {d['cuda']}") if x)
        return f"{d.get('gpu') or 'GPU'} ({extra})" if extra else str(d.get("gpu") or "GPU")
    return f"{d.get('cpu') or 'CPU'} ({d.get('cores')} cores)"


def _opinion(f: RecordFacts, kept: list) -> None:
    labels: Counter = Counter()
    flagged = []
    for rid, _, rec in kept:
        op = rec.get("second_opinion") or {}
        f.opinion_tool = f.opinion_tool or (f"{op.get('tool')} {op.get('version')}"
                                            if op.get("version") else None)
        if op.get("available") is False or "labels" not in op:
            f.opinion_missing += 1
            continue
        if op.get("flagged"):
            flagged.append({"id": rid, "labels": op.get("labels") or []})
            labels.update(op.get("labels") or [])
    f.flagged_total = len(flagged)
    f.flagged = flagged[:SHOWN]
    f.flagged_labels = labels.most_common()
