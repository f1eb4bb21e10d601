"""Does `curate replay` agree with the build on honest rows? Builds the bundled examples (or
takes a build directory), then replays every verified row `--repeats` times from its record and
counts agreement: by replay's rule (the two intervals meet, the recorded one widened by the
device's noise) and, beside it, by the stricter point rule (the replayed median inside the
widened recorded interval).

    PYTHONPATH=. python benchmarks/replay_agreement.py --device cpu --out benchmarks/results/replay_agreement_cpu.json
    PYTHONPATH=. python benchmarks/replay_agreement.py --device cuda --build BUILD --repeats 2 --out F
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostile_table import environment  # noqa: E402


def build(out: Path, device: str) -> float:
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "curate", "build", "--device", device, "--threshold",
                    "0", "--out", str(out)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def verified_rows(build_dir: Path) -> list[dict]:
    import pyarrow.parquet as pq
    stages = sorted((build_dir / "stages").glob("*-verify.parquet"))
    if not stages:
        raise SystemExit(f"{build_dir}: no verify stage table (stages/*-verify.parquet)")
    return [r for r in pq.read_table(stages[-1]).to_pylist() if r["status"] == "verified"]


def point_rule(then: dict, now: dict, device: str) -> bool | None:
    """Replay's rule with the replayed median alone (no interval of its own): the stricter
    rule replay used before the intervals had to meet."""
    if then.get("speedup") is None or now.get("speedup") is None:
        return None
    from curate.verify.replay import speed_agrees
    return speed_agrees(then, {"speedup": now["speedup"], "device": now["device"]}, device)[0]


def harness_medians(out: list) -> dict:
    """Per side and part (before, after, digest), the median over rows of what the side said
    its harness spent per timed call: where the judge's fixed cost goes, and whether the
    candidate's differs."""
    got: dict = {}
    for o in out:
        for side, parts in (o.get("then_harness_ms") or {}).items():
            for part, v in parts.items():
                got.setdefault(side, {}).setdefault(part, []).append(v)
    return {side: {part: round(statistics.median(v), 4) for part, v in parts.items()}
            for side, parts in got.items()}


def clock_check(row: dict) -> dict:
    """What the parent's clock saw of the row (credited factor, the judge's cost per call)."""
    from curate.verify.record import read
    return ((read(row.get("verification")) or {}).get("timing") or {}).get("check") or {}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--build", type=Path, help="an existing build directory (default: build "
                    "the bundled examples with --threshold 0 first)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    from curate.verify.replay import NOISE, replay
    noise = NOISE.get(args.device, NOISE["cuda"])
    report = {"environment": environment(args.device), "noise": noise, "repeats": []}
    with tempfile.TemporaryDirectory(prefix="curate-replay-") as tmp:
        build_dir = args.build
        if build_dir is None:
            build_dir = Path(tmp) / "build"
            report["build_s"] = round(build(build_dir, args.device), 1)
            print(f"built the examples in {report['build_s']} s", flush=True)
        rows = verified_rows(build_dir)
        print(f"{'row':10s} {'then':>22s} {'now':>22s} {'credit':>6s} agree point", flush=True)
        for rep in range(args.repeats):
            t0 = time.monotonic()
            got = replay(rows, device=args.device)
            out = []
            for row, r in zip(rows, got):
                check = clock_check(row)
                item = {"id": r.id, "path": row.get("path"),
                        "then": {k: v for k, v in r.then.items() if k != "device"},
                        "now": {k: v for k, v in r.now.items() if k != "device"},
                        "then_credited_factor": check.get("credited_factor"),
                        "then_overhead_ms": check.get("overhead_ms"),
                        # what each side said its harness spent per call (evidence only)
                        "then_harness_ms": check.get("harness_ms_per_call"),
                        "agree": r.agree, "why": r.why,
                        "point_rule": point_rule(r.then, r.now, args.device)}
                out.append(item)
                f = (lambda d: f"{d.get('speedup') or 0:6.3f} [{d.get('speedup_ci_low') or 0:.3f},"
                     f" {d.get('speedup_ci_high') or 0:.3f}]")
                print(f"{r.id[:10]:10s} {f(r.then):>22s} {f(r.now):>22s} "
                      f"{item['then_credited_factor'] or 0:6.3f} {str(r.agree):5s} "
                      f"{item['point_rule']}", flush=True)
            factors = [o["then_credited_factor"] or 1.0 for o in out]
            costs = [o["then_overhead_ms"] for o in out if o["then_overhead_ms"]]
            summary = {"rows": len(out), "agree": sum(o["agree"] for o in out),
                       "credited_then": sum(f > 1.0 for f in factors),
                       "judge_cost_ms_median": statistics.median(costs) if costs else None,
                       "agree_point_rule": sum(bool(o["point_rule"]) for o in out),
                       "status_differs": sum(o["then"]["status"] != o["now"]["status"]
                                             for o in out),
                       "harness_ms_median": harness_medians(out),
                       "seconds": round(time.monotonic() - t0, 1)}
            print(json.dumps(summary), flush=True)
            report["repeats"].append({"summary": summary, "rows": out})
    report["summary"] = [r["summary"] for r in report["repeats"]]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
