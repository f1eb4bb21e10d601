"""Throughput of `curate verify` against a naive serial harness, on one machine.

    PYTHONPATH=. python benchmarks/verify_throughput.py --kernelbench ../shared/data/kernelbench \
        --out benchmarks/results/verify_throughput.json

1. takes a fixed, seeded sample of N problems from KernelBench levels 1 and 2;
2. synthesizes torch.compile candidates with `curate synth inductor` (the synth-inductor step);
3. verifies them (run 1), then verifies them again with fresh workers (run 2, warm caches);
4. runs a naive serial harness on S of them: a fresh process per pair that imports torch,
   builds inputs on the CPU, torch.compiles the model, checks it against eager and times both,
   as the common eval scripts do;
5. prints pairs per hour for both, their ratio, the share of verify's wall time the GPU spent in
   timed trials, and the agreement of the two runs' speedups (median relative difference).

The JSON holds the hardware, versions, per-pair results and every figure printed.
`--pairs TABLE` skips synthesis and verifies an existing table of pairs instead.
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


# -- sampling and synthesis ----------------------------------------------------------------------
def sample_problems(root: Path, n: int, seed: int, levels: list[str]) -> list[Path]:
    files: list[Path] = []
    for lvl in levels:
        files += sorted((root / f"level{lvl}").glob("*.py"))
    if not files:  # a plain folder of problems (e.g. examples/)
        files = sorted(p for p in root.glob("*.py") if not p.name.startswith("_"))
    rng = random.Random(seed)
    return sorted(rng.sample(files, min(n, len(files))))


def sampled_rows(args) -> list[dict]:
    """The seeded sample of problems (the same for the pipeline and the serial-only run)."""
    files = sample_problems(args.kernelbench, args.n, args.seed,
                            [x for x in args.levels.split(",") if x])
    return problem_rows(files, args.kernelbench)


def problem_rows(files: list[Path], root: Path) -> list[dict]:
    from curate.record import content_hash
    from curate.schema import new_record
    rows = []
    for f in files:
        code = f.read_text()
        rows.append(new_record(id=content_hash(code), pytorch_code=code, source="kernelbench",
                               path=f.relative_to(root).as_posix(), entry_point="Model"))
    return rows


def synthesize(rows: list[dict], device: str, sandbox: str = "auto",
               deadline_s: float | None = None) -> tuple[list[dict], dict]:
    """Candidates from the synth-inductor step; what it dropped is counted by reason, and the
    first errors are kept (a run where every row fails says why). Progress is printed as rows
    end (a run cut at its limit shows how far synthesis got); past `deadline_s` the rows
    made so far are verified and the rest left out (`cut` in the result)."""
    from curate.pipeline import config, registry
    cls = registry.load("synth-inductor", registry.STEPS)
    step = config.instantiate(cls, {"sandbox": sandbox}, {"device": device}, "synth-inductor")
    t0 = time.monotonic()
    kept, dropped, errors = [], Counter(), []
    step.setup()
    try:
        out = step.process(rows)
        pairs = enumerate(out) if isinstance(out, list) else out
        done, cut = 0, False
        for _, outcome in pairs:
            done += 1
            kept += [r for r in outcome.kept if r.get("kernel_code")]
            if outcome.dropped is not None:
                dropped.update(outcome.reasons or ["unspecified"])
                if len(errors) < 3 and outcome.dropped.get("error"):
                    errors.append(outcome.dropped["error"][-600:])
            if done % 10 == 0 or done == len(rows):
                print(f"synth +{time.monotonic() - t0:6.1f}s {done:3d}/{len(rows)} rows, "
                      f"{len(kept)} candidates", flush=True)
            if deadline_s is not None and time.monotonic() - t0 > deadline_s:
                cut = True
                break
    finally:
        step.teardown()
    return kept, {"seconds": time.monotonic() - t0, "candidates": len(kept), "cut": cut,
                  "dropped": dict(dropped), "errors": errors, "sandbox": step.sandbox}


# -- verify --------------------------------------------------------------------------------------
def run_verify(pairs: list[dict], device: str, workers: int | None, seed: int,
               cache_dir: str | None, keep_idle_gb: float | None = 1.0, label: str = "",
               sandbox: str = "auto", on_row=None, transport: str = "auto",
               devices: list[int] | None = None, timeout: float = 120.0,
               digest: str = "sums") -> dict:
    """`on_row(progress)` after each row: [seconds since start, row, status, seconds per phase,
    memory, each worker's work by part, each device's gate so far], so that a run cut at its
    limit still tells its rows per second, where they waited and where the device's time
    went."""
    from curate.verify import Verifier
    t0 = time.monotonic()
    results, progress = {}, []
    with Verifier(device=device, workers=workers, seed=seed, cache_dir=cache_dir,
                  keep_idle_gb=keep_idle_gb, sandbox=sandbox, transport=transport,
                  devices=devices, timeout=timeout, digest=digest) as v:
        t_ready = time.monotonic()
        last = [time.monotonic()]
        stop = threading.Event()

        def watchdog():  # a run that stops finishing rows says where it waits
            while not stop.wait(15):
                if time.monotonic() - last[0] > 60:
                    gates = ", ".join(f"{d.name} {d.memory.used:.1f}/{d.memory.capacity:.1f} GB"
                                      for d in v.devices)
                    print(f"{label} watchdog: no row for {time.monotonic() - last[0]:.0f}s, "
                          f"memory gates {gates}; in flight: {v.inflight.summary()}",
                          file=sys.stderr, flush=True)
                    faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                    last[0] = time.monotonic()
        threading.Thread(target=watchdog, daemon=True).start()
        for i, r in v.verify(pairs):
            results[pairs[i]["id"]] = r
            last[0] = time.monotonic()
            progress.append([round(last[0] - t0, 1), pairs[i].get("path") or pairs[i]["id"],
                             r.status, r.notes.get("phases_s"),
                             {k: r.notes.get(k) for k in ("size_gb", "reserved_gb")
                              + MEMORY_NOTES},
                             {k: r.notes.get(k) for k in ("judge_work_s", "worker_work_s")},
                             v.device_report()["device_gate"]])
            if on_row is not None:
                on_row(progress)
            # one line a row: where a slow run spends its time shows in the log
            print(f"{label} +{time.monotonic() - t0:6.1f}s {len(results):3d}/{len(pairs)} "
                  f"{(pairs[i].get('path') or pairs[i]['id'])[:40]:40s} {r.status:14s} "
                  f"{r.seconds:6.1f}s dev={r.device_index} speedup={r.speedup}"
                  + (f" {r.reasons} {(r.error or '')[:600]!r}" if r.status != "verified" else ""),
                  file=sys.stderr, flush=True)
        stop.set()
        stats = {"workers": v.workers, "compile_workers": v.cfg.compile_workers,
                 **v.device_report(), "replaced": v.replaced, "confined": v.confined,
                 "confine_probe": v.placement.confine_probe,
                 "probe_s": v.placement.probe_s, "memory_gb": [d.memory.capacity
                                                               for d in v.devices],
                 "transport": v.transport, "sandbox": v.sandbox}
    wall = time.monotonic() - t0
    timed = sum(r.timed_wall_s for r in results.values())
    return {
        "wall_s": wall, "startup_s": t_ready - t0, "timed_wall_s": timed,
        "gpu_busy_share": timed / wall if wall else None,
        "pairs_per_hour": len(pairs) / wall * 3600 if wall else None,
        # the rate once the workers are up (start-up is paid once a run, not once a row)
        "pairs_per_hour_after_startup": len(pairs) / (wall - (t_ready - t0)) * 3600
        if wall > t_ready - t0 else None,
        "statuses": dict(Counter(r.status for r in results.values())),
        "reasons": dict(Counter(x for r in results.values() for x in r.reasons)),
        "pool": stats,
        "phase_median_s": _phase_medians(results),
        "phase_total_s": _phase_totals(results),
        "phase_share": _phase_shares(results),
        "work_total_s": _work_totals(results),
        "memory": memory_fit(results),
        "rows": {k: {"status": r.status, "speedup": r.speedup, "ci": [r.speedup_ci_low,
                                                                      r.speedup_ci_high],
                     "ref_ms": r.ref_ms, "kernel_ms": r.kernel_ms, "trials": r.timed_trials,
                     "seconds": round(r.seconds, 2), "reasons": r.reasons,
                     "device": r.device_index,
                     "notes": {k: r.notes.get(k) for k in _PHASES + (
                         "phases_s", "judge_work_s", "worker_work_s", "budget_s", "timing_check",
                         "timing", "reserved_gb", "alone_retry", "patched", "size_gb")
                         + MEMORY_NOTES},
                     "error": (r.error or "")[:300] or None}
                 for k, r in results.items()},
    }


_PHASES = ("compile_s", "compile_import_s", "correctness_s")
# each worker's peaks, by request, and (CURATE_MEMORY_TRACE=1) what held the memory at the peak
MEMORY_NOTES = ("peak_gb", "judge_peak_gb", "peak_reserved_gb", "judge_peak_reserved_gb",
                "peak_by_request_gb", "judge_peak_by_request_gb", "peak_holders",
                "judge_peak_holders")


def memory_fit(results: dict) -> dict:
    """How a row's reservation (verify/row.py `row_memory_gb`, from the reference's sizes)
    compares with what its two workers held at their peak (torch's reserved memory where the
    workers report it, else its allocated count; the CUDA contexts come on top), row by row."""
    from curate.verify.row import ROW_MEMORY_BASE_GB, row_memory_gb
    rows = []
    for key, r in results.items():
        size, n = r.notes.get("size_gb"), r.notes
        cand = n.get("peak_reserved_gb", n.get("peak_gb"))
        judge = n.get("judge_peak_reserved_gb", n.get("judge_peak_gb"))
        if not size or cand is None or judge is None:
            continue
        est = row_memory_gb(size, gpu=r.gpu is not None) - ROW_MEMORY_BASE_GB
        rows.append({"row": key, "inputs_gb": size.get("inputs"),
                     "outputs_gb": size.get("outputs"), "estimate_gb": round(est, 2),
                     "peak_gb": round(cand + judge, 2),
                     "one_by_one": bool(n.get("correctness_one_by_one"))})
    big = [x for x in rows if x["estimate_gb"] >= 1.0]
    ratios = sorted(x["peak_gb"] / x["estimate_gb"] for x in big)
    return {"rows": len(rows), "rows_over_1gb": len(big),
            "peak_over_estimate_median": round(statistics.median(ratios), 3) if ratios else None,
            "peak_over_estimate_max": round(ratios[-1], 3) if ratios else None,
            "over_estimate": [x for x in big if x["peak_gb"] > x["estimate_gb"]],
            "largest": sorted(rows, key=lambda x: -x["peak_gb"])[:15]}


def _phase_medians(results: dict) -> dict:
    """Median seconds per row of each task (from the rows' notes)."""
    out = {}
    for k in _PHASES:
        vals = [r.notes[k] for r in results.values() if isinstance(r.notes.get(k), (int, float))]
        out[k] = statistics.median(vals) if vals else None
    timed = [r.timed_wall_s for r in results.values() if r.timed_wall_s]
    out["timed_s"] = statistics.median(timed) if timed else None
    return out


def _phase_totals(results: dict) -> dict:
    """Seconds all rows spent in each phase of the engine (waiting included), most first: where
    the wall time of a run goes, summed over the rows in flight."""
    tot = Counter()
    for r in results.values():
        tot.update(r.notes.get("phases_s") or {})
    return {k: round(v, 1) for k, v in tot.most_common()}


def _work_totals(results: dict) -> dict:
    """Seconds inside the workers' requests by part, summed over rows (the judge's and, as the
    candidate's worker says, its own): what a phase such as `judge compare` is made of."""
    tot = Counter()
    for r in results.values():
        for side, key in (("judge", "judge_work_s"), ("candidate", "worker_work_s")):
            tot.update({f"{side}: {k}": v for k, v in (r.notes.get(key) or {}).items()})
    return {k: round(v, 1) for k, v in tot.most_common()}


def _phase_shares(results: dict) -> dict:
    """Each phase's share of all the row-seconds of a run (waiting included)."""
    tot = _phase_totals(results)
    total = sum(tot.values()) or 1.0
    return {k: round(v / total, 3) for k, v in tot.items()}


def agreement(run1: dict, run2: dict) -> dict:
    """Median over pairs timed in both runs of |s1 - s2| / s1."""
    diffs = []
    for k, a in run1["rows"].items():
        b = run2["rows"].get(k)
        if b and a["speedup"] and b["speedup"]:
            diffs.append(abs(a["speedup"] - b["speedup"]) / a["speedup"])
    status_same = sum(1 for k, a in run1["rows"].items()
                      if run2["rows"].get(k, {}).get("status") == a["status"])
    return {"pairs_timed_in_both": len(diffs),
            "median_rel_diff": statistics.median(diffs) if diffs else None,
            "p90_rel_diff": sorted(diffs)[int(0.9 * (len(diffs) - 1))] if diffs else None,
            "same_status": status_same, "pairs": len(run1["rows"])}


# -- the naive serial harness ---------------------------------------------------------------------
SERIAL_TIMED = 100


def serial_one(spec_path: str) -> None:
    """One pair the way common eval scripts do it: fresh process, CPU inputs, compile, check, time."""
    t0 = time.perf_counter()
    spec = json.loads(Path(spec_path).read_text())
    phases = {}
    import importlib.util

    import torch
    phases["import_s"] = time.perf_counter() - t0
    dev = spec["device"]
    path = Path(tempfile.mkdtemp()) / "problem.py"
    path.write_text(spec["pytorch_code"])
    s = importlib.util.spec_from_file_location("problem", path)
    mod = importlib.util.module_from_spec(s)
    s.loader.exec_module(mod)
    t = time.perf_counter()
    torch.manual_seed(0)
    init = mod.get_init_inputs()
    model = mod.Model(*init).to(dev)
    inputs = [[x.to(dev) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
              for _ in range(3)]
    phases["inputs_s"] = time.perf_counter() - t
    t = time.perf_counter()
    compiled = torch.compile(model)
    with torch.no_grad():
        compiled(*inputs[0])
    phases["compile_s"] = time.perf_counter() - t
    t = time.perf_counter()
    ok = True
    with torch.no_grad():
        for inp in inputs:
            ok &= bool(torch.allclose(model(*inp), compiled(*inp), atol=1e-2, rtol=1e-2))
    phases["check_s"] = time.perf_counter() - t
    t = time.perf_counter()

    def bench(fn, inp):
        times = []
        for _ in range(SERIAL_TIMED):
            if dev == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                torch.cuda.synchronize()
                a.record()
                fn(*inp)
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            else:
                c0 = time.perf_counter()
                fn(*inp)
                times.append((time.perf_counter() - c0) * 1e3)
        return statistics.median(times)

    with torch.no_grad():
        for _ in range(3):
            model(*inputs[0])
            compiled(*inputs[0])
        ref_ms, new_ms = bench(model, inputs[0]), bench(compiled, inputs[0])
    phases["time_s"] = time.perf_counter() - t
    print(json.dumps({"ok": ok, "ref_ms": ref_ms, "kernel_ms": new_ms,
                      "speedup": ref_ms / new_ms if new_ms else None, "phases": phases}))


def run_serial(rows: list[dict], device: str, budget_s: float, on_pair=None,
               stop_at: float | None = None) -> dict:
    """`stop_at` (monotonic): start no pair that, at the slowest pace seen so far, would end
    after it, so that the whole run ends inside its limit with a complete report."""
    out, t0 = [], time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="curate-serial-"))
    for i, row in enumerate(rows):
        if time.monotonic() - t0 > budget_s:
            break
        pace = max((r["seconds"] for r in out), default=25.0)
        if stop_at is not None and time.monotonic() + pace > stop_at:
            break
        spec = tmp / f"{i}.json"
        spec.write_text(json.dumps({"pytorch_code": row["pytorch_code"], "device": device}))
        ts = time.monotonic()
        try:
            p = subprocess.run([sys.executable, __file__, "--serial-one", str(spec)],
                               capture_output=True, text=True, timeout=600)
            line = (p.stdout.strip().splitlines() or ["{}"])[-1]
            res = json.loads(line) if line.startswith("{") else {"error": p.stderr[-300:]}
        except subprocess.TimeoutExpired:
            res = {"error": "timeout"}
        res["seconds"] = time.monotonic() - ts
        res["id"] = row.get("id")
        out.append(res)
        if on_pair is not None:  # a run cut short keeps the pairs it finished
            on_pair(_serial_summary(out, time.monotonic() - t0))
    return _serial_summary(out, time.monotonic() - t0)


