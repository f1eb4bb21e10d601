"""Every reply of the replay folder through `verify`, one row per reply: does each one end as its
writer meant (honest turn 0 and fixed last turns `verified`; flawed turns not, or, where the flaw
is slowness, below the threshold), and how fast?

    PYTHONPATH=. python3 benchmarks/llm_replay_verify.py --examples 16-30 --device cuda \
        --out benchmarks/results/llm_replay_verify_h200_16_30.json
    PYTHONPATH=. python3 benchmarks/llm_replay_verify.py --examples 16-30 --backend triton --device cpu

A reply's intent comes from its name: sample 0 is an honest reply; in sample 1 and above, the
last turn is the fix and the earlier turns are the flawed attempts it answers. The program is
taken from the reply the way `curate synth llm` takes it (curate.synth.llm.extract).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

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
    from curate.card.facts import host
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--examples", default=None, help="a span of example numbers, e.g. 16-30")
    ap.add_argument("--backend", choices=["cuda", "triton", "all"], default="all")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--sandbox", choices=["auto", "strict", "off"], default="auto")
    ap.add_argument("--threshold", type=float, default=2.0)
    ap.add_argument("--out", default=None, help="JSON file for the table and the machine")
    args = ap.parse_args()
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


if __name__ == "__main__":
    main()
