"""Every GPU benchmark in order on one GPU host, each under a time limit of its own.

    PYTHONPATH=. python benchmarks/gpu_all.py --kernelbench KB --out /tmp/gpu-results
    PYTHONPATH=. python benchmarks/gpu_all.py --only hostile,build --limit-s 300

Each benchmark writes its result as `<name>_<device>.json` (the stable names of
benchmarks/results/) and its output as `<name>.log` under --out as soon as it ends, so that a run
cut short keeps what finished; a table (status, seconds, headline figure) is printed at the end
and written to gpu_all.json. Benchmarks that need KernelBench (--kernelbench, or the
CURATE_KERNELBENCH environment variable) are skipped without it, and say so. Copy the results
you keep into benchmarks/results/ and update INDEX.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


@dataclass
class Bench:
    name: str
    args: list[str]             # {out}: the result file, {kb}: KernelBench, {dir}: --out,
    #                             {tag}: the device's tag (h200), a result's stable-name suffix,
    #                             {work}: --work (build folders: thousands of files, kept apart)
    limit_s: int                # default limit; --limit-s overrides every one
    needs_kb: bool = False
    headline: str = ""          # dotted paths into the result JSON, comma-separated
    extra: dict = field(default_factory=dict)


# KernelBench problems of 2-8 GB of inputs or outputs in verify_throughput's seeded sample
LARGEST = ("19_ReLU,92_cumsum_exclusive,2_ConvTranspose2d_BiasAdd,86_conv_depthwise_separable,"
           "53_Min_reduction,82_conv_depthwise,41_Max_Pooling_1D,100_HingeLoss")

BENCHES = [
    # each worker's peak against the reservation rule (row.row_memory_gb), first: the figures
    # that rule is calibrated from
    Bench("row_memory", ["benchmarks/row_memory.py", "--device", "cuda", "--mib", "256,1024,3072",
                         "--out", "{out}"], 240, headline="rows"),
    # the digest every timed call pays inside the parent's clock, at 8- and 4-byte words
    Bench("digest_cost", ["benchmarks/digest_cost.py", "--device", "cuda", "--mib",
                          "0.0625,16,256,2048", "--out", "{out}"], 60, headline="rows"),
    # what the clock charges honest rows for the candidate's own harness, gates on and off
    Bench("harness_gap", ["benchmarks/harness_gap.py", "--device", "cuda", "--repeat", "2",
                          "--out", "{out}"], 240, headline="summary"),
    Bench("gpu_tests", ["-m", "pytest", "-v", "-m", "gpu", "-n", "4", "-p", "no:cacheprovider",
                        "--durations=0", "--junitxml", "{dir}/gpu_tests.xml", "tests/"], 300),
    Bench("hostile", ["benchmarks/hostile_table.py", "--device", "cuda", "--out", "{out}"], 300,
          headline="fixture_counts"),
    Bench("hostile_mix", ["benchmarks/hostile_table.py", "--mix", "--device", "cuda",
                          "--kernelbench", "{kb}", "--n", "40", "--pairs-cache",
                          "{dir}/kb_pairs.jsonl", "--out", "{out}"], 540, needs_kb=True,
          headline="summary.honest_same_status,summary.honest,summary.hostile_rejected,"
                   "summary.hostile,summary.mixed_over_solo"),
    Bench("synth_kernelbench", ["benchmarks/synth_kernelbench.py", "--kb", "{kb}", "--device",
                                "cuda", "--deadline", "{deadline}", "--table",
                                "{dir}/kb_candidates.parquet", "--out", "{out}"], 600,
          needs_kb=True, headline="summary"),
    Bench("gates_fp", ["benchmarks/hostile_table.py", "--device", "cuda", "--skip-fixtures",
                       "--candidates", "{dir}/kb_candidates.parquet", "--out", "{out}"], 570,
          needs_kb=True, headline="candidates.rows,candidates.false_positive_rate"),
    Bench("verify_throughput", ["benchmarks/verify_throughput.py", "--kernelbench", "{kb}",
                                "--device", "cuda", "--n", "70", "--serial", "15",
                                "--timeout", "60",
                                "--deadline", "{deadline}", "--sandbox", "auto",
                                "--pairs-out", "{dir}/tp_pairs.jsonl", "--out", "{out}"], 600,
          needs_kb=True, headline="figures"),
    # the run's own rows through each memory admission rule (simulated time, on the CPU)
    Bench("schedule_replay", ["benchmarks/schedule_replay.py", "--run",
                              "{dir}/verify_throughput_{tag}.json", "--out", "{out}"], 120,
          headline="replays"),
    Bench("second_shape", ["benchmarks/second_shape.py", "--device", "cuda", "--kernelbench",
                           "{kb}", "--n", "20", "--pairs", "{dir}/tp_pairs.jsonl", "--ab",
                           "identity", "--out", "{out}"], 540, needs_kb=True,
          headline="false_positives,honest_checked,sets.identity.cost_share,"
                   "sets.identity.wall_cost,sets.inductor.cost_share"),
    # whether rows in flight bound verify: the same pairs with 12 worker pairs instead of 8
    Bench("verify_throughput_w12", [
        "benchmarks/verify_throughput.py", "--kernelbench", "{kb}", "--device", "cuda",
        "--pairs", "{dir}/tp_pairs.jsonl", "--runs", "1", "--serial", "0", "--workers", "12",
        "--timeout", "60", "--deadline", "{deadline}", "--out", "{out}"], 300, needs_kb=True,
          headline="figures"),
    # what held each worker's memory at its peak (CURATE_MEMORY_TRACE=1: allocator traces, by
    # the line of curate that allocated), on the largest problems of the same pairs
    Bench("memory_trace", [
        "benchmarks/verify_throughput.py", "--device", "cuda", "--pairs", "{dir}/tp_pairs.jsonl",
        "--runs", "1", "--serial", "0", "--only", LARGEST, "--out", "{out}"], 180,
          extra={"env": {"CURATE_MEMORY_TRACE": "1"}}, headline="figures"),
    # the binding digest's cost: the same pairs, timed batches committing with the tree digest
    Bench("verify_throughput_tree", [
        "benchmarks/verify_throughput.py", "--kernelbench", "{kb}", "--device", "cuda",
        "--pairs", "{dir}/tp_pairs.jsonl", "--runs", "1", "--serial", "0", "--digest", "tree",
        "--timeout", "60", "--out", "{out}"], 300, needs_kb=True, headline="figures"),
    # the sandbox's cost: the same pairs with the sandbox off (compare with verify_throughput)
    Bench("verify_throughput_sandbox_off", [
        "benchmarks/verify_throughput.py", "--kernelbench", "{kb}", "--device", "cuda",
        "--pairs", "{dir}/tp_pairs.jsonl", "--runs", "1", "--serial", "0", "--sandbox", "off",
        "--out", "{out}"], 300, needs_kb=True, headline="figures"),
    Bench("build", ["-m", "curate", "build", "--threshold", "2.0", "--device", "cuda",
                    "--out", "{work}/build", "--quiet"], 600,
          extra={"copy": "build/stats.json"}, headline="stats.kept,stats.seconds"),
    # every verified row of that build replayed from its record: do then and now agree?
    Bench("replay_agreement", ["benchmarks/replay_agreement.py", "--device", "cuda", "--build",
                               "{work}/build", "--out", "{out}"], 300, headline="summary"),
    Bench("llm_replay_build", ["benchmarks/llm_replay.py", "build", "--build-dir",
                               "{work}/llm-replay", "--deadline", "{deadline}", "--out", "{out}"],
          600, headline="kept,verify_statuses"),
    Bench("llm_replay_verify", ["benchmarks/llm_replay.py", "verify", "--device", "cuda",
                                "--out", "{out}"], 600, headline="verdicts"),
    # the streaming build and the Ray build of KernelBench L1-L3, then the shipped pipelines under
    # both executors (build_kernelbench.py; Ray from the wheels of benchmarks/ray_wheel.sh)
    Bench("build_kb_local", ["benchmarks/build_kernelbench.py", "kernelbench", "--kb", "{kb}",
                             "--executors", "local", "--deadline", "{deadline}",
                             "--work", "{work}/kb-builds", "--out", "{out}"], 600,
          needs_kb=True, headline="runs"),
    Bench("build_kb_ray", ["benchmarks/build_kernelbench.py", "kernelbench", "--kb", "{kb}",
                           "--executors", "ray", "--ray-wheels", "{wheels}",
                           "--deadline", "{deadline}", "--work", "{work}/kb-builds",
                           "--out", "{out}"], 600, needs_kb=True, headline="runs"),
    Bench("build_pipelines", ["benchmarks/build_kernelbench.py", "pipelines", "--ray-wheels",
                              "{wheels}", "--work", "{work}/pipeline-builds", "--out", "{out}"],
          600, headline="runs"),
    Bench("scrape_build", ["benchmarks/scrape_yield.py", "--build", "--device", "cuda",
                           "--build-dir", "{work}/scrape-build", "--out", "{out}"], 600,
          headline="kept,seconds"),
]


def device_tag() -> str:
    """'NVIDIA H200' -> 'h200': the machine part of a result's stable name."""
    try:
        import torch
        name = torch.cuda.get_device_name(0)
    except Exception:  # noqa: BLE001 - no GPU here: the benchmarks will say so themselves
        return "nogpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower().replace("nvidia", "")).strip("-") or "gpu"