def _serial_summary(out: list[dict], wall: float) -> dict:
    secs = [r["seconds"] for r in out]
    return {"pairs": len(out), "wall_s": wall,
            "seconds_per_pair": statistics.mean(secs) if secs else None,
            "pairs_per_hour": len(out) / wall * 3600 if wall and out else None,
            "rows": out}


# -- main ------------------------------------------------------------------------------------------
def save_result(out, doc: dict) -> int:
    """Write a benchmark's result JSON (when asked for) and say where."""
    if out:
        out.write_text(json.dumps(doc, indent=1))
        print(f"wrote {out}")
    return 0


def hardware(device: str) -> dict:
    import torch
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count()}
    try:
        import importlib.metadata
        info["triton"] = importlib.metadata.version("triton")
    except Exception:
        info["triton"] = None
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name()
    return info


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernelbench", type=Path, help="KernelBench folder (level1/, level2/ ...)")
    ap.add_argument("--pairs", type=Path, help="verify this table of pairs instead of synthesizing")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/verify_throughput.json")
    ap.add_argument("--n", type=int, default=60)
    ap.add_argument("--serial", type=int, default=15)
    ap.add_argument("--serial-budget", type=float, default=240.0,
                    help="stop the serial harness after this many seconds (rates stay exact)")
    ap.add_argument("--deadline", type=float, default=None,
                    help="seconds for the whole run: the serial harness starts no pair it "
                         "cannot finish by then")
    ap.add_argument("--levels", default="1,2")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda if visible)")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--devices", default=None, help="GPU indices, e.g. 0,1 (default: all)")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--cache-dir", default=None,
                    help="compile cache (default: a fresh one, so run 1 compiles from cold)")
    ap.add_argument("--serial-only", action="store_true",
                    help="only the serial harness, on the first --serial problems of the same "
                         "seeded sample (15 serial pairs take 8-10 minutes alone on the H200, "
                         "so they need a command of their own)")
    ap.add_argument("--serial-from", type=Path, default=None,
                    help="take the serial harness's figures from a --serial-only run's JSON "
                         "instead of running it here")
    ap.add_argument("--keep-idle-gb", default="1.0",
                    help="device memory a worker may keep between tasks before it is replaced "
                         "('none': never replaced for memory)")
    ap.add_argument("--limit", type=int, default=None,
                    help="with --pairs: verify only the first LIMIT pairs")
    ap.add_argument("--only", default=None,
                    help="with --pairs: verify only pairs whose path holds one of these "
                         "comma-separated names")
    ap.add_argument("--runs", type=int, default=2, choices=(1, 2),
                    help="verify runs (2 gives the speedup agreement)")
    ap.add_argument("--sandbox", default="auto", choices=("auto", "strict", "off"),
                    help="the verify runs' sandbox (off: no bubblewrap or worker uids)")
    ap.add_argument("--transport", default="auto",
                    choices=("auto", "cuda_ipc", "cuda_fd", "memfd", "inline"),
                    help="how candidate outputs reach the judge (auto: what verify picks)")
    ap.add_argument("--digest", default="sums", choices=("sums", "tree"),
                    help="what timed batches commit to their outputs with (verify --digest)")
    ap.add_argument("--pairs-out", type=Path, default=None,
                    help="write the synthesized pairs here (a later run takes them with --pairs)")
    ap.add_argument("--serial-one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.serial_one:
        serial_one(args.serial_one)
        return 0
    if args.serial_only:
        return serial_only(args)
    from curate.pipeline.config import detect_device
    device = args.device or detect_device()
    cache_dir = args.cache_dir or tempfile.mkdtemp(prefix="curate-bench-cache-")
    t_all = time.monotonic()
    report: dict = {"device": device, "hardware": hardware(device), "seed": args.seed,
                    "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if args.pairs:
        from curate.tableio import read_rows
        from curate.record import ensure_id
        pairs = [ensure_id(r) for r in read_rows(args.pairs) if r.get("kernel_code")]
        if args.kernelbench:  # the candidates of the seeded sample only
            sample = {r["path"] for r in sampled_rows(args)}
            pairs = [r for r in pairs if r.get("path") in sample]
        if args.only:   # e.g. the largest problems, for CURATE_MEMORY_TRACE=1
            names = args.only.split(",")
            pairs = [r for r in pairs if any(n in (r.get("path") or "") for n in names)]
        pairs = pairs[: args.limit or args.n]
        problems = pairs
        report["synth"] = None
    else:
        if not args.kernelbench:
            ap.error("--kernelbench DIR or --pairs TABLE is required")
        problems = sampled_rows(args)
        report["problems"] = [r["path"] for r in problems]
        # synthesis may take at most half the run's deadline: the rest is verify's
        pairs, report["synth"] = synthesize(
            problems, device, deadline_s=args.deadline / 2 if args.deadline else None)
        print(f"synth: {len(pairs)} candidates from {len(problems)} problems in "
              f"{report['synth']['seconds']:.1f}s")
        if args.pairs_out:
            from curate.tableio import write_rows
            write_rows(args.pairs_out, pairs)
    def save_partial(**parts):  # a run cut short still leaves what it measured
        report.update(parts)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**report, "partial": True}, indent=1, default=str))

    keep = None if args.keep_idle_gb.lower() == "none" else float(args.keep_idle_gb)
    report["keep_idle_gb"] = keep
    report["sandbox_requested"] = args.sandbox
    report["transport_requested"] = args.transport
    # since 2026-12-07 (correctness.side_by_side): a larger row's reference and first batch run
    # one after the other; schedule_replay.py reads this to know which way the phases ran
    report["side_by_side"] = "small rows"
    report["digest"] = args.digest
    save_partial(pairs=len(pairs))
    from curate.verify.config import parse_devices
    devices = parse_devices(args.devices)
    run1 = run_verify(pairs, device, args.workers, args.seed, cache_dir, keep, "run1",
                      args.sandbox, on_row=lambda done: save_partial(run1_progress=done),
                      transport=args.transport, devices=devices, timeout=args.timeout,
                      digest=args.digest)
    print(f"verify run 1: {len(pairs)} pairs in {run1['wall_s']:.1f}s {run1['statuses']} "
          f"transport={run1['pool']['transport']} replaced={run1['pool']['replaced']} "
          f"phases={run1['phase_median_s']}")
    save_partial(run1=run1)
    run2 = None
    if args.runs == 2:
        run2 = run_verify(pairs, device, args.workers, args.seed, cache_dir, keep, "run2",
                          args.sandbox, transport=args.transport, devices=devices,
                          timeout=args.timeout, digest=args.digest)
        print(f"verify run 2: {len(pairs)} pairs in {run2['wall_s']:.1f}s {run2['statuses']} "
              f"replaced={run2['pool']['replaced']}")
        save_partial(run2=run2)
    by_id = {p["id"]: p for p in problems}
    serial_rows = [by_id.get(p.get("ref_id")) or p for p in pairs][: args.serial]
    if args.serial_from:  # measured in a command of its own (--serial-only), same sample
        prev = json.loads(args.serial_from.read_text())
        if prev.get("seed") != args.seed:
            raise SystemExit(f"{args.serial_from}: seed {prev.get('seed')}, this run {args.seed}")
        serial = {**prev["serial"], "source": str(args.serial_from),
                  "started": prev.get("started")}
    else:
        serial = run_serial(serial_rows, device, args.serial_budget,
                            on_pair=lambda part: save_partial(serial=part),
                            stop_at=t_all + args.deadline if args.deadline else None)
    print(f"serial harness: {serial['pairs']} pairs in {serial['wall_s']:.1f}s")

    synth_s = (report["synth"] or {}).get("seconds", 0.0)
    pipeline_pph = len(pairs) / (synth_s + run1["wall_s"]) * 3600 if pairs else None
    agree = agreement(run1, run2) if run2 else {"median_rel_diff": None}
    report.update({
        "pairs": len(pairs), "run1": run1, "run2": run2, "serial": serial, "agreement": agree,
        "figures": {
            "synth_plus_verify_pairs_per_hour": pipeline_pph,
            "verify_pairs_per_hour_run1": run1["pairs_per_hour"],
            "verify_pairs_per_hour_run2": run2 and run2["pairs_per_hour"],
            "serial_pairs_per_hour": serial["pairs_per_hour"],
            "ratio_vs_serial": (pipeline_pph / serial["pairs_per_hour"]
                                if pipeline_pph and serial["pairs_per_hour"] else None),
            "gpu_busy_share_run1": run1["gpu_busy_share"],
            "gpu_busy_share_run2": run2 and run2["gpu_busy_share"],
            "speedup_median_rel_diff": agree["median_rel_diff"],
        },
        "total_s": time.monotonic() - t_all,
    })
    print_table(report)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {args.out}")
    return 0


