"""A row's verdict depends on that row alone: every hostile fixture interleaved with honest rows
in ONE verify run, then the honest rows again without them, and the hostile rows alone.

    PYTHONPATH=. python benchmarks/hostile_mix.py --device cuda --kernelbench KB --n 48 \
        --out benchmarks/results/hostile_mix_h200.json
    PYTHONPATH=. python benchmarks/hostile_mix.py --device cpu --out benchmarks/results/hostile_mix_cpu.json

Honest rows: the honest fixtures of tests/fixtures/hostile and, with --kernelbench, inductor
candidates of a seeded KernelBench sample (synthesized in this run). Hostile rows: every other
fixture there, and the crash, hang, exit, flood, out-of-memory and fault fixtures of
tests/fixtures/verify. Printed per row: solo status and speedup, mixed status and speedup, and for
hostile rows the reason that rejected them. Goals (issue 15): every honest row the same status
mixed as solo, speedups within 3% (median) and 10% (worst), every hostile row rejected, no stall,
mixed wall time at most 1.5x the solo runs together.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostile_table import CAUGHT, environment, fixture_rows  # noqa: E402

VERIFY_FIX = ROOT / "tests" / "fixtures" / "verify"
CRASH = {"hostile_crash": "crashed", "hostile_hang": "timeout", "hostile_exit": "crashed",
         "hostile_flood": "crashed", "hostile_oom": "runtime_error",
         "hostile_import_error": "compile_error", "hostile_raise": "runtime_error",
         "stale_cache": "deceptive", "nan_output": "incorrect", "triton_wrong": "incorrect"}
CUDA_CRASH = {"cuda_illegal_access": "runtime_error"}


def crash_rows(device: str) -> list[dict]:
    from curate.schema import new_record
    ref = (VERIFY_FIX / "ref_scale_add.py").read_text()
    names = dict(CRASH, **(CUDA_CRASH if device == "cuda" else {}))
    rows = []
    for name, expect in names.items():
        backend = "cuda" if name.startswith("cuda_") else "triton"
        row = new_record(id=f"verify/{name}", pytorch_code=ref,
                         kernel_code=(VERIFY_FIX / f"{name}.py").read_text(), backend=backend,
                         source="file", entry_point="Model")
        row["_case"] = {"case": name, "expect": [expect], "what": "crash fixture"}
        rows.append(row)
    return rows


def kernelbench_rows(kb: Path, n: int, device: str, seed: int) -> tuple[list[dict], dict]:
    from verify_throughput import problem_rows, sample_problems, synthesize
    files = sample_problems(kb, n, seed, ["1", "2"])
    pairs, info = synthesize(problem_rows(files, kb), device)
    if not pairs and info["sandbox"] != "none":
        # every row failed under the sandbox: say why, and make the pairs without it (the pairs
        # are this benchmark's input; what is measured is verify)
        print(f"synth under {info['sandbox']}: no candidates: {info['dropped']} "
              f"{info['errors']}", file=sys.stderr, flush=True)
        pairs, info2 = synthesize(problem_rows(files, kb), device, sandbox="off")
        info = dict(info2, first_try=info)
    for p in pairs:
        p["_case"] = {"case": p.get("path") or p["id"], "honest": True, "what": "inductor"}
    return pairs, info


def verify(rows: list[dict], device: str, workers: int | None, timeout: float,
           label: str, part: Path | None = None,
           cache_dir: Path | None = None) -> tuple[dict, float]:
    """Verify `rows` in one run; each row's result lands in `part` as it comes (a run cut at the
    device call's limit still says how far it got)."""
    from curate.verify import Verifier
    clean = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    out, t0 = {}, time.monotonic()
    with Verifier(device=device, workers=workers, timeout=timeout, cache_dir=cache_dir) as v:
        for i, res in v.verify(clean):
            out[rows[i]["id"]] = {"status": res.status, "reasons": list(res.reasons),
                                  "speedup": res.speedup, "ci": [res.speedup_ci_low,
                                                                 res.speedup_ci_high],
                                  "seconds": round(res.seconds, 2),
                                  "error": (res.error or "")[:200] or None}
            print(f"{label} +{time.monotonic() - t0:6.1f}s {len(out):3d}/{len(rows)} "
                  f"{rows[i]['id'][:48]:48s} {res.status:20s} {res.speedup or 0:8.3f} "
                  f"{','.join(res.reasons[:3])}", file=sys.stderr, flush=True)
            if part is not None:
                part.write_text(json.dumps({"rows": out, "wall_s": time.monotonic() - t0,
                                            "unfinished": len(out) < len(rows)}, default=str))
    return out, time.monotonic() - t0


