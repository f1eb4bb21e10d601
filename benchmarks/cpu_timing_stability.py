"""How much a CPU speedup moves between identical `curate verify` runs, under each way of
running the timed workers: the same pairs verified R times per setting, each run a fresh
verifier (fresh processes), and per row the spread of its median speedup across runs.

    PYTHONPATH=. python benchmarks/cpu_timing_stability.py PAIRS.jsonl --repeats 3 \\
        --settings default,threads1 --out benchmarks/results/cpu_timing_stability.json

A setting is an environment for the whole run (`threads1`: OMP_NUM_THREADS=1; `default`:
what the verifier chooses). The figure that matters for `curate build --threshold` is the
worst spread, max/min of a row's speedups: a row whose speedup moves by 40% between runs flips
its keep decision whenever it lies within 40% of the threshold.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from hostile_table import environment  # noqa: E402

# glibc's allocator moves its mmap threshold with what a process freed before: the same
# temporaries come from fresh mmaps (page faults on every call) in one worker and from the heap
# in the next; fixed thresholds take that history out
MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(32 * 2**20), "MALLOC_TRIM_THRESHOLD_": str(2**30)}
SETTINGS = {
    "default": {},
    "threads1": {"OMP_NUM_THREADS": "1"},
    "threads2": {"OMP_NUM_THREADS": "2"},
    "malloc": MALLOC,
    "threads1_malloc": {"OMP_NUM_THREADS": "1", **MALLOC},
    # torch's CPU allocator asks for transparent huge pages for tensors of 2 MiB and more
    # (where the kernel's THP mode is `madvise`, nothing else gets them): a tensor's bytes
    # then lie in 2 MiB runs of physical memory, not in 4 KiB pages placed anew in each process
    "thp": {"THP_MEM_ALLOC_ENABLE": "1"},
    "nothp": {"THP_MEM_ALLOC_ENABLE": "0"},
    # glibc's heap itself on transparent huge pages (the reference's temporaries below 2 MiB
    # live there): their placement in the physically indexed caches no longer differs from one
    # process to the next
    "hugeheap": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "THP_MEM_ALLOC_ENABLE": "1"},
}
# a setting's name may end in these: the whole run under `taskset -c <last core>`, or with
# address-space randomization off (`setarch -R`: every worker's buffers at the same addresses)
PIN, NOASLR = "_pin", "_noaslr"


def verify_once(pairs: Path, setting: str, out: Path) -> tuple[dict, float]:
    env = {**os.environ, **SETTINGS[base_setting(setting)]}
    prefix = ["taskset", "-c", str(max(os.sched_getaffinity(0)))] if setting.endswith(PIN) \
        else ["setarch", platform.machine(), "-R"] if setting.endswith(NOASLR) else []
    t0 = time.monotonic()
    subprocess.run([*prefix, sys.executable, "-m", "curate", "verify", str(pairs), "-o",
                    str(out), "--device", "cpu"], check=True, cwd=ROOT, env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from curate.tableio import read_rows
    got = {}
    for r in read_rows(out):
        key = r.get("path") or r.get("entry_point") or r["id"]
        got[key] = {"status": r["status"], "speedup": r.get("speedup"),
                    "low": r.get("speedup_ci_low"), "high": r.get("speedup_ci_high"),
                    "ref_ms": r.get("ref_ms"), "kernel_ms": r.get("kernel_ms")}
    return got, time.monotonic() - t0


def base_setting(setting: str) -> str:
    return setting.removesuffix(PIN).removesuffix(NOASLR)


def spread(runs: list[dict]) -> dict:
    rows = {}
    for key in sorted(set().union(*runs)):
        sps = [r[key]["speedup"] for r in runs if r.get(key, {}).get("speedup")]
        if len(sps) == len(runs) and min(sps) > 0:
            side = {}
            for col in ("ref_ms", "kernel_ms"):  # which side moves: the reference or the kernel
                ms = [r[key].get(col) for r in runs]
                if all(ms):
                    side[col] = [round(m, 4) for m in ms]
                    side[f"{col}_max_over_min"] = round(max(ms) / min(ms), 3)
            rows[key] = {"speedups": [round(s, 3) for s in sps],
                         "lows": [round(r[key]["low"], 3) for r in runs],
                         "max_over_min": round(max(sps) / min(sps), 3), **side}
    ratios = [v["max_over_min"] for v in rows.values()]
    return {"rows": rows, "median_max_over_min": round(statistics.median(ratios), 3),
            "worst_max_over_min": round(max(ratios), 3)} if ratios else {"rows": rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pairs", type=Path)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--settings", default="default,threads1")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    report = {"environment": environment("cpu"), "pairs": str(args.pairs),
              "repeats": args.repeats, "settings": {}}
    with tempfile.TemporaryDirectory(prefix="curate-stability-") as tmp:
        # settings interleaved run by run, so a change in the machine's load hits all alike
        runs = {s: [] for s in args.settings.split(",")}
        walls = {s: [] for s in runs}
        for i in range(args.repeats):
            for s in runs:
                got, wall = verify_once(args.pairs, s, Path(tmp) / f"{s}-{i}.jsonl")
                runs[s].append(got)
                walls[s].append(round(wall, 1))
                print(f"{s} run {i + 1}: {wall:.0f}s", flush=True)
    print(f"{'setting':10s} {'median max/min':>15s} {'worst max/min':>14s}  wall s")
    for s, rs in runs.items():
        sp = spread(rs)
        report["settings"][s] = {"env": SETTINGS[base_setting(s)], "pinned": s.endswith(PIN),
                                 "aslr_off": s.endswith(NOASLR),
                                 "wall_s": walls[s], **sp}
        print(f"{s:10s} {sp.get('median_max_over_min', '-'):>15} "
              f"{sp.get('worst_max_over_min', '-'):>14}  {walls[s]}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
