"""Everything a dataset card states, gathered from a build directory (and nothing invented).

The card template only formats what is here: counts come from the shards and stats.json, the
recipe from pipeline.yaml, the measurement set-up from the rows themselves.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from .. import __version__
from ..errors import BadInput
from ..hub.shards import list_shards
from .machine import MACHINE, cpp_build
from .reasons import WARN, lookup
from .records import RecordFacts, gather_records

# Columns the card summarizes; shards may lack some (older builds, other pipelines).
SUMMARY_COLUMNS = ["sandbox", "source", "backend", "speedup", "speedup_ci_low", "speedup_ci_high", "license",
                   "repo", "gpu", "torch_version", "triton_version", "cuda_version", "generator",
                   "status", "max_abs_err", "max_rel_err", "cluster_id", "core_kind", "ref_ms",
                   "kernel_ms", "reasons"]

# SPDX ids -> the Hub's license ids (lower case; anything unknown is stated as "other").
HUB_LICENSES = {
    "mit": "mit", "apache-2.0": "apache-2.0", "bsd-2-clause": "bsd-2-clause",
    "bsd-3-clause": "bsd-3-clause", "bsd": "bsd", "gpl-2.0": "gpl-2.0", "gpl-3.0": "gpl-3.0",
    "lgpl-2.1": "lgpl-2.1", "lgpl-3.0": "lgpl-3.0", "agpl-3.0": "agpl-3.0", "mpl-2.0": "mpl-2.0",
    "cc0-1.0": "cc0-1.0", "cc-by-4.0": "cc-by-4.0", "cc-by-sa-4.0": "cc-by-sa-4.0",
    "cc-by-nc-4.0": "cc-by-nc-4.0", "unlicense": "unlicense", "bsl-1.0": "bsl-1.0",
    "isc": "isc", "zlib": "zlib", "artistic-2.0": "artistic-2.0", "epl-2.0": "epl-2.0",
}

SIZE_CATEGORIES = [(1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"),
                   (1_000_000, "100K<n<1M"), (10_000_000, "1M<n<10M"),
                   (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B")]

_ARROW_DTYPES = {pa.string(): "string", pa.large_string(): "large_string", pa.bool_(): "bool",
                 pa.float64(): "float64", pa.float32(): "float32", pa.int64(): "int64",
                 pa.int32(): "int32", pa.null(): "null"}


@dataclass
class ConfigFacts:
    """One `datasets` config (default: data/, infill: infill/)."""
    name: str
    folder: str
    splits: dict[str, dict] = field(default_factory=dict)   # split -> files, rows, bytes
    features: list[dict] = field(default_factory=list)
    download_size: int = 0
    dataset_size: int = 0
    empty: set[str] = field(default_factory=set)           # columns null in every row

    @property
    def rows(self) -> int:
        return sum(s["num_examples"] for s in self.splits.values())


@dataclass
class Facts:
    build_dir: Path
    repo_id: str | None
    pretty_name: str
    stats: dict
    pipeline: dict
    pipeline_text: str
    configs: list[ConfigFacts]
    rows: dict[str, list]          # kept pairs, SUMMARY_COLUMNS that exist
    infill_rows: dict[str, list]
    infill_config: dict | None
    rejected_total: int
    rejected_reasons: list[dict]   # (stage, reason, rows) over rejected.parquet's `reasons` lists
    dropped_by: list[dict]         # (stage, reason, rows): each dropped row once
    decontamination: dict
    build_fingerprint: str  # what the card was rendered from (is_current compares it)
    splits_settings: dict | None = None  # splits.json: how the validation split was drawn
    machine: dict | None = None          # machine.json: the build machine's processor
    cpp_build: dict | None = None        # how the C++ kernels are compiled (from kernel_code)
    records: RecordFacts | None = None   # what the rows' verification records say
    curate_version: str = __version__

    # -- derived numbers the template uses -------------------------------------------------
    @property
    def kept(self) -> int:
        return self.configs[0].rows if self.configs else 0

    @property
    def threshold(self) -> float | None:
        t = self.stats.get("threshold", self.pipeline.get("threshold"))
        return float(t) if t is not None else None

    @property
    def device(self) -> str:
        return str(self.stats.get("device") or self.pipeline.get("device") or "unknown")

    @property
    def verified(self) -> int:
        return sum(1 for v in self.rows.get("status") or [] if v == "verified")

    @property
    def sandboxes(self) -> list[tuple[str, int]]:
        """What the kept rows ran under (the `sandbox` column), most common first."""
        return [(k, n) for k, n in self.counter("sandbox") if k != "(none)"]

    @property
    def has_verify(self) -> bool:
        return self.step_settings("verify") is not None

    @property
    def backends(self) -> list[tuple[str, int]]:
        return [(b, n) for b, n in self.counter("backend") if b != "(none)"]

    def counter(self, column: str, rows: dict | None = None) -> list[tuple[str, int]]:
        values = (rows if rows is not None else self.rows).get(column) or []
        c = Counter("(none)" if v is None else str(v) for v in values)
        return c.most_common()

    @property
    def speedups(self) -> list[float]:
        return [v for v in self.rows.get("speedup") or [] if v is not None]

    @property
    def speedups_low(self) -> list[float]:
        return [v for v in self.rows.get("speedup_ci_low") or [] if v is not None]

    def speedup_summary(self) -> dict | None:
        s = self.speedups
        if not s:
            return None
        low = self.speedups_low
        return {"n": len(s), "median": statistics.median(s), "p10": _quantile(s, 0.1),
                "p90": _quantile(s, 0.9),
                "min": min(s), "max": max(s), "geomean": statistics.geometric_mean(
                    [max(v, 1e-12) for v in s]),
                "min_ci_low": min(low) if low else None,
                "unmeasured": self.kept - len(s)}

    def per_source(self) -> list[dict]:
        """One row per source: pairs, share, backends, speedup quantiles."""
        out = []
        sources = self.rows.get("source") or []
        backends = self.rows.get("backend") or [None] * len(sources)
        speed = self.rows.get("speedup") or [None] * len(sources)
        for src, n in Counter("(none)" if s is None else s for s in sources).most_common():
            idx = [i for i, s in enumerate(sources) if ("(none)" if s is None else s) == src]
            sp = [speed[i] for i in idx if speed[i] is not None]
            be = Counter(backends[i] or "?" for i in idx)
            out.append({
                "source": src, "pairs": n, "share": n / max(len(sources), 1),
                "backends": ", ".join(f"{b} {c}" for b, c in be.most_common()),
                "measured": len(sp),
                "median": statistics.median(sp) if sp else None,
                "p10": _quantile(sp, 0.1), "p90": _quantile(sp, 0.9),
                "max": max(sp) if sp else None})
        return out

    def stage_table(self) -> list[dict]:
        return [{"name": s.get("name"), "rows_in": s.get("rows_in", 0),
                 "rows_out": s.get("rows_out", 0), "dropped": s.get("dropped", 0),
                 "seconds": s.get("seconds", 0.0), "reused": s.get("skipped", False)}
                for s in self.stats.get("stages") or []]

    def stage_extra(self, name: str) -> dict | None:
        """What a stage reported beyond row counts (its `extra` in stats.json), if it ran."""
        for s in self.stats.get("stages") or []:
            if s.get("name") == name:
                return s.get("extra") or {}
        return None

    def rejection_reasons(self) -> list[dict]:
        """Every (stage, reason, count), largest first."""
        out = []
        for s in self.stats.get("stages") or []:
            for reason, n in (s.get("reasons") or {}).items():
                out.append({"stage": s.get("name"), "reason": reason, "count": n})
        return sorted(out, key=lambda r: (-r["count"], r["stage"] or "", r["reason"]))

    def caught(self) -> list[dict]:
        """Failing reasons on dropped rows that failed verification (not the keep filter's own
        echo, not the warnings such rows may carry too)."""
        skip = ("status:", "below_threshold", "speed_not_measured")
        return [r for r in self.rejected_reasons
                if r["status"] not in ("-", "verified") and not r["reason"].startswith(skip)
                and (lookup(r["reason"]) or ("fail",))[0] != WARN]

    def drop_labels(self) -> list[dict]:
        """(stage, reason, count) with each dropped row counted once, largest first."""
        return self.dropped_by

    def kept_warnings(self) -> list[tuple[str, int]]:
        """Reasons carried by kept rows: warnings that did not fail them."""
        c = Counter(r for rs in self.rows.get("reasons") or [] for r in rs or [])
        return c.most_common()

    @property
    def gpu_kernels(self) -> bool:
        return any(b in ("cuda", "triton") for b, _ in self.backends)

    @property
    def cpu_threads(self) -> int | None:
        """The threads each timed CPU call ran on (verify's stats), where the build says."""
        threads = (self.stage_extra("verify") or {}).get("cpu_threads")
        return int(threads) if threads else None

    @property
    def retimed_rows(self) -> int:
        """Rows near the threshold that verify timed in more process pairs (CPU builds)."""
        return int((self.stage_extra("verify") or {}).get("retimed_rows") or 0)

    def processor(self) -> str | None:
        """The build machine's CPU, as the card names it: "AMD EPYC 7763 (2 cores)"."""
        m = self.machine or {}
        if not m.get("processor"):
            return None
        cores = m.get("cores")
        return f"{m['processor']} ({cores} core{'s' if cores != 1 else ''})" if cores else \
            m["processor"]

    def where(self) -> str:
        """Where the kept rows were measured: the GPU(s), or the build machine's CPU."""
        gpus = [g for g, _ in self.counter("gpu") if g != "(none)"]
        if len(gpus) == 1:
            return gpus[0]
        if gpus:
            return f"{len(gpus)} device types"
        if self.device == "cpu":
            return f"the CPU {self.processor()}" if self.processor() else "the CPU"
        return f"device {self.device}"

    def licenses(self) -> list[tuple[str, int]]:
        return self.counter("license")

    def scraped(self) -> dict | None:
        """Kept pairs whose reference was scraped: how many, from how many repositories, and
        how many have no license recognized in their repository's license files."""
        src, repo, lic = (self.rows.get(c) or [] for c in ("source", "repo", "license"))
        idx = [i for i, s in enumerate(src) if s == "scrape"]
        if not idx:
            return None
        return {"pairs": len(idx), "repos": len({repo[i] for i in idx if i < len(repo)}),
                "unknown": sum(1 for i in idx if i >= len(lic) or lic[i] is None)}

    def hub_licenses(self) -> list[str]:
        """The front matter's `license`: every license present, mapped to Hub ids, honestly."""
        ids = []
        for lic, _ in self.licenses():
            if lic == "(none)":
                hub = "unknown"
            else:
                hub = HUB_LICENSES.get(lic.lower(), "other")
            if hub not in ids:
                ids.append(hub)
        return ids or ["unknown"]

    def size_category(self) -> str:
        n = self.kept
        for bound, name in SIZE_CATEGORIES:
            if n < bound:
                return name
        return "n>1T"

    def steps(self) -> list[tuple[str, dict]]:
        out = []
        for entry in self.pipeline.get("steps") or []:
            if isinstance(entry, str):
                out.append((entry, {}))
            elif isinstance(entry, dict) and len(entry) == 1:
                name, args = next(iter(entry.items()))
                out.append((name, dict(args or {})))
        return out

    def step_settings(self, name: str) -> dict | None:
        for n, args in self.steps():
            if n == name:
                return args
        return None

    def measurement(self) -> dict:
        return {k: self.counter(k) for k in ("gpu", "torch_version", "triton_version",
                                             "cuda_version")}

    def worst_errors(self) -> dict:
        out = {}
        for k in ("max_abs_err", "max_rel_err"):
            v = [x for x in self.rows.get(k) or [] if x is not None]
            out[k] = max(v) if v else None
        return out


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    qs = statistics.quantiles(values, n=100, method="inclusive")
    return qs[max(0, min(98, round(q * 100) - 1))]


def features_of(schema: pa.Schema) -> list[dict]:
    """The card's `dataset_info.features` for a parquet schema (the `datasets` YAML form)."""
    out = []
    for f in schema:
        t = f.type
        if pa.types.is_list(t) or pa.types.is_large_list(t):
            out.append({"name": f.name, "sequence": _ARROW_DTYPES.get(t.value_type, "string")})
        else:
            out.append({"name": f.name, "dtype": _ARROW_DTYPES.get(t, str(t))})
    return out


def _config(build: Path, name: str, folder: str) -> ConfigFacts | None:
    shards = list_shards(build / folder)
    if not shards:
        return None
    cfg = ConfigFacts(name, folder)
    order = ["train", "validation", "test"]
    for split in sorted(shards, key=lambda s: (order.index(s) if s in order else 9, s)):
        files = shards[split]
        rows = nbytes = 0
        for p in files:
            md = pq.ParquetFile(p).metadata
            rows += md.num_rows
            nbytes += sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))
            cfg.download_size += p.stat().st_size
        cfg.splits[split] = {"files": [p.relative_to(build).as_posix() for p in files],
                             "num_examples": rows, "num_bytes": nbytes}
        cfg.dataset_size += nbytes
    first = next(iter(shards.values()))[0]
    cfg.features = features_of(pq.read_schema(first))
    cfg.empty = _empty_columns([p for ps in shards.values() for p in ps])
    return cfg