def interleave(a: list, b: list) -> list:
    """`a` and `b` spread evenly through one list (hostile rows between honest ones)."""
    keyed = [(i / max(len(a), 1), 0, x) for i, x in enumerate(a)]
    keyed += [((j + 0.5) / max(len(b), 1), 1, x) for j, x in enumerate(b)]
    return [x for _, _, x in sorted(keyed, key=lambda t: (t[0], t[1]))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--kernelbench", type=Path, default=None)
    ap.add_argument("--n", type=int, default=48, help="KernelBench problems to synthesize")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--runs", default="mixed,honest,hostile",
                    help="which verify runs (one device call may not fit all three: the runs "
                         "left out are read from OUT.<run>.json of an earlier call)")
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="compile caches: a fresh folder under it for each run, so that every "
                         "run compiles cold (default: verify's own cache, shared by the runs)")
    ap.add_argument("--pairs-cache", type=Path, default=None,
                    help="synthesized KernelBench pairs: read if present, else written")
    args = ap.parse_args(argv)
    import torch
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    backends = ["triton", "cuda"] if device == "cuda" else ["cpp", "triton"]
    fixtures = fixture_rows(backends)
    honest = [r for r in fixtures if r["_case"].get("honest")]
    hostile = [r for r in fixtures if not r["_case"].get("honest")] + crash_rows(device)
    report: dict = {"environment": environment(device), "device": device}
    if args.kernelbench:
        if args.pairs_cache and args.pairs_cache.exists():
            kb = [json.loads(x) for x in args.pairs_cache.read_text().splitlines()]
            info = {"from": str(args.pairs_cache)}
        else:
            kb, info = kernelbench_rows(args.kernelbench, args.n, device, args.seed)
            if args.pairs_cache:
                args.pairs_cache.write_text("\n".join(json.dumps(r, default=str) for r in kb))
        honest += kb
        report["synth"] = info
    runs = set(args.runs.split(","))
    out = args.out or ROOT / "benchmarks" / "results" / f"hostile_mix_{device}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    plan = {"mixed": interleave(honest, hostile), "honest": honest, "hostile": hostile}
    done = {}
    for name, rows in plan.items():
        part = out.with_suffix(f".{name}.json")  # each run's rows as soon as it ends
        if name in runs:
            cache = None
            if args.cache_dir:
                import tempfile
                args.cache_dir.mkdir(parents=True, exist_ok=True)
                cache = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=args.cache_dir))
            res, wall = verify(rows, device, args.workers, args.timeout, name, part, cache)
            part.write_text(json.dumps({"rows": res, "wall_s": wall}, default=str))
        elif part.exists():  # a run of an earlier call (one device call may not fit all three)
            saved = json.loads(part.read_text())
            res, wall = saved["rows"], saved["wall_s"]
        else:
            res, wall = {}, 0.0
        done[name] = (res, wall)
    (mixed, wall_mixed), (solo, wall_solo), (alone, wall_alone) = \
        done["mixed"], done["honest"], done["hostile"]
    report["runs"] = {"mixed": mixed, "honest": solo, "hostile": alone}
    table, diffs = [], []
    for r in honest + hostile:
        case, m = r["_case"], mixed.get(r["id"], {})
        s = (solo if case.get("honest") else alone).get(r["id"], {})
        row = {"id": r["id"], "honest": bool(case.get("honest")), "solo": s.get("status"),
               "mixed": m.get("status"), "solo_speedup": s.get("speedup"),
               "mixed_speedup": m.get("speedup"), "mixed_reasons": m.get("reasons"),
               "mixed_error": m.get("error")}
        if case.get("honest"):
            # a row one of the runs never reached (a call cut at its limit) is not compared
            row["same_status"] = (s.get("status") == m.get("status")
                                  if s.get("status") and m.get("status") else None)
            if s.get("speedup") and m.get("speedup"):
                row["speedup_diff"] = abs(m["speedup"] / s["speedup"] - 1)
                diffs.append(row["speedup_diff"])
        else:
            # a crash fixture that a gate names first is rejected too
            expect = list(case.get("expect") or CAUGHT) + ["deceptive"]
            row["rejected"] = m.get("status") in expect if m.get("status") else None
            row["expect"] = expect
        table.append(row)
    h = [t for t in table if t["honest"]]
    x = [t for t in table if not t["honest"]]
    report.update({
        "rows": table,
        "summary": {
            "honest": len(h), "hostile": len(x),
            "honest_compared": sum(t["same_status"] is not None for t in h),
            "honest_same_status": sum(bool(t["same_status"]) for t in h),
            "hostile_reached": sum(t["rejected"] is not None for t in x),
            "speedup_diff_median": statistics.median(diffs) if diffs else None,
            "speedup_diff_max": max(diffs) if diffs else None,
            "hostile_rejected": sum(bool(t["rejected"]) for t in x),
            "wall_mixed_s": round(wall_mixed, 1), "wall_honest_alone_s": round(wall_solo, 1),
            "wall_hostile_alone_s": round(wall_alone, 1),
            "mixed_over_solo": round(wall_mixed / max(wall_solo + wall_alone, 1e-9), 3)}})
    print(f"{'row':48s} {'solo':16s} {'mixed':16s} {'solo x':>8s} {'mixed x':>8s}  reasons")
    for t in table:
        fmt = (lambda v: f"{v:8.2f}" if isinstance(v, float) else f"{'-':>8s}")
        print(f"{t['id'][:48]:48s} {str(t['solo']):16s} {str(t['mixed']):16s} "
              f"{fmt(t['solo_speedup'])} {fmt(t['mixed_speedup'])}  "
              f"{','.join((t['mixed_reasons'] or [])[:4])}")
    print(json.dumps(report["summary"], indent=1))
    out.write_text(json.dumps(report, indent=1, default=str))
    ok = (report["summary"]["honest_same_status"] == len(h)
          and report["summary"]["hostile_rejected"] == len(x))  # every row reached, and right
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
