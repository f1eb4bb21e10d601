"""How many KernelBench problems become standalone inductor candidates, and how many of those
reproduce the reference on their own.

    PYTHONPATH=. python benchmarks/synth_kernelbench.py [--kb DIR] [--device cuda|cpu]
        [--workers N] [--check-workers N] [--timeout S] [--deadline S] [--out JSON]

1. synth: every level 1-3 problem through InductorSynth (sandboxed workers, fresh caches).
2. check: every candidate run on its own in a sandboxed worker (curate.synth.check: separate
   modules for reference and candidate, same seed, KernelBench's own shapes), outputs compared
   with torch.allclose(atol, rtol) (default 1e-2 / 1e-2; KernelBench problems are fp32).
   Problems that ran out of GPU memory because several ran at once are retried with fewer
   workers while time remains.
Prints a table per level and writes JSON with the GPU and the torch/triton/CUDA versions.
Problems not reached before --deadline are counted as `not_reached`, never as failures.
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
sys.path.insert(0, str(ROOT))


def env_info(device: str) -> dict:
    import torch
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
            "cpus": os.cpu_count(), "machine": platform.machine()}
    try:
        import triton
        info["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        info["triton"] = None
    if device == "cuda" and torch.cuda.is_available():
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpu_memory_gb"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    return info


def load_problems(kb: Path) -> list[dict]:
    from curate.record import content_hash, new_record
    rows = []
    for level in ("level1", "level2", "level3"):
        files = sorted(Path(kb, level).glob("*.py"), key=lambda p: int(p.name.split("_")[0]))
        for f in files:
            code = f.read_text()
            rows.append(new_record(id=content_hash(code), pytorch_code=code, source="kernelbench",
                                   path=f"{level}/{f.name}"))
    # levels interleaved, so that a deadline leaves every level equally sampled
    order = {lv: 0 for lv in ("level1", "level2", "level3")}
    keyed = []
    for r in rows:
        lv = r["path"].split("/")[0]
        keyed.append((order[lv], lv, r))
        order[lv] += 1
    return [r for _, _, r in sorted(keyed, key=lambda t: (t[0], t[1]))]


def synth_pass(rows, device, workers, timeout, not_after, results):
    from curate.synth.inductor import InductorSynth
    step = InductorSynth(device=device, workers=workers, timeout=timeout)
    step.not_after = not_after
    step.setup()
    cands = {}
    try:
        for i, outcome in step.process(rows):
            path = rows[i]["path"]
            res = results[path]
            res["synth_seconds"] = round(step._seconds[-1], 2)
            if outcome.kept:
                cands[path] = outcome.kept[0]
                res["synth"] = "candidate"
                res["reasons"] = outcome.kept[0]["reasons"]
            else:
                res["synth"] = "dropped"
                res["reasons"] = outcome.reasons
                res["error"] = (outcome.dropped.get("error") or "")[:300]
            print(f"[{time.time() - T0:6.1f}s] synth {path}: {res['synth']} {res['reasons']} "
                  f"{res['synth_seconds']}s", flush=True)
    finally:
        step.teardown()
    return cands


def check_pass(cands: dict, device, workers, atol, rtol, not_after, results, timeout):
    from curate.isolation import Limits, WorkerPool
    env = {"TRITON_INTERPRET": "1"} if device == "cpu" else {}
    paths = list(cands)
    tasks = [{"pytorch_code": cands[p]["pytorch_code"], "kernel_code": cands[p]["kernel_code"],
              "device": device, "atol": atol, "rtol": rtol, "not_after": not_after, "index": i}
             for i, p in enumerate(paths)]
    with WorkerPool("curate.synth.check:handle", setup="curate.synth.check:setup",
                    workers=workers, timeout=timeout, env=env,
                    limits=Limits(isolate_network=False), max_tasks_per_worker=25) as pool:
        for i, r in pool.map(tasks):
            res = results[paths[i]]
            if r.ok:
                v = r.value
                res["check"] = v.get("status")
                res["max_abs_err"] = v.get("max_abs_err")
                if v.get("error"):
                    res["check_error"] = v["error"][:300]
            else:
                res["check"] = r.status
                res["check_error"] = (r.error or r.output or "")[-300:]
            res["check_seconds"] = round(r.seconds, 2)
            print(f"[{time.time() - T0:6.1f}s] check {paths[i]}: {res['check']} "
                  f"{res.get('max_abs_err')}", flush=True)


def summarize(results: dict) -> dict:
    levels = collections.defaultdict(lambda: collections.Counter())
    reasons = collections.defaultdict(collections.Counter)
    secs = collections.defaultdict(list)
    for path, r in results.items():
        lv = path.split("/")[0]
        for key in (lv, "all"):
            c = levels[key]
            c["problems"] += 1
            if r.get("synth") == "candidate":
                c["candidates"] += 1
                if r.get("check") == "ok":
                    c["reproduce"] += 1
                elif r.get("check") in (None, "skipped_deadline"):
                    c["not_checked"] += 1
                else:
                    reasons[key][f"check:{r.get('check')}"] += 1
            elif r.get("synth") == "dropped":
                rs = [x for x in r["reasons"] if x.startswith("synth:")] or r["reasons"]
                if rs and rs[0] == "synth:skipped_deadline":
                    c["not_reached"] += 1
                else:
                    for x in rs[:1]:
                        reasons[key][x] += 1
            else:
                c["not_reached"] += 1
            if r.get("synth_seconds") and r.get("synth") and "synth:skipped_deadline" not in \
                    r.get("reasons", []):
                secs[key].append(r["synth_seconds"])
        for x in r.get("reasons", []):
            if x.startswith("extern_kernels:") and r.get("synth") == "candidate":
                reasons["extern"][x] += 1
    out = {}
    for key, c in levels.items():
        s = secs[key]
        out[key] = {**dict(c), "reasons": dict(reasons[key].most_common()),
                    "synth_seconds_median": round(statistics.median(s), 2) if s else None,
                    "synth_seconds_mean": round(statistics.mean(s), 2) if s else None}
    out["candidates_using_extern_kernels"] = dict(reasons["extern"])
    return out


def print_table(summary: dict) -> None:
    cols = ["problems", "candidates", "reproduce", "not_checked", "not_reached"]
    print(f"{'level':8s}" + "".join(f"{c:>13s}" for c in cols) + f"{'s/problem':>11s}")
    for key in ("level1", "level2", "level3", "all"):
        if key not in summary:
            continue
        row = summary[key]
        print(f"{key:8s}" + "".join(f"{row.get(c, 0):>13d}" for c in cols)
              + f"{(row.get('synth_seconds_median') or 0):>11.1f}")
    for key in ("level1", "level2", "level3"):
        if key in summary and summary[key]["reasons"]:
            print(f"  {key} dropped/failed: {summary[key]['reasons']}")
    print(f"  extern kernels in candidates: {summary.get('candidates_using_extern_kernels')}")


T0 = time.time()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", default=os.environ.get("CURATE_KERNELBENCH",
                                                   str(ROOT.parent / "shared/data/kernelbench")))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int, default=10)
    ap.add_argument("--check-workers", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=90)
    ap.add_argument("--deadline", type=float, default=200, help="seconds for the whole run")
    ap.add_argument("--synth-share", type=float, default=0.55,
                    help="part of the deadline for the synth pass (then the checks)")
    ap.add_argument("--atol", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=1e-2)
    ap.add_argument("--limit", type=int, default=0, help="first N problems only (smoke runs)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/synth_kernelbench.json"))
    ap.add_argument("--table", default=None,
                    help="also write the candidates (a table for verify or hostile_table.py)")
    a = ap.parse_args()
    rows = load_problems(Path(a.kb))
    if a.limit:
        rows = rows[:a.limit]
    results = {r["path"]: {} for r in rows}
    end = T0 + a.deadline
    synth_end = T0 + a.deadline * a.synth_share
    cands = synth_pass(rows, a.device, a.workers, a.timeout, synth_end, results)
    oom = [r for r in rows if "synth:oom" in results[r["path"]].get("reasons", [])]
    if oom and time.time() < synth_end:
        cands.update(synth_pass(oom, a.device, 2, a.timeout, synth_end, results))
    if a.table and cands:
        from curate.tableio import write_rows
        write_rows(a.table, list(cands.values()))
        print(f"wrote {len(cands)} candidates to {a.table}", flush=True)
    if cands:
        check_pass(cands, a.device, a.check_workers, a.atol, a.rtol, end - 10, results, a.timeout)
        again = {p: c for p, c in cands.items() if results[p].get("check") == "oom"}
        if again and time.time() < end - 20:
            check_pass(again, a.device, 1, a.atol, a.rtol, end - 10, results, a.timeout)
    summary = summarize(results)
    print_table(summary)
    doc = {"benchmark": "synth_kernelbench", "env": env_info(a.device),
           "settings": {"device": a.device, "workers": a.workers, "check_workers": a.check_workers,
                        "timeout_s": a.timeout, "deadline_s": a.deadline, "atol": a.atol,
                        "rtol": a.rtol, "mode": "default", "levels": [1, 2, 3],
                        "shapes": "KernelBench's own get_inputs()"},
           "wall_seconds": round(time.time() - T0, 1), "summary": summary, "problems": results}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1, default=str))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
