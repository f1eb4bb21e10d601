"""Two consecutive `curate build` runs on the bundled examples (CPU device by default), each in a
fresh build directory: how many keep decisions differ, and whether every differing row lies
within 5% of the threshold (issue: CPU verdicts that move with machine load).

    PYTHONPATH=. python benchmarks/build_repeat.py --out benchmarks/results/build_repeat_cpu.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostile_table import environment  # noqa: E402


def build(out: Path, device: str, threshold: float) -> tuple[dict, float]:
    """One build; the verified rows' speedup intervals by reference program."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "curate", "build", "--device", device, "--threshold",
                    str(threshold), "--out", str(out)], check=True, cwd=ROOT,
                   stdout=subprocess.DEVNULL)
    import pyarrow.parquet as pq
    stages = sorted((out / "stages").glob("*-verify.parquet"))
    rows = pq.read_table(stages[-1]).to_pylist()
    got = {}
    for r in rows:
        key = r.get("path") or r.get("entry_point") or r["id"]
        got[key] = {"status": r["status"], "reasons": list(r.get("reasons") or []),
                    "speedup": r.get("speedup"),
                    "low": r.get("speedup_ci_low"), "high": r.get("speedup_ci_high"),
                    "kept": r["status"] == "verified" and (r.get("speedup_ci_low") or 0) >= threshold}
    return got, time.monotonic() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threshold", type=float, default=2.0)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    runs, walls = [], []
    with tempfile.TemporaryDirectory(prefix="curate-repeat-") as tmp:
        for i in range(2):
            got, wall = build(Path(tmp) / f"build{i}", args.device, args.threshold)
            runs.append(got)
            walls.append(round(wall, 1))
            print(f"build {i + 1}: {sum(r['kept'] for r in got.values())} kept of {len(got)} "
                  f"in {wall:.0f}s", flush=True)
    a, b = runs
    differ = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, {}), b.get(key, {})
        if x.get("kept") != y.get("kept"):
            lows = [v for v in (x.get("low"), y.get("low")) if v]
            near = bool(lows) and all(abs(v / args.threshold - 1) <= 0.05 for v in lows)
            differ.append({"row": key, "first": x, "second": y, "within_5pct": near})
    print(f"{'row':44s} {'1st low':>8s} {'2nd low':>8s}  near threshold")
    for d in differ:
        f = (lambda v: f"{v:8.2f}" if v else f"{'-':>8s}")
        print(f"{d['row'][:44]:44s} {f(d['first'].get('low'))} {f(d['second'].get('low'))}  "
              f"{d['within_5pct']}")
    report = {"environment": environment(args.device), "threshold": args.threshold,
              "wall_s": walls, "kept": [sum(r["kept"] for r in x.values()) for x in runs],
              "rows": len(a), "decisions_differ": len(differ),
              "differ_outside_5pct": sum(not d["within_5pct"] for d in differ),
              "differences": differ, "runs": runs}
    print(json.dumps({k: report[k] for k in ("kept", "wall_s", "decisions_differ",
                                             "differ_outside_5pct")}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