def _empty_columns(files: list[Path]) -> set[str]:
    """Columns whose every value is null, from the parquet statistics (no data read)."""
    nulls: Counter = Counter()
    total = 0
    names: list[str] = []
    for p in files:
        md = pq.ParquetFile(p).metadata
        names = [md.schema.column(i).path.split(".")[0] for i in range(md.num_columns)]
        total += md.num_rows
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for i in range(rg.num_columns):
                st = rg.column(i).statistics
                if st is None or not st.has_null_count:
                    nulls[names[i]] -= 10 ** 12  # unknown: never call it empty
                else:
                    nulls[names[i]] += st.null_count
    return {n for n in names if total and nulls[n] >= total}


def _columns(build: Path, folder: str) -> dict[str, list]:
    files = [p for ps in list_shards(build / folder).values() for p in ps]
    cols: dict[str, list] = {}
    for p in files:
        names = set(pq.read_schema(p).names)
        want = [c for c in SUMMARY_COLUMNS if c in names]
        t = pq.read_table(p, columns=want)
        n = t.num_rows
        before = len(next(iter(cols.values()))) if cols else 0
        for c in set(want) | set(cols):
            cols.setdefault(c, [None] * before)
            cols[c].extend(t.column(c).to_pylist() if c in want else [None] * n)
    return cols


