"""How long `curate build` takes end to end under each executor, and when each stage worked.

    PYTHONPATH=. python benchmarks/build_kernelbench.py kernelbench [--kb DIR]
        [--executors local,ray,staged] [--device cuda] [--ray-wheels DIR] [--limit N]
        [--out JSON]
    PYTHONPATH=. python benchmarks/build_kernelbench.py pipelines [--executors local,ray]
        [--pipelines llm-replay,scrape-example] [--ray-wheels DIR] [--out JSON]

kernelbench: KernelBench levels 1-3 (--kb, else $CURATE_KERNELBENCH) through ingest, synth
inductor, dedup, verify and keep, once per executor, each a fresh `curate build` in a fresh build
directory (the compile cache of verify is kept by CURATE_CACHE_DIR per executor run, so no run
reads another's). pipelines: pipelines/llm-replay.yaml (real CUDA load_inline and Triton
candidates, answers replayed by tests/support/llmserver.py) and pipelines/scrape-example.yaml,
under each executor: rows per stage and the kept CUDA pairs with their speedups.

Each run prints the stage timeline (when each stage started, answered its first and last row,
and ended, in seconds since the build started) and the table is written as JSON with the
machine and the versions (default benchmarks/results/build_kernelbench_<gpu>.json).

The GPU machine has no network and no Ray: --ray-wheels DIR installs Ray from DIR first (made
here by `benchmarks/ray_wheel.sh 3.12 .whl_ray`: Ray's wheel trimmed to about 35 MB with its
requirements, small enough to carry in one call), with `pip install --no-index --find-links`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

STAGE_KEYS = ("name", "rows_in", "rows_out", "dropped", "cached", "statuses", "started",
              "first_row", "last_row", "ended")


def kb_pipeline(kb: Path, device: str, dest: Path, verify: dict | None = None) -> Path:
    """KernelBench L1-L3 -> inductor -> dedup (no decontamination: these are the problems) ->
    verify -> keep every verified pair at least as fast as its reference."""
    paths = json.dumps([str(kb / f"level{n}") for n in (1, 2, 3)])
    dest.write_text(f"""name: kernelbench-l1-l3
device: {device}
threshold: 1.0
source:
  ingest: {{paths: {paths}, format: kernelbench}}
steps:
  - synth-inductor: {{}}
  - dedup: {{jaccard: 0.8}}
  - verify: {json.dumps(verify or {})}
  - keep: {{}}
