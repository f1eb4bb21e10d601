"""How many candidates split-infill can cut, why the rest cannot, and how fast.

Inputs are build directories (their data/*.parquet), tables, or folders of candidate programs
(.py files that define ModelNew, and any tables under them). For every input and every
(granularity, multi) setting it prints pairs in, pairs split, infill rows, reject reasons and
the throughput, and writes the whole run as JSON (with hardware and versions) to
benchmarks/results/infill_coverage.json.

    python benchmarks/infill_coverage.py                       # tests/fixtures and build/ (if any)
    python benchmarks/infill_coverage.py build other.parquet --repeat 50
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from collections import Counter
from importlib import metadata
from pathlib import Path

from curate.infill import SplitConfig, check_row, split_row
from curate.tableio import read_rows

ROOT = Path(__file__).resolve().parent.parent


def programs(path: Path) -> list[dict]:
    """Candidate rows from a build directory, a table, or a folder of programs and tables."""
    if path.is_dir() and (path / "data").is_dir():
        return [r for p in sorted((path / "data").glob("*.parquet")) for r in read_rows(p)]
    if path.is_file():
        return read_rows(path)
    rows = []
    for p in sorted(path.rglob("*")):
        if p.suffix == ".py" and "ModelNew" in p.read_text(encoding="utf-8", errors="replace"):
            rows.append({"id": str(p.relative_to(path)), "kernel_code": p.read_text(encoding="utf-8")})
        elif p.suffix in (".parquet", ".jsonl") and p.is_file():
            try:
                rows += [r for r in read_rows(p) if r.get("kernel_code")]
            except Exception:
                pass
    return rows


def measure(rows: list[dict], cfg: SplitConfig, repeat: int) -> dict:
    reasons, kinds = Counter(), Counter()
    split = out = broken = 0
    t0 = time.perf_counter()
    for _ in range(repeat):
        for row in rows:
            kept, why = split_row(row, cfg)
            if _ == 0:
                split += bool(kept)
                out += len(kept)
                broken += sum(not check_row(r) for r in kept)
                reasons.update(why if not kept else [])
                kinds.update(r["core_kind"] for r in kept)
    seconds = time.perf_counter() - t0
    return {"granularity": cfg.granularity, "multi": cfg.multi, "pairs": len(rows),
            "pairs_split": split, "infill_rows": out, "invariant_broken": broken,
            "reasons": dict(reasons.most_common()), "core_kinds": dict(sorted(kinds.items())),
            "seconds": round(seconds, 4),
            "pairs_per_s": round(len(rows) * repeat / seconds, 1) if seconds else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="*")
    ap.add_argument("--repeat", type=int, default=20, help="passes over the rows, for timing")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "infill_coverage.json"))
    args = ap.parse_args()
    inputs = [Path(p) for p in args.inputs] or [ROOT / "tests" / "fixtures"] + \
        ([ROOT / "build"] if (ROOT / "build" / "data").is_dir() else [])
    results = []
    print(f"{'input':<34} {'setting':<18} {'pairs':>6} {'split':>6} {'rows':>6} {'pairs/s':>9}  reasons")
    for path in inputs:
        rows = programs(path)
        for g in ("kernel", "body"):
            for m in ("per-kernel", "span"):
                r = measure(rows, SplitConfig(g, m), args.repeat)
                r["input"] = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
                results.append(r)
                print(f"{r['input'][-34:]:<34} {g + '/' + m:<18} {r['pairs']:>6} "
                      f"{r['pairs_split']:>6} {r['infill_rows']:>6} {r['pairs_per_s']:>9}  "
                      f"{r['reasons']}")
    report = {
        "benchmark": "infill_coverage",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hardware": {"machine": platform.machine(), "processor": platform.processor(),
                     "cpus": os.cpu_count()},
        "versions": {"python": platform.python_version(),
                     **{pkg: metadata.version(pkg) for pkg in
                        ("curate", "tree-sitter", "tree-sitter-python", "tree-sitter-cuda")}},
        "repeat": args.repeat,
        "results": results,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