def headline(result: Path, paths: str) -> str:
    """The figures a benchmark is read for, from its result JSON."""
    if not paths or not result.is_file():
        return ""
    try:
        doc = json.loads(result.read_text())
    except (OSError, json.JSONDecodeError):
        return "unreadable result"
    out = []
    for path in paths.split(","):
        v = doc
        for key in path.split("."):
            v = v.get(key) if isinstance(v, dict) else None
        out.append(f"{path.split('.')[-1]}={json.dumps(v, default=str)[:120]}")
    return "; ".join(out)


def build_rows(build: Path) -> list[dict]:
    """Each verified-stage row of a build by its source file: which example ended how."""
    import pyarrow.parquet as pq
    stages = sorted(build.glob("stages/*-verify.parquet"))   # not its .rejected table
    if not stages:
        return []
    keys = ("path", "status", "speedup", "speedup_ci_low", "ref_ms", "kernel_ms", "reasons")
    return [{**{k: r.get(k) for k in keys}, "timing": _timing(r.get("verification"))}
            for r in pq.read_table(stages[-1]).to_pylist()]


def _timing(record) -> dict | None:
    """How a row was timed and what the parent's clock saw (from its verification record):
    enough to tell the harness's cost from the kernel's when a figure moves between builds."""
    try:
        t = (json.loads(record) if isinstance(record, str) else record or {}).get("timing")
    except (ValueError, AttributeError):
        return None
    if not t:
        return None
    check = t.get("check") or {}
    return {**{k: t.get(k) for k in ("rounds", "per_batch", "fetched", "harness_ms")},
            **{k: check.get(k) for k in ("reported_ms", "wall_ms", "overhead_ms",
                                         "overhead_spread_ms", "credited_factor")},
            "harness_ms_per_call": check.get("harness_ms_per_call")}


