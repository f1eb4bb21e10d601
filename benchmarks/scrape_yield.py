"""Scrape yield on code no one here wrote: installed packages' source folders as repositories.

For each target (torch's own torch/nn/modules, timm, torchvision: found from the installed
packages without importing them), runs the scrape source end to end (classes, closures,
sandboxed deduction, keep-gates) and reports files scanned, nn.Module classes found, classes
tried, runnable programs, yield, the reasons for the rest, time and classes per minute. Prints
a table and writes JSON with the machine and versions.

    python benchmarks/scrape_yield.py                         # every target found here
    python benchmarks/scrape_yield.py --targets torch-nn --jobs 2
    python benchmarks/scrape_yield.py --targets timm --limit 200
    python benchmarks/scrape_yield.py --build --device cuda   # what the scraped programs give

--build goes on from the yield to what it is for: `curate build --pipeline
pipelines/scrape-example.yaml` (torch's own nn.Module classes -> programs -> candidates ->
dedup -> verify -> keep), and writes the build's stats and its kept pairs to the JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from curate.pipeline.runner import Runner  # noqa: E402
from curate.sources.scrape import ScrapeSource  # noqa: E402
from curate.tableio import read_rows  # noqa: E402

TARGETS = ("torch-nn", "timm", "torchvision")


def target_path(name: str) -> Path | None:
    """A package's source folder, found without importing it (torchvision built for another
    torch fails to import, and its sources are still readable)."""
    if name == "torch-nn":
        spec = importlib.util.find_spec("torch")
        return Path(spec.origin).parent / "nn" / "modules" if spec else None
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _version(pkg: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(pkg)
    except Exception:  # noqa: BLE001
        return None


def machine() -> dict:
    from curate.verify.machine import cpu_model
    cpu = cpu_model() or platform.processor() or platform.machine()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(),
            **{p: _version(p) for p in ("torch", "triton", "timm", "torchvision", "identify")}}


def run_target(name: str, path: Path, jobs: int | None, limit: int | None,
               sample: int | None, timeout: float, work: Path) -> dict:
    out = work / f"{name}.jsonl"
    rej = work / f"{name}.rejected.jsonl"
    src = ScrapeSource([str(path)], jobs=jobs, limit=limit, timeout=timeout,
                       cache_dir=str(work / "clones"), sample=sample)
    runner = Runner(work, ledger_path=work / f"{name}.ledger.sqlite", progress=True)
    t0 = time.monotonic()
    try:
        runner.run_source(0, src, out, rej)
    finally:
        runner.close()
    secs = time.monotonic() - t0
    kept, dropped = read_rows(out), read_rows(rej)
    reasons = Counter(r for row in dropped for r in row["reasons"] if r.startswith("scrape:"))
    info = next(iter(src.report.values()), {})
    tried = len(kept) + len(dropped)
    return {"target": name, "path": str(path), "files_scanned": info.get("files"),
            "classes_found": info.get("classes"), "classes_tried": tried,
            "runnable": len(kept), "yield": round(len(kept) / tried, 3) if tried else None,
            "reasons": dict(reasons.most_common()), "seconds": round(secs, 1),
            "classes_per_minute": round(60 * tried / secs, 1) if secs else None,
            "license": (kept or dropped or [{}])[0].get("license"),
            "sandbox": (kept or dropped or [{}])[0].get("sandbox")}


def table(results: list[dict]) -> str:
    head = f"{'target':12} {'files':>6} {'classes':>8} {'tried':>6} {'runnable':>9} " \
           f"{'yield':>6} {'seconds':>8} {'cls/min':>8}"
    lines = [head, "-" * len(head)]
    for r in results:
        lines.append(f"{r['target']:12} {r['files_scanned']:>6} {r['classes_found']:>8} "
                     f"{r['classes_tried']:>6} {r['runnable']:>9} {r['yield']:>6.1%} "
                     f"{r['seconds']:>8.1f} {r['classes_per_minute']:>8.1f}")
    for r in results:
        top = ", ".join(f"{k.removeprefix('scrape:')} {v}" for k, v in r["reasons"].items())
        lines.append(f"  {r['target']}: {top}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--targets", nargs="+", default=list(TARGETS), choices=TARGETS)
    ap.add_argument("--jobs", type=int, default=None, help="workers (default: the CPU count)")
    ap.add_argument("--limit", type=int, default=None, help="classes per target, at most")
    ap.add_argument("--sample", nargs="*", default=[], metavar="TARGET=N",
                    help="a seeded random sample of N classes of TARGET (e.g. timm=250)")
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/scrape_yield.json")
    ap.add_argument("--keep-tables", type=Path, default=None,
                    help="write the scraped tables into this folder (default: a temporary one)")
    ap.add_argument("--build", action="store_true", help="run the scrape example's build instead")
    ap.add_argument("--build-dir", type=Path, default=Path(tempfile.gettempdir()) / "curate-scrape-build")
    ap.add_argument("--device", default=None, help="the build's verify device (default: auto)")
    args = ap.parse_args(argv)
    if args.build:
        return scrape_build(args)
    samples = {k: int(v) for k, v in (s.split("=") for s in args.sample)}
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    results = []
    with tempfile.TemporaryDirectory(prefix="scrape-yield-") as tmp:
        work = args.keep_tables or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.targets:
            path = target_path(name)
            if path is None or not path.is_dir():
                print(f"{name}: not installed here, skipped", file=sys.stderr)
                continue
            results.append(run_target(name, path, args.jobs, args.limit, samples.get(name),
                                      args.timeout, work))
            results[-1]["sample"] = samples.get(name)
            print(table(results[-1:]), flush=True)
            write(args, results)  # after every target: a long run cut short keeps its figures
    print()
    print(table(results))
    print(f"wrote {args.out}")
    return 0


KEPT_KEYS = ("entry_point", "path", "license", "backend", "status", "speedup", "speedup_ci_low",
             "speedup_ci_high", "ref_ms", "kernel_ms", "gpu", "torch_version", "triton_version")


def scrape_build(args) -> int:
    """The scrape example built end to end; its stats and kept pairs, as they are at the end."""
    import shutil
    import subprocess

    from curate.tableio import read_rows
    shutil.rmtree(args.build_dir, ignore_errors=True)
    cmd = [sys.executable, "-m", "curate", "build", "--pipeline",
           str(REPO / "pipelines" / "scrape-example.yaml"), "--out", str(args.build_dir), "--quiet"]
    if args.device:
        cmd += ["--device", args.device]
    t0 = time.monotonic()
    rc = subprocess.run(cmd, cwd=REPO).returncode
    stats_file = args.build_dir / "stats.json"
    rows = [r for f in sorted((args.build_dir / "data").glob("*.parquet")) for r in read_rows(f)]
    doc = {"benchmark": "scrape_build", "machine": machine(), "exit_code": rc,
           "seconds": round(time.monotonic() - t0, 1),
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
           "stats": json.loads(stats_file.read_text()) if stats_file.is_file() else None,
           "kept": len(rows), "rows": [{k: r.get(k) for k in KEPT_KEYS} for r in rows]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"build exit {rc}, kept {len(rows)} pairs")
    for r in rows:
        print(f"  {r.get('entry_point')}: {r.get('speedup')} (low {r.get('speedup_ci_low')})")
    print(f"wrote {args.out}")
    return rc


def write(args, results: list[dict]) -> None:
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    doc = {"benchmark": "scrape_yield", "machine": machine(), "jobs": args.jobs or os.cpu_count(),
           "limit": args.limit, "timeout_s": args.timeout, "load_average_1min_at_end": load,
           "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