# -- decontamination ------------------------------------------------------------------------

_DECONTAM = re.compile(r"decontam|contaminat", re.I)
_NEGATIVE = re.compile(r"\b(no|not|none|skip|skipped|missing|unavailable|without|absent|"
                       r"could ?n[o']t|failed|unreadable)\b|not_found|no_eval|skipped", re.I)


def _strings(obj: Any, path: str = "") -> list[tuple[str, str]]:
    """(where, text) for every key and string value in a JSON-like object."""
    out = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            here = f"{path}.{k}" if path else str(k)
            out.append((here, str(k)))
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                out.append((here, f"{k}={v}"))
            out += _strings(v, here)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _strings(v, f"{path}[{i}]")
    elif isinstance(obj, str):
        out.append((path, obj))
    return out


def decontamination(stats: dict, pipeline: dict, steps: list[tuple[str, dict]]) -> dict:
    """What the build records about decontamination; `done` only where something says it was done.

    The dedup step reports `decontaminated`, `decontaminated_against`, `evalsets_missing` and
    `dropped_contaminated` (stats.json, stage `extra`). Builds without that report are read for
    any key or text mentioning (de)contamination: a statement that it was skipped, or no
    statement at all, makes the card say that none was done.
    """
    dedup = next((args for name, args in steps if name == "dedup"), None)
    against = (dedup or {}).get("against") or []
    if isinstance(against, str):
        against = [against]
    out = {"done": False, "against": [], "dropped": 0, "configured": bool(against),
           "requested": [str(a) for a in against], "missing": [], "negative": [],
           "problems": None, "evidence": [], "origin": {}}
    dropped = 0
    for s in stats.get("stages") or []:
        for reason, n in (s.get("reasons") or {}).items():
            if _DECONTAM.search(reason) and not _NEGATIVE.search(reason):
                dropped += n
    out["dropped"] = dropped
    reports = [s.get("extra") or {} for s in stats.get("stages") or []]
    reports += [s for s in stats.get("stages") or []]  # a report kept at the stage's top level
    report = next((r for r in reports if isinstance(r, dict) and "decontaminated" in r), None)
    if report is not None:
        done_against = report.get("decontaminated_against") or {}
        out["against"] = list(done_against) if isinstance(done_against, dict) else \
            [str(a) for a in done_against]
        out["origin"] = {spec: _origin(str(path)) for spec, path in (
            done_against.items() if isinstance(done_against, dict) else [])}
        out["missing"] = [str(m) for m in report.get("evalsets_missing") or []]
        out["done"] = bool(report.get("decontaminated")) and bool(out["against"])
        out["problems"] = report.get("evalset_problems")
        if report.get("dropped_contaminated") is not None:
            out["dropped"] = int(report["dropped_contaminated"])
        if out["missing"]:
            out["negative"].append(f"evaluation set(s) {', '.join(out['missing'])} not found")
        if report.get("note"):
            out["negative"].append(str(report["note"]))
        return out
    evidence = [(w, t) for w, t in _strings(stats) if _DECONTAM.search(t) or _DECONTAM.search(w)]
    negative = [(w, t) for w, t in evidence if _NEGATIVE.search(t) or _NEGATIVE.search(w)]
    positive = [(w, t) for w, t in evidence if (w, t) not in negative]
    out["done"] = bool(positive) and not negative
    out["against"] = out["requested"] if out["done"] else []
    out["negative"] = [t for _, t in negative]
    out["evidence"] = [f"{w}: {t}" for w, t in evidence][:10]
    return out