def _archive(out_dir: Path, archive: Path) -> None:
    """Every result and log under --out in one file (build folders' tables left out), for hosts
    that hand back only a few files; rewritten after each benchmark."""
    import tarfile
    tmp = archive.with_suffix(".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in sorted(out_dir.glob("*")):
            if f.is_file() and f.suffix in (".json", ".log", ".xml", ".txt"):
                tar.add(f, arcname=f.name)
    tmp.replace(archive)


def run_one(b: Bench, out_dir: Path, tag: str, kb: str | None, limit: int,
            work: Path) -> dict:
    result = out_dir / f"{b.name}_{tag}.json"
    if b.needs_kb and not kb:
        return {"name": b.name, "status": "skipped: needs --kernelbench", "seconds": 0}
    deadline = str(max(30, limit - 30))  # the benchmark's own deadline, before the hard limit
    wheels = os.environ.get("CURATE_RAY_WHEELS", str(ROOT / ".whl_ray"))
    args = [a.format(out=result, kb=kb, dir=out_dir, work=work, deadline=deadline,
                     wheels=wheels, tag=tag)
            for a in b.args]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           # tests/conftest.py writes each failure here as it happens (a cut run keeps them)
           "CURATE_TEST_FAILURES": str(out_dir / f"{b.name}_failures.txt"),
           **b.extra.get("env", {})}
    t0 = time.monotonic()
    with open(out_dir / f"{b.name}.log", "w") as log:
        # a session of its own: at the limit, the benchmark goes with every worker it started
        proc = subprocess.Popen([PY, *args], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = proc.wait(timeout=limit)
            status = "ok" if rc == 0 else f"exit {rc}"
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            status = f"cut at {limit}s"
    if b.extra.get("copy") and (work / b.extra["copy"]).is_file():
        doc = {"stats": json.loads((work / b.extra["copy"]).read_text()),
               "rows": build_rows(work / Path(b.extra["copy"]).parent)}
        result.write_text(json.dumps(doc, indent=1, default=str))
    return {"name": b.name, "status": status, "seconds": round(time.monotonic() - t0, 1),
            "result": str(result) if result.is_file() else None,
            "headline": headline(result, b.headline)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "gpu")
    ap.add_argument("--only", default=None,
                    help="comma-separated names, in the order given (default: all): "
                         + ", ".join(b.name for b in BENCHES))
    ap.add_argument("--limit-s", type=int, default=None,
                    help="seconds each benchmark may take (default: each one's own)")
    ap.add_argument("--kernelbench", default=os.environ.get("CURATE_KERNELBENCH"))
    ap.add_argument("--device-tag", default=None, help="default: from the GPU's name (h200)")
    ap.add_argument("--work", type=Path, default=None,
                    help="where builds write their folders (default: a new temporary folder, "
                         "not under --out: a GPU host hands back a bounded number of files)")
    ap.add_argument("--archive", type=Path, default=None,
                    help="also keep every result and log in this .tar.gz, rewritten as each "
                         "benchmark ends")
    args = ap.parse_args(argv)
    by_name = {b.name: b for b in BENCHES}
    names = args.only.split(",") if args.only else list(by_name)
    unknown = [n for n in names if n not in by_name]
    if unknown:
        ap.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(by_name)}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = args.work or Path(tempfile.mkdtemp(prefix="curate-gpu-work-"))
    work.mkdir(parents=True, exist_ok=True)
    tag = args.device_tag or device_tag()
    rows = []
    for name in names:
        b = by_name[name]
        print(f"== {name} ({args.limit_s or b.limit_s}s at most)", flush=True)
        rows.append(run_one(b, args.out, tag, args.kernelbench, args.limit_s or b.limit_s,
                            work))
        print(f"   {rows[-1]['status']} in {rows[-1]['seconds']}s", flush=True)
        (args.out / "gpu_all.json").write_text(json.dumps(
            {"device": tag, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
             "runs": rows}, indent=1))
        if args.archive:
            _archive(args.out, args.archive)
    w = max(len(r["name"]) for r in rows)
    print(f"\n{'benchmark':<{w}}  {'status':<28} {'seconds':>8}  headline")
    for r in rows:
        print(f"{r['name']:<{w}}  {r['status']:<28} {r['seconds']:>8}  {r.get('headline') or ''}")
    return 0 if all(r["status"] in ("ok",) or r["status"].startswith("skipped")
                    for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
