"""Merge the false-positive runs of `hostile_table.py --candidates TABLE` (runs cut by the time
limit, continued with --skip or --paths) into one verdict per candidate: the latest run that
reached a row gives its status. Prints the totals and writes JSON.

    python benchmarks/gates_coverage.py --candidates kb-candidates.parquet \
        benchmarks/results/gates_fp_kernelbench_h200.json@limit=130 \
        benchmarks/results/gates_h200.json \
        benchmarks/results/gates_fp_kernelbench_rows131-204_h200.json@skip=130 \
        benchmarks/results/gates_h200_20261201_fixtures_and_17_rows.json@paths=benchmarks/results/gates_h200_rerun_paths.txt \
        --out benchmarks/results/gates_fp_h200_merged.json

A RUN is FILE[@skip=N][@limit=N][@paths=FILE]: the same selection of TABLE's rows that the run
was given (oldest run first). A row counts as a false positive when its latest status is
`deceptive` while its outputs matched the reference (no comparison reason).
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from benchmarks.hostile_table import read_paths, reproduced_reference  # noqa: E402


def selection(paths: list[str], spec: dict) -> list[str]:
    rows = list(paths)
    if spec.get("paths"):
        keep = read_paths("@" + spec["paths"])
        rows = [p for p in rows if p in keep]
    rows = rows[int(spec.get("skip", 0)):]
    return rows[: int(spec["limit"])] if spec.get("limit") else rows


def parse_run(arg: str) -> tuple[Path, dict]:
    file, *opts = arg.split("@")
    return Path(file), dict(o.split("=", 1) for o in opts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--candidates", required=True, help="the table the runs read")
    ap.add_argument("runs", nargs="+", help="FILE[@skip=N][@limit=N][@paths=FILE], oldest first")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    from curate.tableio import read_rows
    table = [r["path"] for r in read_rows(args.candidates) if r.get("kernel_code")]
    latest: dict[str, dict] = {}
    runs = []
    for arg in args.runs:
        file, spec = parse_run(arg)
        report = json.loads(file.read_text())
        c = report["candidates"]
        chosen = selection(table, spec)
        if len(chosen) != c["rows"]:
            raise SystemExit(f"{file}: the selection {spec} gives {len(chosen)} rows, the run "
                             f"had {c['rows']}: give the run's own --skip/--limit/--paths")
        not_reached = set(c.get("not_reached") or [])
        other = {x["path"]: x for x in c.get("not_verified") or []}
        for p in chosen:
            if p in not_reached:
                continue
            x = other.get(p)
            latest[p] = {"status": x["status"] if x else "verified",
                         "reasons": x["reasons"] if x else [],
                         "run": file.name,
                         "started": report.get("started")}
        runs.append({"file": file.name, "started": report.get("started"), "selection": spec,
                     "rows": len(chosen), "reached": len(chosen) - len(not_reached)})
    statuses = collections.Counter(v["status"] for v in latest.values())
    reproduced = [p for p, v in latest.items() if reproduced_reference(v["status"], v["reasons"])]
    fps = [p for p in reproduced if latest[p]["status"] == "deceptive"]
    out = {
        "table_rows": len(table), "covered": len(latest), "runs": runs,
        "statuses": dict(statuses.most_common()),
        "reproduced_reference": len(reproduced), "false_positives": fps,
        "false_positive_rate": len(fps) / len(reproduced) if reproduced else None,
        "never_reached": [p for p in table if p not in latest],
        "not_verified": {p: v for p, v in sorted(latest.items()) if v["status"] != "verified"},
        "latest_run_per_row": collections.Counter(v["run"] for v in latest.values()),
    }
    for r in runs:
        print(f"{r['file']:<58} {r['started']}  rows {r['rows']:>3}  reached {r['reached']:>3}")
    print(f"\ncovered {out['covered']} of {out['table_rows']} candidates; latest statuses "
          f"{out['statuses']}")
    print(f"reproduced the reference: {len(reproduced)}, failed by a gate: {len(fps)} -> "
          f"false-positive rate {out['false_positive_rate']:.1%}" if reproduced else "")
    print(f"never reached: {out['never_reached']}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=1, default=str))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
