"""Are infill rows solvable? A sample re-verified with its own core and with the core empty.

For a candidate table (a build's data/ shards, or any table), split it at each granularity, draw
a random sample of infill rows and run them through curate.verify's harness twice: reassembled
(must verify) and with the core left empty (must fail to compile or fail correctness). Prints a
table and writes JSON (hardware, versions) to benchmarks/results/infill_solvability.json.

    python benchmarks/infill_solvability.py build --sample 3 --device cpu
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from importlib import metadata
from pathlib import Path

from curate.infill.run import build_input, check_sample, split_table

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", help="build directory or candidate table")
    ap.add_argument("--sample", type=int, default=3)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--granularity", nargs="+", default=["body", "kernel"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "infill_solvability.json"))
    args = ap.parse_args()
    src = Path(args.source)
    table = build_input(src) if src.is_dir() else src
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for g in args.granularity:
            out = Path(tmp) / f"infill-{g}.parquet"
            split_table(table, out, granularity=g, progress=False)
            t0 = time.time()
            res = check_sample(out, args.sample, device=args.device, seed=args.seed)
            res.update(granularity=g, seconds=round(time.time() - t0, 1), source=str(src))
            runs.append(res)
            print(f"{g:<7} solvable {res['solvable']}/{res['checked']}  own core: {res['full']}  "
                  f"empty core: {res['empty']}  ({res['seconds']}s)")
    report = {
        "benchmark": "infill_solvability",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hardware": {"machine": platform.machine(), "cpus": os.cpu_count()},
        "versions": {"python": platform.python_version(),
                     **{p: metadata.version(p) for p in ("curate", "torch", "triton", "tree-sitter")}},
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"-> {args.out}")


if __name__ == "__main__":
    main()
