"""The table of a replayed LLM build (pipelines/llm-replay.yaml): rows per stage, statuses,
kept pairs and their speedups, one infilling example; JSON with the machine and versions.

    python3 benchmarks/llm_replay_report.py out/llm-replay --out benchmarks/results/llm_replay_build.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curate.card.facts import host  # noqa: E402
from curate.tableio import read_rows  # noqa: E402


def versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {"python": platform.python_version()}
    for pkg in ("torch", "triton", "openai", "polars", "ninja"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    try:
        import torch
        out["cuda"] = torch.version.cuda
        out["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001
        pass
    return out


def rows_of(folder: Path) -> list[dict]:
    return [r for p in sorted(folder.glob("*.parquet")) for r in read_rows(p)]


def summary(build: Path) -> dict:
    stats = json.loads((build / "stats.json").read_text())
    stages = [{k: s.get(k) for k in ("name", "rows_in", "rows_out", "dropped", "seconds",
                                     "skipped")} | {"reasons": s.get("reasons"),
                                                    "statuses": s.get("statuses")}
              for s in stats["stages"]]
    synth = next((s.get("extra") for s in stats["stages"] if s["name"] == "synth-llm"), {})
    kept = rows_of(build / "data")
    pairs = sorted(({"problem": Path(r.get("path") or "?").stem, "sample": r.get("sample"),
                     "turn": r.get("turn"), "backend": r.get("backend"),
                     "speedup": r.get("speedup"), "ci_low": r.get("speedup_ci_low"),
                     "ref_ms": r.get("ref_ms"), "kernel_ms": r.get("kernel_ms")}
                    for r in kept), key=lambda p: -(p["speedup"] or 0))
    verified = sorted((build / "stages").glob("*-verify.parquet"))
    statuses = Counter(r.get("status") for r in read_rows(verified[0])) if verified else {}
    infill = rows_of(build / "infill") if (build / "infill").is_dir() else []
    example = None
    if infill:
        r = infill[0]
        example = {k: r.get(k) for k in ("core_kind", "core_name")} | {
            part: (r.get(part) or "")[:600] for part in ("prefix", "core", "suffix")}
        example["lengths"] = {part: len(r.get(part) or "") for part in ("prefix", "core", "suffix")}
    return {"stages": stages, "synth_llm": synth, "verify_statuses": dict(statuses),
            "kept": len(kept), "kept_by_backend": dict(Counter(p["backend"] for p in pairs)),
            "pairs": pairs, "infill_rows": len(infill), "infill_example": example,
            "seconds": stats.get("seconds")}


def show(s: dict) -> None:
    print(f"{'stage':<12} {'in':>5} {'out':>5} {'dropped':>8} {'seconds':>8}  reasons")
    for st in s["stages"]:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted((st["reasons"] or {}).items(),
                                                          key=lambda kv: -kv[1])[:4])
        print(f"{st['name']:<12} {st['rows_in']:>5} {st['rows_out']:>5} {st['dropped']:>8} "
              f"{st['seconds']:>8.1f}  {reasons}")
    print("verify statuses:", s["verify_statuses"])
    print(f"kept pairs: {s['kept']} {s['kept_by_backend']}")
    for p in s["pairs"]:
        print(f"  {p['problem']:<32} s{p['sample']} t{p['turn']} {p['backend']:<6} "
              f"speedup {p['speedup'] or 0:6.2f}x (95% low {p['ci_low'] or 0:5.2f})")
    ex = s["infill_example"]
    if ex:
        print(f"infill rows: {s['infill_rows']}; first: {ex['core_kind']} {ex['core_name']} "
              f"(prefix {ex['lengths']['prefix']} chars, core {ex['lengths']['core']}, "
              f"suffix {ex['lengths']['suffix']})")
        print("  core begins:", (ex["core"] or "")[:160].replace("\n", " | "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" /
                                         "llm_replay_build.json"))
    args = ap.parse_args()
    s = summary(Path(args.build))
    show(s)
    doc = {"benchmark": "llm_replay_build", "pipeline": "pipelines/llm-replay.yaml",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "hardware": host(),
           "versions": versions(), **s}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
