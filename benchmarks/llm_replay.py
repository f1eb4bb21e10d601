"""The replayed LLM build: synth-llm against a loopback server that answers from
tests/fixtures/llm_replay as a model would, every stage after it, and every reply checked.

    PYTHONPATH=. python3 benchmarks/llm_replay.py build [--examples "01 07 10"] [--deadline S] \
        --out benchmarks/results/llm_replay_build_h200.json
    PYTHONPATH=. python3 benchmarks/llm_replay.py verify --examples 16-30 --device cuda \
        --out benchmarks/results/llm_replay_verify_h200.json
    PYTHONPATH=. python3 benchmarks/llm_replay.py report out/llm-replay --out FILE.json

build: the server starts, `curate build --pipeline pipelines/llm-replay.yaml` runs ingest ->
synth-llm (CUDA, 2 samples x 2 turns, turn 1 told the verdict on turn 0) -> dedup -> verify ->
select -> keep, `curate split-infill` cuts the kept sources, and the report is written. A build
cut at --deadline resumes from its ledger and response cache when run again with the same
--build-dir.

verify: every reply of the replay folder through `verify`, one row per reply: does each one end
as its writer meant (honest turn 0 and fixed last turns `verified`; flawed turns not, or, where
the flaw is slowness, below the threshold)? A reply's intent comes from its name: sample 0 is an
honest reply; in sample 1 and above, the last turn is the fix and the earlier turns are the
flawed attempts it answers. The program is taken from the reply the way `curate synth llm`
takes it (curate.synth.llm.extract).

report: the table of a finished build (rows per stage, statuses, kept pairs and their
speedups, one infilling example), with the machine and versions.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curate.card.machine import host  # noqa: E402
from curate.tableio import read_rows  # noqa: E402

REPLAY = ROOT / "tests" / "fixtures" / "llm_replay"
REPLY = re.compile(r"^(cuda|triton)-s(\d+)-t(\d+)\.md$")


def wanted(folder: str, span: tuple[int, int] | None) -> bool:
    return span is None or span[0] <= int(folder[:2]) <= span[1]


def reply_rows(span, backends) -> list[dict]:
    from curate.schema import new_record
    from curate.synth.llm.extract import extract_program
    rows = []
    for folder in sorted(p for p in REPLAY.iterdir() if p.is_dir() and wanted(p.name, span)):
        ref = (ROOT / "examples" / f"{folder.name}.py").read_text()
        files = sorted(f for f in folder.iterdir() if REPLY.match(f.name))
        last = {}
        for f in files:
            backend, sample, turn = REPLY.match(f.name).groups()
            last[(backend, sample)] = max(last.get((backend, sample), 0), int(turn))
        for f in files:
            backend, sample, turn = REPLY.match(f.name).groups()
            if backend not in backends:
                continue
            sidecar = f.with_name(f.name[:-3] + ".reasoning.txt")
            got = extract_program(f.read_text(), sidecar.read_text() if sidecar.exists() else None)
            honest = sample == "0" or int(turn) == last[(backend, sample)]
            row = new_record(id=f"{folder.name}/{f.name}", pytorch_code=ref, kernel_code=got.code,
                             backend=backend, source="llm", entry_point="Model")
            row["_intent"] = "honest" if honest else "flawed"
            rows.append(row)
    return rows


def run_verify(rows: list[dict], args) -> list[dict | None]:
    from curate.verify import Verifier
    out: list[dict | None] = [None] * len(rows)
    clean = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    with Verifier(device=args.device, workers=args.workers, timeout=args.timeout,
                  sandbox=args.sandbox) as v:
        for i, res in v.verify(clean):
            out[i] = {"status": res.status, "reasons": list(res.reasons), "error": res.error,
                      "max_abs_err": res.max_abs_err, "speedup": res.speedup,
                      "speedup_ci_low": res.speedup_ci_low, "sandbox": res.sandbox}
    return out


def verdict(intent: str, res: dict | None, threshold: float) -> str:
    if res is None:
        return "not reached"
    if res["status"] == "unsupported":
        return "not run here"
    low = res.get("speedup_ci_low")
    if intent == "flawed":  # a slow-but-correct attempt is verified below the threshold
        if res["status"] != "verified" or (low is not None and low < threshold):
            return "as meant"
        return "FLAW NOT CAUGHT"
    if res["status"] != "verified":
        return "HONEST FAILED"
    return "as meant" if low is None or low >= threshold else f"verified, below {threshold}x"


def machine() -> dict:
    from curate.card.machine import host
    out = {"host": host(), "python": platform.python_version()}
    try:
        import torch
        out.update(torch=torch.__version__, cuda=torch.version.cuda,
                   gpu=torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)
    except Exception as exc:  # noqa: BLE001 - the table is still worth writing
        out["torch"] = f"unavailable: {exc}"
    try:
        import triton
        out["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        out["triton"] = None
    return out


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


def report_main(args) -> int:
    """The table of a replayed build: rows per stage, statuses, kept pairs, an infill row."""
    s = summary(Path(args.build))
    show(s)
    doc = {"benchmark": "llm_replay_build", "pipeline": "pipelines/llm-replay.yaml",
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "hardware": host(),
           "versions": versions(), **s}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"wrote {args.out}")

    return 0

def verify_main(args) -> int:
    """Every reply through verify: does each one end as its writer meant?"""
    span = tuple(int(x) for x in args.examples.split("-")) if args.examples else None
    backends = ("cuda", "triton") if args.backend == "all" else (args.backend,)
    rows = reply_rows(span, backends)
    t0 = time.time()
    results = run_verify(rows, args)
    table = []
    for row, res in zip(rows, results):
        res = res or {}
        table.append({"reply": row["id"], "backend": row["backend"], "intent": row["_intent"],
                      "status": res.get("status"), "reasons": res.get("reasons"),
                      "speedup": res.get("speedup"), "speedup_ci_low": res.get("speedup_ci_low"),
                      "max_abs_err": res.get("max_abs_err"),
                      "verdict": verdict(row["_intent"], res or None, args.threshold),
                      "sandbox": res.get("sandbox"),
                      "error": (res.get("error") or "")[:400]})
    print(f"{'reply':52} {'intent':7} {'status':16} {'speedup':>8} {'ci_low':>7}  verdict")
    for t in table:
        sp = f"{t['speedup']:.2f}" if t["speedup"] else "-"
        lo = f"{t['speedup_ci_low']:.2f}" if t["speedup_ci_low"] else "-"
        print(f"{t['reply']:52} {t['intent']:7} {t['status']!s:16} {sp:>8} {lo:>7}  {t['verdict']}")
    counts: dict[str, int] = {}
    for t in table:
        counts[t["verdict"]] = counts.get(t["verdict"], 0) + 1
    print("verdicts:", counts)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": args.device,
            "examples": args.examples, "threshold": args.threshold,
            "seconds": round(time.time() - t0, 1), "machine": machine(), "verdicts": counts,
            "rows": table}, indent=1))
        print("wrote", args.out)

    return 0


def _serve(port: int) -> subprocess.Popen:
    """The replay server, answering once /v1/models does."""
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "support" / "llmserver.py"), "--replay",
                               str(REPLAY), "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            return server
        except OSError:
            time.sleep(0.2)
    return server


def _pipeline(build: Path, port: int, examples: str | None) -> Path:
    """pipelines/llm-replay.yaml, or a copy for another port or a few examples (a build that
    fits a shorter limit)."""
    pipe = ROOT / "pipelines" / "llm-replay.yaml"
    if port == 8011 and not examples:
        return pipe
    text = pipe.read_text().replace("127.0.0.1:8011", f"127.0.0.1:{port}")
    if examples:
        paths = [str(p) for n in examples.split() for p in sorted(ROOT.glob(f"examples/{n}_*.py"))]
        text = text.replace('["@examples"]', json.dumps(paths))
    copy = build.with_name(build.name + ".pipeline.yaml")
    copy.write_text(text)
    return copy


def build_main(args) -> int:
    """Serve the replies, build, split-infill, report; a build cut at the deadline resumes."""
    build = Path(args.build_dir)
    build.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "CURATE_CACHE_DIR": os.environ.get(
        "CURATE_CACHE_DIR", str(build.parent / "cache"))}  # compile cache kept between runs
    server = _serve(args.port)
    try:
        cmd = [sys.executable, "-m", "curate", "build", "--pipeline",
               str(_pipeline(build, args.port, args.examples)), "--out", str(build), "--quiet"]
        try:
            rc = subprocess.run(cmd, cwd=ROOT, env=env, timeout=args.deadline).returncode
        except subprocess.TimeoutExpired:
            rc = 124
        if rc != 0:
            print(f"build cut or failed (exit {rc}): run the same command again to resume")
            return rc
        subprocess.run([sys.executable, "-m", "curate", "split-infill", str(build),
                        "--granularity", "source", "--quiet"], cwd=ROOT, env=env, timeout=300)
    finally:
        server.kill()
    args.build = str(build)
    return report_main(args)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="serve the replies, build, split-infill, report")
    b.add_argument("--build-dir", default=str(Path(tempfile.gettempdir()) / "curate-llm-replay"))
    b.add_argument("--examples", default=None, help='example numbers, e.g. "01 07 10" (default: all)')
    b.add_argument("--port", type=int, default=8011)
    b.add_argument("--deadline", type=float, default=None, help="seconds the build may take")
    b.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "llm_replay_build.json"))
    r = sub.add_parser("report", help="the table of a finished build")
    r.add_argument("build")
    r.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "llm_replay_build.json"))
    v = sub.add_parser("verify", help="every reply through verify, one row each")
    v.add_argument("--examples", default=None, help="a span of example numbers, e.g. 16-30")
    v.add_argument("--backend", choices=["cuda", "triton", "all"], default="all")
    v.add_argument("--device", default="cuda")
    v.add_argument("--workers", type=int, default=None)
    v.add_argument("--timeout", type=float, default=180.0)
    v.add_argument("--sandbox", choices=["auto", "strict", "off"], default="auto")
    v.add_argument("--threshold", type=float, default=2.0)
    v.add_argument("--out", default=None, help="JSON file for the table and the machine")
    args = ap.parse_args(argv)
    return {"build": build_main, "report": report_main, "verify": verify_main}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
