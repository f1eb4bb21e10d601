"""What the candidate's side of the harness costs beside the judge's, per timed call, with the
candidate's gates on and off.

    PYTHONPATH=. python benchmarks/harness_gap.py --device cuda --repeat 2 \
        --out benchmarks/results/harness_gap_h100-80gb-hbm3.json

The parent charges a candidate its batch wall time less the judge's fixed cost per call
(curate/verify/timing.py): whatever the candidate's worker spends beside the judge's on the
same harness code is credited to its kernel. This verifies honest rows (the fused GELU kernels
of tests/fixtures/verify; on the CPU a fused C++ kernel) with the gates
on and off and prints, per row, both sides' harness parts (before the call: inputs, flush,
sync; after: kept copy; digest), the credited factor and the speedup. Gates off leaves the
sandbox and the audit hook's installation as they are; it drops the checks the gates run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.verify_throughput import hardware, save_result  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "verify"
REF = (FIX / "ref_gelu_residual.py").read_text()


def rows(device: str) -> list[dict]:
    """Honest rows: on the GPU each fused kernel of the GELU-residual problem, on the CPU the
    fused C++ scale-add (Triton runs under the interpreter there, with no speed)."""
    if device == "cpu":
        return [{"id": "cpp_honest", "backend": "cpp", "source": "file",
                 "pytorch_code": (FIX / "ref_scale_add.py").read_text(),
                 "kernel_code": (FIX / "cpp_honest.py").read_text()}]
    return [{"id": n, "backend": b, "source": "file", "pytorch_code": REF,
             "kernel_code": (FIX / f"{n}.py").read_text()}
            for n, b in (("triton_gelu_residual", "triton"), ("cuda_fused_gelu", "cuda"))]


def summary(r) -> dict:
    check = (r.notes or {}).get("timing_check") or {}
    per = check.get("harness_ms_per_call") or {}
    cand, judge = per.get("candidate") or {}, per.get("judge") or {}
    return {"status": r.status, "reasons": r.reasons, "speedup": r.speedup,
            "ci_low": r.speedup_ci_low, "reported_ms": check.get("reported_ms"),
            "wall_ms": check.get("wall_ms"), "overhead_ms": check.get("overhead_ms"),
            "credited_factor": check.get("credited_factor"),
            "candidate": cand, "judge": judge,
            "gap_ms": {k: round(cand.get(k, 0.0) - judge.get(k, 0.0), 4)
                       for k in sorted(set(cand) | set(judge))}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeat", type=int, default=2, help="verify runs per gates setting")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/harness_gap.json")
    args = ap.parse_args()
    import tempfile

    from curate.verify import Verifier
    pairs, runs = rows(args.device), []
    cache = tempfile.mkdtemp(prefix="curate-harness-gap-")   # one build of each kernel
    for k in range(args.repeat):
        for gates in (True, False):
            t0 = time.monotonic()
            with Verifier(device=args.device, workers=2, timeout=args.timeout,
                          gates=gates, second_shape="off", cache_dir=cache) as v:
                got = {pairs[i]["id"]: summary(r) for i, r in v.verify(pairs)}
            runs.append({"run": k, "gates": gates, "seconds": round(time.monotonic() - t0, 1),
                         "rows": got})
            for rid, s in got.items():
                print(f"run {k} gates={'on ' if gates else 'off'} {rid:22s} {s['status']:10s} "
                      f"speedup {s['speedup'] or 0:6.3f} credited x{s['credited_factor'] or 1:5.3f}"
                      f" gap ms {json.dumps(s['gap_ms'])}", flush=True)
    table = {}
    for gates in (True, False):
        gaps = [sum(s["gap_ms"].values()) for r in runs if r["gates"] is gates
                for s in r["rows"].values() if s["gap_ms"]]
        table["gates_on" if gates else "gates_off"] = {
            "rows": len(gaps), "gap_ms_median": round(statistics.median(gaps), 4) if gaps else None}
    print(json.dumps(table))
    save_result(args.out, {"hardware": hardware(args.device), "device": args.device,
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "summary": table, "runs": runs})


if __name__ == "__main__":
    main()
