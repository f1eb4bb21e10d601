"""The second shape: its extra cost (share of verify's time) and its false positives on honest
pairs.

    PYTHONPATH=. python benchmarks/second_shape.py --device cuda --kernelbench KB --n 20 \
        --out benchmarks/results/second_shape_h200.json
    PYTHONPATH=. python benchmarks/second_shape.py --device cpu --n 10      # examples/ on the CPU

Three sets of pairs, each verified once with `second_shape="all"`:

- identity: each problem's own program as its candidate (`ModelNew = Model`, gates off, since
  it has no kernel): honest and general by construction, so every `shape_specialized` is a false
  positive of the second shape's machinery (the size rewrite, the rebuild, tolerances at larger
  sizes, nondeterminism);
- fixtures: the honest hand-written kernels of tests/fixtures/verify (gates on);
- inductor: torch.compile candidates of the same problems (`--pairs TABLE` to reuse a table),
  compiled for static shapes: specialized by construction, which is why `second_shape="auto"`
  (the default) checks them at their own shape only. Their rows measure the cost.

The cost, three ways: the seconds of the rows' second-shape phases over the seconds of all their
phases (`cost_share`, waits for memory or workers included); the same without the waits
(`work_share`); and, for the sets `--ab` names, the set's wall time verified with
`second_shape="all"` over the same set verified again with it off (`wall_cost`: what a build
pays). Each row keeps its phases. It prints a table and writes JSON with the hardware, the
versions and every row's figures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from verify_throughput import hardware, problem_rows, sample_problems, synthesize  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "verify"
# honest hand-written pairs: (kernel fixture, reference fixture, backend, devices)
FIXTURES = [("cpp_honest", "ref_scale_add", "cpp", ("cpu",)),
            ("triton_honest", "ref_scale_add", "triton", ("cpu", "cuda")),
            ("triton_gelu_residual", "ref_gelu_residual", "triton", ("cuda",)),
            ("triton_libdevice_tanh", "ref_tanh_scale", "triton", ("cpu", "cuda")),
            ("cuda_fused_gelu", "ref_gelu_residual", "cuda", ("cuda",))]


def identity_pairs(rows: list[dict], device: str) -> list[dict]:
    backend = "triton" if device == "cuda" else "cpp"
    return [{**r, "id": f"identity-{r['id'][:12]}", "backend": backend,
             "kernel_code": r["pytorch_code"] + "\n\nModelNew = Model\n"} for r in rows]


def fixture_pairs(device: str) -> list[dict]:
    out = []
    for kernel, ref, backend, devices in FIXTURES:
        path = FIX / f"{kernel}.py"
        if device not in devices or not path.exists():
            continue
        out.append({"id": f"fixture-{kernel}", "pytorch_code": (FIX / f"{ref}.py").read_text(),
                    "kernel_code": path.read_text(), "backend": backend, "source": "file"})
    return out


def verify(pairs: list[dict], device: str, gates: bool, timeout: float, sandbox: str,
           mode: str = "all") -> dict:
    from curate.verify import Verifier
    t0 = time.monotonic()
    rows = {}
    with Verifier(device=device, gates=gates, timeout=timeout, sandbox=sandbox,
                  second_shape=mode) as v:
        for i, res in v.verify(pairs):
            phases = res.notes.get("phases_s") or {}
            second = sum(s for k, s in phases.items() if k.startswith("second shape"))
            shape = json.loads(res.verification or "{}").get("second_shape") or {}
            rows[pairs[i]["id"]] = {
                "status": res.status, "reasons": res.reasons, "error": (res.error or "")[:300],
                "seconds": round(sum(phases.values()), 3), "second_s": round(second, 3),
                "second_work_s": round(sum(s for k, s in phases.items()
                                           if k.startswith("second shape") and not _wait(k)), 3),
                "work_s": round(sum(s for k, s in phases.items() if not _wait(k)), 3),
                "phases": {k: round(s, 3) for k, s in phases.items()},
                "checked": shape.get("checked"), "why": shape.get("why"),
                "sizes": shape.get("sizes"), "speedup": res.speedup}
    return {"wall_s": round(time.monotonic() - t0, 1), "rows": rows}


def _wait(phase: str) -> bool:
    return "waiting" in phase


def summary(run: dict, off: dict | None = None) -> dict:
    rows = run["rows"].values()
    total = sum(r["seconds"] for r in rows) or 1.0
    work = sum(r["work_s"] for r in rows) or 1.0
    ab = {}
    if off:
        ab = {"wall_off_s": off["wall_s"],
              "wall_cost": round((run["wall_s"] - off["wall_s"]) / max(off["wall_s"], 1e-9), 4),
              "statuses_off": dict(Counter(r["status"] for r in off["rows"].values()))}
    first_verified = [r for r in rows if r["status"] in ("verified", "shape_specialized")]
    return {"rows": len(run["rows"]), "statuses": dict(Counter(r["status"] for r in rows)),
            "checked": sum(1 for r in rows if r["checked"]),
            "not_checked": dict(Counter(r["why"] for r in first_verified if not r["checked"])),
            "specialized": sum(1 for r in rows if r["status"] == "shape_specialized"),
            "second_s": round(sum(r["second_s"] for r in rows), 2),
            "total_s": round(total, 2),
            "cost_share": round(sum(r["second_s"] for r in rows) / total, 4),
            "work_share": round(sum(r["second_work_s"] for r in rows) / work, 4),
            "wall_s": run["wall_s"], **ab}


def print_table(report: dict) -> None:
    print(f"{'set':10} {'rows':>5} {'verified':>8} {'checked':>7} {'special.':>8} "
          f"{'2nd s':>7} {'all s':>8} {'cost':>6} {'work':>6} {'wall':>6}  not checked")
    for name, s in report["sets"].items():
        ver = s["statuses"].get("verified", 0)
        print(f"{name:10} {s['rows']:5d} {ver:8d} {s['checked']:7d} {s['specialized']:8d} "
              f"{s['second_s']:7.1f} {s['total_s']:8.1f} {s['cost_share']:6.1%} "
              f"{s['work_share']:6.1%} {_pct(s.get('wall_cost')):>6}  "
              f"{s['not_checked'] or '-'}")
    print(f"false positives on honest pairs (identity + fixtures): "
          f"{report['false_positives']} of {report['honest_checked']} checked")


def _pct(x) -> str:
    return "-" if x is None else f"{x:.1%}"


def run_set(name: str, pairs: list[dict], args, gates: bool) -> tuple[dict, dict]:
    """The set verified with the second shape (and, where --ab names it, then without it: the
    wall time it adds); returns the run with its `off` twin inside, and its summary."""
    run = verify(pairs, args.device, gates, args.timeout, args.sandbox, "all")
    # off second: whatever the first run warmed (compile caches, page cache) favours the run
    # without the second shape, so `wall_cost` errs high
    off = verify(pairs, args.device, gates, args.timeout, args.sandbox, "off") \
        if name in args.ab.split(",") else None
    if off:
        run["off"] = off
    return run, summary(run, off)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--kernelbench", type=Path, default=os.environ.get("CURATE_KERNELBENCH"))
    ap.add_argument("--n", type=int, default=20, help="problems (and at most this many "
                    "inductor pairs from --pairs)")
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--pairs", type=Path, help="inductor pairs to reuse (skips synthesis)")
    ap.add_argument("--sets", default="identity,fixtures,inductor")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--sandbox", default="auto")
    ap.add_argument("--ab", default="", help="sets to verify again with the second shape off, "
                    "for the wall time it adds (e.g. identity: sets that compile kernels pay "
                    "their compiles in the first run only)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    root = args.kernelbench if args.kernelbench and Path(args.kernelbench).is_dir() \
        else REPO / "examples"
    files = sample_problems(Path(root), args.n, args.seed, args.levels.split(","))
    problems = problem_rows(files, Path(root))
    sets = args.sets.split(",")
    report = {"device": args.device, "problems": str(root), "n": len(problems),
              "hardware": hardware(args.device), "sets": {}, "runs": {}}
    if "identity" in sets:
        pairs = identity_pairs(problems, args.device)
        run, report["sets"]["identity"] = run_set("identity", pairs, args, False)
        report["runs"]["identity"] = run
        _write(args.out, report)   # a run cut at its limit keeps the sets it finished
    if "fixtures" in sets:
        pairs = fixture_pairs(args.device)
        run, report["sets"]["fixtures"] = run_set("fixtures", pairs, args, True)
        report["runs"]["fixtures"] = run
        _write(args.out, report)
    if "inductor" in sets:
        if args.pairs and args.pairs.exists():
            from curate.tableio import read_rows
            pairs = sorted(read_rows(args.pairs), key=lambda r: str(r.get("id")))[:args.n]
        else:
            pairs, report["synthesis"] = synthesize(problems, args.device, args.sandbox)
        run, report["sets"]["inductor"] = run_set("inductor", pairs, args, True)
        report["runs"]["inductor"] = run
    honest = [s for k, s in report["sets"].items() if k in ("identity", "fixtures")]
    report["false_positives"] = sum(s["specialized"] for s in honest)
    report["honest_checked"] = sum(s["checked"] for s in honest)
    print_table(report)
    _write(args.out, report, partial=False)
    if args.out:
        print(f"wrote {args.out}")
    return 0


def _write(out: Path | None, report: dict, partial: bool = True) -> None:
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({**report, "partial": partial}, indent=1, default=str))


if __name__ == "__main__":
    sys.exit(main())