_HUB_CACHE = re.compile(r"datasets--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<rev>[0-9a-f]+)")


def _origin(path: str) -> str | None:
    """"the Hub dataset ORG/NAME at revision R" for an evaluation set read from the Hub cache."""
    m = _HUB_CACHE.search(path)
    return f"the Hub dataset {m['org']}/{m['name']} at revision {m['rev'][:12]}" if m else None


# -- loading --------------------------------------------------------------------------------

def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BadInput(f"not valid JSON ({exc})", path=str(path),
                       fix="rebuild, or delete the file") from None


def _rejected_reasons(path: Path) -> list[dict]:
    """Every reason recorded on a dropped row (a row can carry several: the gates that fired)."""
    names = set(pq.read_schema(path).names)
    if "reasons" not in names:
        return []
    cols = [c for c in ("stage", "status", "reasons") if c in names]
    c: Counter = Counter()
    pf = pq.ParquetFile(path)
    for batch in pf.iter_batches(columns=cols, batch_size=4096):
        d = batch.to_pydict()
        for i, reasons in enumerate(d["reasons"]):
            stage = d["stage"][i] if "stage" in d else None
            status = d["status"][i] if "status" in d else None
            for r in reasons or []:
                c[(stage or "?", status or "-", r)] += 1
    return [{"stage": s, "status": st, "reason": r, "count": n}
            for (s, st, r), n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]