""")
    return dest


def run_build(pipeline: Path, out: Path, executor: str, deadline: float | None) -> dict:
    """One fresh `curate build`; its stats.json with the wall time and the exit code."""
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "CURATE_CACHE_DIR": str(out.with_name(out.name + ".cache"))}
    cmd = [sys.executable, "-m", "curate", "build", "--pipeline", str(pipeline), "--out",
           str(out), "--quiet", "--executor", executor]
    t0, t0_wall = time.monotonic(), time.time()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=deadline, capture_output=True,
                              text=True)
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-3000:]
    except subprocess.TimeoutExpired:
        rc, tail = 124, "cut at the deadline"
    wall = round(time.monotonic() - t0, 1)
    stats_file = out / "stats.json"
    stats = json.loads(stats_file.read_text()) if rc == 0 and stats_file.is_file() else {}
    return {"executor": executor, "exit": rc, "wall_s": wall, "stats": stats,
            "output_tail": tail if rc else None,
            "ledger": ledger_progress(out, t0_wall)}


def ledger_progress(out: Path, started: float) -> dict:
    """Where a build that did not finish had got to: per step of its ledger, the rows finished
    and when the first and the last of them finished (seconds since the build started)."""
    from curate.pipeline.ledger import Ledger
    path = out / "ledger.sqlite"
    if not path.is_file():
        return {}
    ledger = Ledger(path)
    try:
        steps = ledger.progress()
        phases = verify_phases(ledger)
        memory = verify_memory(ledger)
    finally:
        ledger.close()
    out = {step: {"rows": n, "first_row": round(lo - started, 1),
                  "last_row": round(hi - started, 1)} for step, (n, lo, hi) in steps.items()}
    if phases:
        out["verify_phases_s"] = phases
    if memory:
        out["verify_memory"] = memory
    return out


def verified_records(ledger):
    from curate.verify.record import read
    for (outcome,) in ledger.db.execute(
            "SELECT outcome FROM results WHERE step LIKE 'verify%'"):
        for row in json.loads(outcome).get("kept") or []:
            yield row, read(row.get("verification")) or {}


def verify_memory(ledger) -> dict:
    """What the finished verify rows reserved on the GPU against what their two workers held
    at their peaks (allocator reserved), the largest rows first: the figures that calibrate
    `row_memory_gb`."""
    rows = []
    for row, rec in verified_records(ledger):
        m = rec.get("memory") or {}
        peaks = [m.get("candidate_peak_reserved_gb"), m.get("judge_peak_reserved_gb")]
        if m.get("reserved_gb") is None or None in peaks:
            continue
        size = m.get("size_gb") or {}
        rows.append({"id": str(row.get("id"))[:12], "status": row.get("status"),
                     "inputs_gb": size.get("inputs"), "outputs_gb": size.get("outputs"),
                     "params_gb": size.get("params"), "reserved_gb": m["reserved_gb"],
                     "candidate_gb": peaks[0], "judge_gb": peaks[1],
                     "held_over_reserved": round(sum(peaks) / m["reserved_gb"], 3)})
    if not rows:
        return {}
    rows.sort(key=lambda r: -r["reserved_gb"])
    ratios = sorted(r["held_over_reserved"] for r in rows)
    return {"rows": len(rows), "held_over_reserved_max": ratios[-1],
            "held_over_reserved_median": ratios[len(ratios) // 2],
            "reserved_gb_total": round(sum(r["reserved_gb"] for r in rows), 1),
            "held_gb_total": round(sum(r["candidate_gb"] + r["judge_gb"] for r in rows), 1),
            "largest": rows[:25]}


def verify_phases(ledger) -> dict:
    """Seconds the verify rows finished so far spent per phase, summed over rows (from each
    row's record): where verify's time went in a build that did not finish."""
    total: dict[str, float] = {}
    rows = 0
    for _, rec in verified_records(ledger):
        phases = dict(rec.get("phases_s") or {})
        rows += bool(phases)
        for side, work in (rec.get("work_s") or {}).items():   # inside the workers' requests
            phases.update({f"{side} work: {k}": v for k, v in (work or {}).items()})
        for name, s in phases.items():
            total[name] = total.get(name, 0.0) + s
    if not rows:
        return {}
    return {"rows": rows, **{k: round(v, 1) for k, v in sorted(total.items(), key=lambda kv: -kv[1])}}


def timeline(run: dict) -> list[dict]:
    return [{k: s.get(k) for k in STAGE_KEYS} for s in run["stats"].get("stages", [])]


def show(run: dict) -> None:
    st = run["stats"]
    print(f"\n== {run.get('pipeline', '')} executor={run['executor']} exit={run['exit']} "
          f"wall={run['wall_s']}s build={st.get('seconds')}s kept={st.get('kept')}")
    if run["exit"]:
        print(run.get("output_tail") or "")
        return
    print(f"{'stage':<16}{'in':>6}{'out':>6}{'drop':>6}{'start':>8}{'first':>8}{'last':>8}"
          f"{'end':>8}")
    for s in timeline(run):
        cells = [f"{s[k]:>8.1f}" if isinstance(s[k], (int, float)) else f"{'-':>8}"
                 for k in ("started", "first_row", "last_row", "ended")]
        print(f"{s['name']:<16}{s['rows_in']:>6}{s['rows_out']:>6}{s['dropped']:>6}"
              + "".join(cells))
    for p in run.get("cuda_pairs", [])[:40]:
        print(f"  kept {p['backend']:<6} {p['problem']:<36} speedup {p['speedup']:.2f}x "
              f"(95% low {p['ci_low']:.2f})")


def kept_pairs(build: Path) -> list[dict]:
    from curate.tableio import read_rows
    rows = [r for p in sorted((build / "data").glob("*.parquet")) for r in read_rows(p)]
    pairs = [{"problem": Path(r.get("path") or r.get("entry_point") or "?").stem,
              "backend": r.get("backend"), "speedup": r.get("speedup") or 0.0,
              "ci_low": r.get("speedup_ci_low") or 0.0} for r in rows]
    return sorted(pairs, key=lambda p: -p["speedup"])


def install_ray(wheels: str | None) -> str | None:
    try:
        import ray
        return ray.__version__
    except ImportError:
        pass
    if not wheels:
        return None
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    wheels, "ray"], check=True)
    out = subprocess.run([sys.executable, "-c", "import ray; print(ray.__version__)"],
                         capture_output=True, text=True)
    return out.stdout.strip() or None


def machine() -> dict:
    from llm_replay import machine as llm_machine, versions
    info = {**llm_machine(), **versions(), "cpus": os.cpu_count(),
            "platform": platform.platform()}
    from curate import __version__
    info["curate"] = __version__
    return info


def kernelbench_main(args, work: Path, save) -> list[dict]:
    from curate.sources.locate import kernelbench_path
    kb = Path(args.kb or kernelbench_path() or "")  # $CURATE_KERNELBENCH, ../shared/data/...
    if not (kb / "level1").is_dir():
        sys.exit("needs KernelBench: --kb DIR or CURATE_KERNELBENCH (a folder with level1/)")
    if args.limit:  # the first N problems of each level (a quick check of the set-up)
        kb = subset(kb, args.limit, work / "kb-subset")
    pipe = kb_pipeline(kb, args.device, work / "kernelbench.yaml", args.verify)
    runs = []
    for ex in args.executors:
        run = run_build(pipe, work / f"kb-{ex}", ex, args.deadline)
        run["pipeline"] = "kernelbench-l1-l3"
        runs.append(run)
        show(run)
        save(runs)
    return runs


def subset(kb: Path, n: int, dest: Path) -> Path:
    import shutil
    for level in ("level1", "level2", "level3"):
        (dest / level).mkdir(parents=True, exist_ok=True)
        files = sorted((kb / level).glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
        for f in files[:n]:
            shutil.copy(f, dest / level / f.name)
    return dest


def pipelines_main(args, work: Path, save) -> list[dict]:
    from llm_replay import _serve
    runs = []
    server = _serve(8011)
    try:
        for name in args.pipelines:
            for ex in args.executors:
                out = work / f"{name}-{ex}"
                run = run_build(ROOT / "pipelines" / f"{name}.yaml", out, ex, args.deadline)
                run["pipeline"] = name
                if run["exit"] == 0:
                    run["cuda_pairs"] = [p for p in kept_pairs(out) if p["backend"] == "cuda"]
                    run["kept_by_backend"] = _count(p["backend"] for p in kept_pairs(out))
                runs.append(run)
                show(run)
                save(runs)
    finally:
        server.kill()
    return runs


def _count(items) -> dict:
    out: dict = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def summary(runs: list[dict]) -> list[dict]:
    return [{"pipeline": r.get("pipeline"), "executor": r["executor"], "exit": r["exit"],
             "wall_s": r["wall_s"], "build_s": r["stats"].get("seconds"),
             "kept": r["stats"].get("kept"), "timeline": timeline(r),
             "kept_by_backend": r.get("kept_by_backend"), "cuda_pairs": r.get("cuda_pairs"),
             "unfinished": r.get("ledger")}
            for r in runs]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("mode", choices=["kernelbench", "pipelines"])
    ap.add_argument("--kb", default=None, help="KernelBench folder (default $CURATE_KERNELBENCH)")
    ap.add_argument("--executors", default="local,ray", type=lambda s: s.split(","))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--pipelines", default="llm-replay,scrape-example",
                    type=lambda s: s.split(","), help="pipelines: which of pipelines/*.yaml")
    ap.add_argument("--limit", type=int, default=None,
                    help="kernelbench: the first N problems of each level only")
    ap.add_argument("--verify", type=json.loads, default=None,
                    help='the verify step\'s options as JSON, e.g. \'{"workers": 12}\'')
    ap.add_argument("--deadline", type=float, default=None, help="seconds each build may take")
    ap.add_argument("--ray-wheels", default=None, help="install Ray from this folder first")
    ap.add_argument("--work", default=None, help="build folders (default: a temporary one)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    ray_version = install_ray(args.ray_wheels)
    if "ray" in args.executors and ray_version is None:
        print("Ray is not installed (pass --ray-wheels DIR): the ray runs are left out")
        args.executors = [e for e in args.executors if e != "ray"]
    work = Path(args.work or tempfile.mkdtemp(prefix="curate-build-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    info = machine()
    tag = (info.get("gpu") or "cpu").lower().replace("nvidia", "").strip().replace(" ", "-")
    out = Path(args.out or ROOT / "benchmarks" / "results" /
               f"build_{args.mode}_{tag}.json")

    def save(runs: list[dict]) -> None:
        """The result so far, rewritten after each build: a run cut at its limit keeps it."""
        out.write_text(json.dumps({"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                   "mode": args.mode, "machine": info, "ray": ray_version,
                                   "runs": summary(runs)}, indent=1, default=str))

    runs = kernelbench_main(args, work, save) if args.mode == "kernelbench" else \
        pipelines_main(args, work, save)
    print(f"\nwrote {out}")
    return 0 if all(r["exit"] == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
