"""Verify's memory scheduling replayed from a GPU run's own rows, on any machine: how long the
same rows would take under each admission rule, at each device's memory.

    PYTHONPATH=. python benchmarks/schedule_replay.py \
        --run benchmarks/results/verify_throughput_h100-80gb-hbm3.json \
        --out benchmarks/results/schedule_replay_cpu.json

A verify_throughput result holds, per row, the seconds of every phase and the reference's sizes.
Each row is replayed through the real `MemoryGate` (curate.verify.scheduler) in simulated time:
its reservation from today's rules (row.row_memory_gb, row.load_memory_gb), its phases taken as
measured (worker starts and loads, then the rest; compile ahead and waits left out). Rules:

- `whole`: a row holds its whole estimate from before its workers start (curate before the
  row grew after its load);
- `grow`: a row enters with its load's memory and grows to its estimate after the load;
- `grow_peaks`: as `grow`, with each row's estimate replaced by what its two workers really
  held at their peaks in the run (plus the slack and the base): what a perfect estimate could
  give, not a rule curate has; `grow_peaks_x0.6`: the same with every peak at 0.6 of itself
  (workers that hold fewer copies of the inputs and outputs).
- `..._waits` (`grow_waits`, `grow_peaks_x0.6_waits`): the same, with the waits a row spends
  holding its memory added to its phases as measured (waiting for the device behind timed
  batches, waiting to time): what the rule gives on the run's own device contention.
- `grow_shrink_waits`: as `grow_waits`, and once its correctness phases are done a row gives
  back all but what its two workers held at their peaks in the timed rounds (plus the slack and
  the base; runs that record `peak_by_request_gb` only): what the timed rounds, which hold
  each side's inputs and outputs about once, need of a reservation sized for the correctness
  calls' peaks. Not a rule curate has.

Rows whose estimate fills the device run alone at the end, as the engine runs them. What this
cannot show: how the phases themselves change with more rows at once (the device gate, the
CPU cores) or on another GPU. It is a comparison of rules on measured rows, not a GPU figure;
the `measured` line gives the run's own wall time beside the replay of its rule.
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.verify_throughput import hardware, save_result  # noqa: E402
from curate.verify.row import (  # noqa: E402
    ROW_MEMORY_BASE_GB, ROW_MEMORY_SLACK, load_memory_gb, row_memory_gb)
from curate.verify.config import VerifyConfig  # noqa: E402
from curate.verify.correctness import side_by_side  # noqa: E402
from curate.verify.scheduler import GPU_SHARE, MemoryGate  # noqa: E402

# device memory as torch reports it (GiB), times GPU_SHARE: what the memory gate holds
DEVICES = {"h100-80gb": 79.2, "h200": 139.8}
LOAD_PHASES = ("starting the candidate worker", "starting the judge worker", "candidate load",
               "judge load")
LEFT_OUT = ("compile compile", "compiling ahead")   # ahead, in the compile pool
HELD_WAITS = ("waiting for the device", "waiting to time")   # waits while holding memory
# the phases of the timed rounds. The candidate's calls, correctness and timed alike, count
# with correctness (erring towards holding the whole reservation); the waits a row spends
# holding its memory count with the timed rounds, though correctness requests wait behind
# timed batches too (erring towards giving it back earlier, so towards a larger gain)
TIMED_PHASES = ("timing", "judge calls", "candidate finish", "judge finish", "ending workers")
RULES = ("whole", "grow", "grow_waits", "grow_peaks", "grow_peaks_x0.6",
         "grow_peaks_x0.6_waits", "grow_shrink_waits")


def rows_of(run: dict) -> list[dict]:
    """Each row's phases and sizes, from a verify_throughput result's progress lines. A run made
    before larger rows ran their reference and first batch one after the other (no
    `side_by_side` key) has those rows' judge reference seconds added once more: what running
    them one after the other can cost at most (the candidate's batch took at least as long as
    the part of it measured after the reference)."""
    out = []
    old_run = run.get("side_by_side") != "small rows"
    keep = VerifyConfig().keep_bytes   # the default verify_throughput runs with
    for _t, name, status, phases, mem, *_ in run["run1_progress"]:
        busy = {k: v for k, v in phases.items()
                if not k.startswith("waiting") and k not in LEFT_OUT}
        if old_run and mem.get("size_gb") and not side_by_side(mem["size_gb"], keep):
            busy["judge reference"] = 2 * busy.get("judge reference", 0.0)
        load = sum(busy.get(k, 0.0) for k in LOAD_PHASES)
        peaks = [mem.get("peak_gb"), mem.get("judge_peak_gb")]
        timed = [(mem.get(k) or {}).get("Calls_timed")
                 for k in ("peak_by_request_gb", "judge_peak_by_request_gb")]
        out.append({"name": name, "status": status, "size_gb": mem.get("size_gb"),
                    "load_s": load, "rest_s": sum(busy.values()) - load,
                    "timed_s": sum(busy.get(k, 0.0) for k in TIMED_PHASES)
                    + sum(phases.get(k, 0.0) for k in HELD_WAITS),
                    "held_wait_s": sum(phases.get(k, 0.0) for k in HELD_WAITS),
                    "peak_gb": sum(peaks) if all(p is not None for p in peaks) else None,
                    "timed_peak_gb": sum(timed) if all(t is not None for t in timed)
                    else None})
    return out


def replay(rows: list[dict], capacity: float, rule: str, slots: int) -> dict:
    """Simulated seconds until every row is done, with the gate's own admission decisions."""
    gate = MemoryGate(capacity, slots=slots)
    def estimate(r: dict) -> float:
        if rule.startswith("grow_peaks") and r["peak_gb"] is not None:
            scale = float(rule.removesuffix("_waits").split("x")[1]) if "x" in rule else 1.0
            return ROW_MEMORY_SLACK * scale * r["peak_gb"] + ROW_MEMORY_BASE_GB
        return row_memory_gb(r["size_gb"], gpu=True)
    need = {i: gate.clamp(estimate(r)) for i, r in enumerate(rows)}
    rest = {i: r["rest_s"] + (r["held_wait_s"] if rule.endswith("_waits") else 0.0)
            for i, r in enumerate(rows)}
    alone = [i for i in need if need[i] >= capacity]
    waiting = [i for i in need if i not in alone]
    clock, events, grants, growers = 0.0, [], {}, []
    waited = dict.fromkeys(need, 0.0)
    entered_at: dict[int, float] = {}

    def admit() -> None:
        for i in list(waiting):
            gb = need[i] if rule == "whole" else min(need[i], load_memory_gb(rows[i]["size_gb"]))
            extra = need[i] - gb
            if gate.holders and not gate._admits(gb, extra):
                continue
            grants[i] = gate.acquire(gb, then=need[i] if extra else None)
            waiting.remove(i)
            waited[i] += clock
            heapq.heappush(events, (clock + rows[i]["load_s"], "loaded", i))

    def grow_ready() -> None:
        for i in list(growers):
            if gate.used + grants[i].extra <= gate.capacity:
                gate._growing_gb -= grants[i].extra
                gate.grow(grants[i])
                growers.remove(i)
                waited[i] += clock - entered_at.pop(i)
                _run_rest(i)

    def _run_rest(i: int) -> None:
        """The rest of row i: at once to its end, or (`grow_shrink`) its correctness phases,
        then the timed rounds under a smaller reservation."""
        if rule.startswith("grow_shrink") and rows[i]["timed_peak_gb"] is not None:
            heapq.heappush(events, (clock + rest[i] - rows[i]["timed_s"], "corrected", i))
        else:
            heapq.heappush(events, (clock + rest[i], "done", i))

    def _shrink(i: int) -> None:
        timed_need = ROW_MEMORY_SLACK * rows[i]["timed_peak_gb"] + ROW_MEMORY_BASE_GB
        if timed_need < grants[i].held:
            gate.give_back(grants[i], grants[i].held - timed_need)

    admit()
    while events:
        clock, what, i = heapq.heappop(events)
        if what == "loaded":
            if grants[i].extra:
                growers.append(i)
                gate._growing_gb += grants[i].extra
                entered_at[i] = clock
            else:
                _run_rest(i)
        elif what == "corrected":
            _shrink(i)
            heapq.heappush(events, (clock + rows[i]["timed_s"], "done", i))
        else:
            gate.release(grants.pop(i))
        grow_ready()
        admit()
    shared_end = clock
    for i in alone:
        waited[i] += clock
        clock += rows[i]["load_s"] + rest[i]
    return {"wall_s": round(clock, 1), "shared_part_s": round(shared_end, 1),
            "alone_rows": len(alone), "pairs_per_hour": round(len(rows) / clock * 3600),
            "memory_wait_s_mean": round(sum(waited.values()) / len(rows), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="a verify_throughput result JSON")
    ap.add_argument("--slots", type=int, default=8, help="worker pairs per device")
    ap.add_argument("--orders", type=int, default=25,
                    help="the run's own order of rows and this many less one seeded shuffles")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/schedule_replay.json")
    args = ap.parse_args()
    run = json.loads(args.run.read_text())
    rows = rows_of(run)
    table = []
    # greedy packing is sensitive to the order rows come in: every rule sees the same orders
    orders = [rows] + [random.Random(k).sample(rows, len(rows)) for k in range(args.orders - 1)]
    for dev, total in DEVICES.items():
        for rule in RULES:
            runs = [replay(o, total * GPU_SHARE, rule, args.slots) for o in orders]
            walls = sorted(r["wall_s"] for r in runs)
            table.append({"device": dev, "capacity_gb": round(total * GPU_SHARE, 1),
                          "rule": rule, "orders": len(orders), "run_order": runs[0],
                          "wall_s_median": walls[len(walls) // 2],
                          "wall_s_min": walls[0], "wall_s_max": walls[-1],
                          "pairs_per_hour_median": round(len(rows) / walls[len(walls) // 2]
                                                         * 3600),
                          "alone_rows": runs[0]["alone_rows"]})
    # a run cut before its summary (`partial`): until its last row ended
    wall = run["run1"]["wall_s"] if run.get("run1") else run["run1_progress"][-1][0]
    measured = {"gpu": run.get("hardware", {}).get("gpu"), "checkout": run.get("checkout"),
                "wall_s": round(wall, 1), "pairs_per_hour": round(len(rows) / wall * 3600),
                "partial": bool(run.get("partial"))}
    print(f"{len(rows)} rows of {args.run.name} (measured: {measured['wall_s']} s, "
          f"{measured['pairs_per_hour']} pairs/h on {measured['gpu']})")
    print(f"{'device':10s} {'GB':>6s} {'rule':22s} {'run order s':>11s} {'median s':>8s} "
          f"{'min-max s':>13s} {'alone':>5s} {'pairs/h':>7s}")
    for t in table:
        print(f"{t['device']:10s} {t['capacity_gb']:6.1f} {t['rule']:22s} "
              f"{t['run_order']['wall_s']:11.1f} {t['wall_s_median']:8.1f} "
              f"{t['wall_s_min']:6.1f}-{t['wall_s_max']:<6.1f} {t['alone_rows']:5d} "
              f"{t['pairs_per_hour_median']:7d}")
    save_result(args.out, {"hardware": hardware("cpu"), "run": str(args.run.name),
                           "measured": measured, "slots": args.slots, "rows": len(rows),
                           "note": "simulated seconds from measured per-row phases; the "
                                   "median is over the run's order and seeded shuffles",
                           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                           "replays": table})


if __name__ == "__main__":
    main()
