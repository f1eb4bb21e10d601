"""Every hostile fixture through `verify`: case -> status and reasons, the false-positive rate
of the gates on honest candidates, and (--mix) whether a row's verdict depends on that row alone.

    PYTHONPATH=. python benchmarks/hostile_table.py --device cpu --out benchmarks/results/hostile_cpu.json
    PYTHONPATH=. python benchmarks/hostile_table.py --device cuda --out benchmarks/results/hostile_gpu.json
    PYTHONPATH=. python benchmarks/hostile_table.py --device cpu --candidates synth.parquet \
        --skip-fixtures --out benchmarks/results/gates_fp_cpu.json

Fixtures live in tests/fixtures/hostile/ (cases.json names the case each one plays). A hostile
case is caught when it ends `deceptive`, `incorrect` or `degenerate_reference` (its own `expect`
list where cases.json gives one); an honest one must end `verified`. With `--candidates TABLE`
every row of TABLE is taken as honest: the false-positive rate is the share of rows whose outputs
matched the reference that a gate still failed (status `deceptive`). On the CPU device, CUDA
fixtures are still read by the static gates in the parent (what needs a GPU to run is reported
`unsupported`, never counted as caught).

    PYTHONPATH=. python benchmarks/hostile_table.py --mix --device cuda --kernelbench KB --n 48 \
        --out benchmarks/results/hostile_mix_h200.json

--mix: every hostile fixture interleaved with honest rows in ONE verify run, then the honest rows
again without them, and the hostile rows alone. Honest rows: the honest fixtures and, with
--kernelbench, inductor candidates of a seeded KernelBench sample (synthesized in this run).
Hostile rows: every other fixture, and the crash, hang, exit, flood, out-of-memory and fault
fixtures of tests/fixtures/verify. Printed per row: solo and mixed status and speedup, and for
hostile rows the reason that rejected them. Goals (issue 15): every honest row the same status
mixed as solo, speedups within 3% (median) and 10% (worst), every hostile row rejected, no
stall, mixed wall time at most 1.5x the solo runs together.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "hostile"
CAUGHT = ("deceptive", "incorrect", "degenerate_reference")
# reasons from the output comparison: a row with one of these did not reproduce the reference
COMPARISON = ("output_mismatch", "nan_inf", "shape_mismatch", "dtype_mismatch",
              "output_count_mismatch", "output_structure_mismatch", "output_type_mismatch")


def fixture_rows(backends: list[str], only: set[str] | None = None) -> list[dict]:
    from curate.schema import new_record
    spec = json.loads((FIXTURES / "cases.json").read_text())
    refs = {k: (FIXTURES / v).read_text() for k, v in spec["references"].items()}
    rows = []
    for case in spec["cases"]:
        if only and case["case"] not in only:
            continue
        for backend in backends:
            if backend not in case.get("backends", ["triton", "cuda"]):
                continue
            path = FIXTURES / backend / f"{case['case']}.py"
            if not path.is_file():
                continue
            row = new_record(id=f"{backend}/{case['case']}", pytorch_code=refs[case["ref"]],
                             kernel_code=path.read_text(), backend=backend, source="file",
                             entry_point="Model", path=str(path.relative_to(ROOT)))
            row["_case"] = case
            rows.append(row)
    return rows


def run_verify(rows: list[dict], device: str, workers: int | None, timeout: float,
               on_result=None, static_gates: bool = True,
               keep_bytes: int | None = None) -> list[dict | None]:
    """One verify pass over all rows (fixtures and candidates together, so that the fixtures'
    CUDA builds overlap the candidates' checks); `on_result(out)` after every row, so that a run
    cut short keeps what it finished (rows not reached stay None)."""
    from curate.verify import Verifier
    clean = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    out: list[dict | None] = [None] * len(rows)
    opts = {} if keep_bytes is None else {"keep_bytes": keep_bytes}
    with Verifier(device=device, workers=workers, timeout=timeout,
                  static_gates=static_gates, **opts) as v:
        for i, res in v.verify(clean):
            out[i] = {"status": res.status, "reasons": list(res.reasons), "error": res.error,
                      "correct": res.correct, "max_abs_err": res.max_abs_err,
                      "speedup": res.speedup, "speedup_ci_low": res.speedup_ci_low,
                      "seconds": round(res.seconds, 2), "sandbox": res.sandbox,
                      "notes": {k: v for k, v in (res.notes or {}).items()
                                if k in ("custom_launches", "patched", "parameters")}}
            if on_result is not None:
                on_result(out)
    return out


def fixture_table(rows, results) -> tuple[list[dict], dict]:
    table = []
    summary = collections.Counter()
    for row, res in zip(rows, results):
        case = row["_case"]
        honest = bool(case.get("honest"))
        if res is None:  # not reached before the run was cut
            summary[("honest" if honest else "hostile", "not reached")] += 1
            continue
        expect = case.get("expect", ["verified"] if honest else list(CAUGHT))
        ok = res["status"] in expect
        if res["status"] == "unsupported":
            verdict = "not run (needs GPU)"
        else:
            verdict = "ok" if ok else ("FALSE POSITIVE" if honest else "MISSED")
        summary[("honest" if honest else "hostile", verdict)] += 1
        table.append({"case": case["case"], "backend": row["backend"], "what": case["what"],
                      "honest": honest, "status": res["status"], "reasons": res["reasons"],
                      "verdict": verdict, "error": (res.get("error") or "")[:300],
                      # what the row would have been credited with had no gate stopped it
                      "credited_speedup": res.get("speedup"),
                      "credited_ci_low": res.get("speedup_ci_low"),
                      "seconds": res["seconds"]})
    counts = {f"{k[0]}:{k[1]}": v for k, v in sorted(summary.items())}
    return table, counts


def inductor_fixture_rows() -> list[dict]:
    """Standalone Triton candidates rewritten (curate.synth) from the inductor outputs captured
    on the GPU machine and committed under tests/fixtures/inductor: honest by construction."""
    from curate.schema import new_record
    from curate.synth.rewrite_triton import build_triton_program
    here = ROOT / "tests" / "fixtures" / "inductor"
    caps = json.loads((here / "captures.json").read_text())
    rows = []
    for name, cap in sorted(caps.items()):
        if not cap.get("ok"):
            continue
        ref = (here / "modules" / f"{name}.py").read_text()
        try:
            code, _ = build_triton_program(ref, cap)
        except Exception:  # noqa: BLE001 - a rewrite failure is synth's, not a gate's
            continue
        rows.append(new_record(id=name, pytorch_code=ref, kernel_code=code, backend="triton",
                               source="inductor", entry_point="Model"))
    return rows


def reproduced_reference(status: str, reasons: list[str]) -> bool:
    """The row's outputs matched the reference (so a `deceptive` verdict is a gate's alone)."""
    return (status in ("verified", "deceptive")
            and not any(x.split(":")[0] in COMPARISON for x in reasons))


def read_paths(arg: str) -> set[str]:
    """`a,b,c` or `@FILE` (one per line) -> a set of candidate paths."""
    text = Path(arg[1:]).read_text() if arg.startswith("@") else arg
    return {x.strip() for x in text.replace(",", "\n").splitlines() if x.strip()}


def candidate_rows(path: str, limit: int | None, skip: int = 0,
                   paths: set[str] | None = None) -> list[dict]:
    from curate.tableio import read_rows
    if path == "@inductor-fixtures":
        rows = inductor_fixture_rows()
    else:
        rows = [r for r in read_rows(path) if r.get("kernel_code")]
    if paths:
        rows = [r for r in rows if r.get("path") in paths]
    rows = rows[skip:]
    return rows[:limit] if limit else rows


def candidate_fp(path: str, rows: list[dict], results: list[dict | None]) -> dict:
    """False positives of the gates on a table of honest candidates (`@inductor-fixtures`: the
    committed inductor captures, rewritten into Triton programs)."""
    from curate.verify.gates.static import failed, static_findings
    static_fail = collections.Counter()
    static_rows = 0
    for r in rows:
        fails = failed(static_findings(r["kernel_code"], r.get("pytorch_code")))
        if fails:
            static_rows += 1
            static_fail.update(fails)
    reached = [(row, r) for row, r in zip(rows, results) if r is not None]
    statuses = collections.Counter(r["status"] for _, r in reached)
    reasons = collections.Counter(x for _, r in reached for x in r["reasons"])
    reproduced = [(row, r) for row, r in reached
                  if reproduced_reference(r["status"], r["reasons"])]
    flagged = [(row, r) for row, r in reproduced if r["status"] == "deceptive"]
    return {
        "table": path, "rows": len(rows), "reached": len(reached), "statuses": dict(statuses),
        "reasons": dict(reasons.most_common()),
        "reproduced_reference": len(reproduced), "flagged_deceptive": len(flagged),
        "false_positive_rate": (len(flagged) / len(reproduced)) if reproduced else None,
        "static_fail_rows": static_rows, "static_fail_reasons": dict(static_fail),
        "flagged": [{"id": row.get("id"), "path": row.get("path"),
                     "reasons": r["reasons"]} for row, r in flagged][:200],
        "not_verified": [{"id": row.get("id"), "path": row.get("path"), "status": r["status"],
                          "reasons": r["reasons"], "error": (r.get("error") or "")[:400]}
                         for row, r in reached if r["status"] != "verified"][:200],
        "not_reached": [row.get("path") or row.get("id") for row, r in zip(rows, results)
                        if r is None],
    }


def environment(device: str) -> dict:
    info = {"device": device, "python": platform.python_version(), "platform": platform.platform(),
            "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count()}
    try:
        import torch
        info["torch"] = torch.__version__
        info["cuda"] = torch.version.cuda
        if device == "cuda" and torch.cuda.is_available():
            info["gpu"] = torch.cuda.get_device_name()
    except Exception as exc:  # noqa: BLE001
        info["torch"] = f"unavailable: {exc}"
    try:
        import importlib.metadata
        info["triton"] = importlib.metadata.version("triton")
    except Exception:  # noqa: BLE001
        info["triton"] = None
    from curate.isolation import confine
    info["landlock_abi"] = confine.abi_version()
    info["root"] = hasattr(os, "geteuid") and os.geteuid() == 0
    return info


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
    sys.path.insert(0, str(ROOT / "benchmarks"))
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


def verify_timed(rows: list[dict], device: str, workers: int | None, timeout: float,
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


def mix_main(args) -> int:
    """--mix: a row's verdict depends on that row alone (every hostile row interleaved with
    honest ones in one run, then the honest rows and the hostile rows each alone)."""
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
            res, wall = verify_timed(rows, device, args.workers, args.timeout or 60.0, name,
                                      part, cache)
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



def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when visible)")
    ap.add_argument("--out", default=None, help="JSON to write (default benchmarks/results/"
                                                "hostile_<device>.json)")
    ap.add_argument("--candidates", default=None, help="table of honest candidates (or "
                    "@inductor-fixtures): report the false-positive rate on it")
    ap.add_argument("--limit", type=int, default=None, help="first N rows of --candidates")
    ap.add_argument("--skip", type=int, default=0, help="leave out the first N rows of "
                    "--candidates (to continue a run that was cut)")
    ap.add_argument("--paths", default=None, help="only the candidates whose `path` is listed "
                    "(comma-separated, or @FILE with one per line): rows a cut run never reached")
    ap.add_argument("--skip-fixtures", action="store_true")
    ap.add_argument("--cases", default=None, help="comma-separated case names")
    ap.add_argument("--backends", default=None, help="default: triton,cuda on cuda; "
                    "triton,cuda,cpp on cpu (C++ fixtures run on CPU tensors)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=None, help="seconds a row (default 300; "
                    "60 with --mix)")
    ap.add_argument("--keep-bytes", type=int, default=None,
                    help="workers keep no input set larger than this (0: every set made again "
                         "at each call, the path of multi-GiB rows); default: verify's own")
    ap.add_argument("--no-static", action="store_true", help="static gates off: what the "
                    "layers behind them (dynamic gates, trusted timing, the judge) catch")
    mix = ap.add_argument_group("--mix: hostile rows among honest ones, then each alone")
    mix.add_argument("--mix", action="store_true")
    mix.add_argument("--kernelbench", type=Path, default=None)
    mix.add_argument("--n", type=int, default=48, help="KernelBench problems to synthesize")
    mix.add_argument("--seed", type=int, default=0)
    mix.add_argument("--runs", default="mixed,honest,hostile",
                     help="which verify runs (the runs left out are read from OUT.<run>.json "
                          "of an earlier call)")
    mix.add_argument("--cache-dir", type=Path, default=None,
                     help="compile caches: a fresh folder under it for each run, so that every "
                          "run compiles cold (default: verify's own cache, shared by the runs)")
    mix.add_argument("--pairs-cache", type=Path, default=None,
                     help="synthesized KernelBench pairs: read if present, else written")
    args = ap.parse_args(argv)
    if args.mix:
        args.out = Path(args.out) if args.out else None
        return mix_main(args)
    args.timeout = args.timeout or 300
    device = args.device
    if device is None:
        import torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    out_path = Path(args.out or ROOT / "benchmarks" / "results" / f"hostile_{device}.json")
    report: dict = {"environment": environment(device), "started": time.strftime(
        "%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    t0 = time.monotonic()
    code = 0
    fixtures: list[dict] = []
    if not args.skip_fixtures:
        only = set(args.cases.split(",")) if args.cases else None
        backends = args.backends or ("triton,cuda" if device == "cuda" else "triton,cuda,cpp")
        fixtures = fixture_rows(backends.split(","), only)
    paths = read_paths(args.paths) if args.paths else None
    cands = (candidate_rows(args.candidates, args.limit, args.skip, paths)
             if args.candidates else [])

    def write(results: list[dict | None], partial: bool) -> None:
        if fixtures:
            report["fixtures"], report["fixture_counts"] = fixture_table(
                fixtures, results[:len(fixtures)])
        if cands:
            report["candidates"] = candidate_fp(args.candidates, cands, results[len(fixtures):])
        report["seconds"] = round(time.monotonic() - t0, 1)
        report["partial"] = partial
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(report, indent=2, default=str))

    last = [0.0]

    def save_now_and_then(results):  # a run cut short keeps its rows
        if time.monotonic() - last[0] > 20:
            last[0] = time.monotonic()
            write(results, partial=True)
    report["static_gates"] = not args.no_static
    report["keep_bytes"] = args.keep_bytes
    results = run_verify(fixtures + cands, device, args.workers, args.timeout,
                         on_result=save_now_and_then, static_gates=not args.no_static,
                         keep_bytes=args.keep_bytes)
    write(results, partial=False)
    if fixtures:
        table, counts = report["fixtures"], report["fixture_counts"]
        w = max(len(r["case"]) for r in table) + 2
        print(f"{'case':<{w}} {'backend':<7} {'status':<21} {'verdict':<15} {'credited':>8}  "
              "reasons")
        for r in table:
            sp = r.get("credited_speedup")
            print(f"{r['case']:<{w}} {r['backend']:<7} {r['status']:<21} {r['verdict']:<15} "
                  f"{(f'{sp:.2f}x' if sp else '-'):>8}  {', '.join(r['reasons'][:6])}")
        print("\n" + ", ".join(f"{k}={v}" for k, v in counts.items()))
        if any(r["verdict"] in ("MISSED", "FALSE POSITIVE") for r in table):
            code = 1
    if cands:
        fp = report["candidates"]
        rate = fp["false_positive_rate"]
        print(f"\nhonest candidates from {fp['table']}: {fp['rows']} rows, statuses "
              f"{fp['statuses']}")
        print(f"reproduced the reference: {fp['reproduced_reference']}, failed by a gate: "
              f"{fp['flagged_deceptive']} -> false-positive rate "
              f"{'n/a' if rate is None else f'{rate:.1%}'}")
        print(f"static gates alone fail {fp['static_fail_rows']} rows: {fp['static_fail_reasons']}")
        top = list(fp["reasons"].items())[:12]
        print("reasons: " + ", ".join(f"{k}={v}" for k, v in top))
    print(f"\nwrote {out_path} ({report['seconds']} s)")
    return code


if __name__ == "__main__":
    sys.exit(main())