def serial_only(args) -> int:
    """The serial harness alone (pairs per hour to set against a pipeline run's JSON)."""
    from curate.pipeline.config import detect_device
    if not args.kernelbench:
        raise SystemExit("--serial-only needs --kernelbench DIR")
    device = args.device or detect_device()
    t_all = time.monotonic()
    rows = sampled_rows(args)[: args.serial]
    report = {"device": device, "hardware": hardware(device), "seed": args.seed,
              "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "serial_only": True, "problems": [r["path"] for r in rows]}

    def save(part):
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({**report, "serial": part, "partial": True}, indent=1,
                                       default=str))
    serial = run_serial(rows, device, args.serial_budget, on_pair=save,
                        stop_at=t_all + args.deadline if args.deadline else None)
    report.update({"serial": serial, "total_s": time.monotonic() - t_all})
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(f"serial harness: {serial['pairs']} of {len(rows)} pairs in {serial['wall_s']:.1f}s "
          f"= {serial['pairs_per_hour'] or 0:.1f} pairs/hour; wrote {args.out}")
    return 0


def print_table(report: dict) -> None:
    f = report["figures"]

    def fmt(v, spec=".1f"):
        return "-" if v is None else format(v, spec)
    hw = report["hardware"]
    print(f"\n{hw.get('gpu') or hw.get('cpu')} | torch {hw['torch']} | triton {hw['triton']} | "
          f"{report['pairs']} pairs")
    rows = [("synth + verify (run 1), pairs/hour", fmt(f["synth_plus_verify_pairs_per_hour"])),
            ("verify run 1, pairs/hour", fmt(f["verify_pairs_per_hour_run1"])),
            ("verify run 2 (warm caches), pairs/hour", fmt(f["verify_pairs_per_hour_run2"])),
            ("naive serial harness, pairs/hour", fmt(f["serial_pairs_per_hour"])),
            ("ratio (synth+verify / serial)", fmt(f["ratio_vs_serial"], ".2f")),
            ("GPU busy share in timed trials, run 1", fmt(f["gpu_busy_share_run1"], ".3f")),
            ("GPU busy share in timed trials, run 2", fmt(f["gpu_busy_share_run2"], ".3f")),
            ("speedup agreement: median |s1-s2|/s1", fmt(f["speedup_median_rel_diff"], ".4f"))]
    w = max(len(a) for a, _ in rows)
    for a, b in rows:
        print(f"  {a:<{w}}  {b:>10}")
    shares = (report.get("run1") or {}).get("phase_share") or {}
    if shares:
        print("  share of row-seconds by phase, run 1 (waiting included):")
        for k, v in list(shares.items())[:14]:
            print(f"    {k:<{w - 2}}  {v:>10.3f}")
    run1 = report.get("run1") or {}
    for dev, g in ((run1.get("pool") or {}).get("device_gate") or {}).items():
        wall = run1.get("wall_s") or 0
        print(f"  {dev}: held alone {g['exclusive_held_s']:.1f} s"
              + (f" ({g['exclusive_held_s'] / wall:.0%} of the wall)" if wall else "")
              + f" in {g['exclusive']} holds; timed batches waited {g['exclusive_wait_s']:.1f} s;"
              f" {g['shared_waited']} of {g['shared']} shared requests waited"
              f" {g['shared_wait_s']:.1f} s behind them")
    work = run1.get("work_total_s") or {}
    if work:
        print("  seconds inside the workers' requests by part, run 1 (summed over rows):")
        for k, v in list(work.items())[:14]:
            print(f"    {k:<{w - 2}}  {v:>10.1f}")


if __name__ == "__main__":
    sys.exit(main())