def _dropped_by(path: Path, stage_reasons: dict[str, set]) -> list[dict]:
    """Each dropped row once: by its stage and the last reason that stage gave it (reasons of
    earlier stages, e.g. verify's warnings on a row keep drops, are not why it was dropped)."""
    names = set(pq.read_schema(path).names)
    c: Counter = Counter()
    for batch in pq.ParquetFile(path).iter_batches(
            columns=[n for n in ("stage", "reasons") if n in names], batch_size=4096):
        d, n = batch.to_pydict(), batch.num_rows
        for stage, rs in zip(d.get("stage") or [None] * n, d.get("reasons") or [None] * n):
            stage, rs = stage or "?", rs or []
            own = [r for r in rs if r in stage_reasons.get(stage, ())] or rs or ["(none)"]
            reason = own[-1]
            c[(stage, "contaminated:*" if reason.startswith("contaminated:") else reason)] += 1
    return [{"stage": s, "reason": r, "count": n}
            for (s, r), n in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]


def build_fingerprint(build: Path, repo_id: str | None) -> str:
    """What the card was rendered from: shard names and sizes, stats, pipeline, repo id."""
    h = hashlib.sha256()
    h.update((repo_id or "").encode())
    for folder in ("data", "infill"):
        for split, paths in list_shards(build / folder).items():
            for p in paths:
                st = p.stat()
                h.update(f"{folder}/{p.name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    for name in ("stats.json", "pipeline.yaml", "infill/config.json", "splits.json"):
        p = build / name
        if p.is_file():
            h.update(name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def gather(build_dir: str | Path, *, repo_id: str | None = None,
           pretty_name: str | None = None) -> Facts:
    build = Path(build_dir)
    if not list_shards(build / "data"):
        raise BadInput("no kept pairs here (data/train-*.parquet is missing)", path=str(build),
                       fix="run `curate build` first, or pass the build directory")
    stats = _read_json(build / "stats.json")
    pipeline_text = (build / "pipeline.yaml").read_text() if (build / "pipeline.yaml").is_file() else ""
    pipeline = yaml.safe_load(pipeline_text) or {} if pipeline_text else {}
    infill = _config(build, "infill", "infill")
    if infill is not None and infill.rows == 0:  # split-infill found no core: no config to load
        infill = None
    configs = [c for c in (_config(build, "default", "data"), infill) if c is not None]
    rejected = build / "rejected.parquet"
    rejected_total = stats.get("rejected")
    if rejected_total is None:
        rejected_total = pq.ParquetFile(rejected).metadata.num_rows if rejected.is_file() else 0
    infill_cfg = _read_json(build / "infill" / "config.json") or None
    rejected_reasons = _rejected_reasons(rejected) if rejected.is_file() else []
    stage_reasons = {s.get("name"): set(s.get("reasons") or {}) for s in stats.get("stages") or []}
    dropped_by = _dropped_by(rejected, stage_reasons) if rejected.is_file() else []
    rows = _columns(build, "data")
    name = pretty_name or (repo_id.split("/")[-1] if repo_id else None) or \
        _title(stats.get("pipeline") or pipeline.get("name"), rows)
    facts = Facts(build_dir=build, repo_id=repo_id, pretty_name=name, stats=stats,
                  pipeline=pipeline, pipeline_text=pipeline_text, configs=configs,
                  rows=rows,
                  infill_rows=_columns(build, "infill") if len(configs) > 1 else {},
                  infill_config=infill_cfg, rejected_total=int(rejected_total),
                  rejected_reasons=rejected_reasons, dropped_by=dropped_by,
                  decontamination={}, build_fingerprint=build_fingerprint(build, repo_id))
    facts.decontamination = decontamination(stats, pipeline, facts.steps())
    facts.splits_settings = _read_json(build / "splits.json") or None
    facts.machine = _read_json(build / MACHINE) or None
    facts.cpp_build = cpp_build(build)
    facts.records = gather_records(build)
    return facts


BACKEND_NAMES = {"cpp": "C++", "cuda": "CUDA", "triton": "Triton"}


def _title(pipeline: str | None, rows: dict) -> str:
    """A card title when no repo or name is given: what the pairs are, and the pipeline."""
    kinds = [BACKEND_NAMES.get(b, b) for b, _ in Counter(
        b for b in rows.get("backend") or [] if b).most_common()]
    what = f"{' / '.join(kinds)} kernel pairs" if kinds else "PyTorch programs"
    return f"{what} from the {pipeline} pipeline" if pipeline else what
