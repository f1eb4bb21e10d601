"""What the sandbox costs and whether it holds on this machine: the honest fixtures verified with
`sandbox="auto"` (bubblewrap + a uid per worker, Landlock where it works) and with it off, in
one command, each run on its own copies of the rows.

    PYTHONPATH=. python benchmarks/sandbox_cost.py --device cuda --copies 4 \
        --out benchmarks/results/sandbox_cost_h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostile_table import environment, fixture_rows  # noqa: E402


def run(rows: list[dict], device: str, mode: str) -> dict:
    from curate.verify import Verifier
    t0 = time.monotonic()
    with Verifier(device=device, sandbox=mode) as v:
        started = time.monotonic() - t0
        res = {rows[i]["id"]: r for i, r in v.verify(rows)}
        kind, probe = v.sandbox, v.sandbox_probe
    wall = time.monotonic() - t0
    return {"sandbox": kind, "probe": probe, "wall_s": round(wall, 2),
            "startup_s": round(started, 2),
            "rows_per_hour": round(len(rows) / wall * 3600, 1),
            "statuses": {k: r.status for k, r in res.items()},
            "speedups": {k: r.speedup for k, r in res.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    backends = ["triton"] if args.device == "cuda" else ["cpp", "triton"]
    base = [r for r in fixture_rows(backends) if r["_case"].get("honest")]
    report = {"environment": environment(args.device), "runs": {}}
    for mode in ("auto", "off"):
        rows = []
        for c in range(args.copies):
            for r in base:
                row = {k: v for k, v in r.items() if not k.startswith("_")}
                row["id"] = f"{r['id']}#{c}-{mode}"
                row["kernel_code"] = r["kernel_code"] + f"\n# copy {c} {mode}\n"
                rows.append(row)
        report["runs"][mode] = run(rows, args.device, mode)
        r = report["runs"][mode]
        print(f"{mode:5s} {r['sandbox']:22s} {len(rows):3d} rows {r['wall_s']:7.1f}s "
              f"{r['rows_per_hour']:8.1f} rows/h  statuses "
              f"{sorted(set(r['statuses'].values()))}  probe={r['probe']}", flush=True)
    on, off = report["runs"]["auto"], report["runs"]["off"]
    report["slowdown"] = round(on["wall_s"] / off["wall_s"] - 1, 3)
    print(f"sandbox on vs off: {report['slowdown']:+.1%} wall time")
    out = args.out or ROOT / "benchmarks" / "results" / f"sandbox_cost_{args.device}.json"
    out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
