"""How many copies of a row's inputs and outputs each verify worker holds at its peak, against
the reservation rule (curate.verify.row.row_memory_gb).

    PYTHONPATH=. python benchmarks/row_memory.py --device cpu --mib 64,256 \
        --out benchmarks/results/row_memory_cpu.json

One honest elementwise pair (x * sigmoid(x) + y: two inputs of M MiB, one output of M MiB; the
C++ fixture on the CPU, the Triton one on the GPU) is verified at each size with verify's
defaults and, where those keep its input sets, once more with them made again at each call
(`keep_bytes` below them). Each worker reports its own peak for the row (the GPU allocator's
peak; on the CPU the resident set's high-water mark, from which the worker's peak at 1 MiB,
mostly its libraries, is taken away). The table gives each peak in units of one input set
(2 M MiB) and the estimate the scheduler reserves for the row (both workers, with its slack):
a change which removes a copy shows as a smaller figure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.verify_throughput import hardware  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "hostile"
REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, y):
        return x * torch.sigmoid(x) + y


def get_inputs():
    return [torch.randn({n}), torch.randn({n})]


def get_init_inputs():
    return []
'''
MiB = 2**20
KEEP_BYTES = 2**30   # VerifyConfig.keep_bytes's default
BASE_MIB = 1   # the size whose peak stands for what a worker holds besides the row


def pair(device: str, mib: int) -> dict:
    from curate.schema import new_record
    backend = "cpp" if device == "cpu" else "triton"
    kernel = (FIXTURES / backend / "honest_swish_add.py").read_text()
    n = mib * MiB // 4
    return new_record(id=f"swish-{mib}", pytorch_code=REFERENCE.format(n=n), kernel_code=kernel,
                      backend=backend, source="file", entry_point="Model")


def peaks(notes: dict, device: str) -> tuple[float | None, float | None]:
    key = "peak_gb" if device == "cuda" else "peak_rss_gb"
    return notes.get(key), notes.get(f"judge_{key}")


def measure(device: str, mib: int, keep_bytes: int, timeout: float) -> dict:
    from curate.verify import Verifier
    t0 = time.monotonic()
    with Verifier(device=device, timeout=timeout, keep_bytes=keep_bytes) as v:
        [(_, res)] = list(v.verify([pair(device, mib)]))
    cand, judge = peaks(res.notes, device)
    return {"mib": mib, "keep_bytes": keep_bytes, "remade": keep_bytes < 2 * mib * MiB,
            "status": res.status, "reasons": res.reasons, "candidate_gb": cand,
            "judge_gb": judge,
            "size_gb": {"inputs": 2 * mib / 1024, "outputs": mib / 1024, "params": 0.0},
            "seconds": round(time.monotonic() - t0, 1),
            "phases_s": res.notes.get("phases_s")}


def in_sets(row: dict, base: dict | None, key: str) -> float | None:
    """A worker's peak for the row in units of one input set (beyond the baseline on the CPU)."""
    if row[key] is None:
        return None
    extra = row[key] - (base[key] if base and base[key] is not None else 0.0)
    return round(extra * 2**30 / (2 * row["mib"] * MiB), 2)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--mib", default="64,256", help="input sizes in MiB, comma-separated")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--out", type=Path,
                    default=REPO / "benchmarks/results/row_memory_cpu.json")
    args = ap.parse_args(argv)
    from curate.verify.row import row_memory_gb

    sizes = [int(x) for x in args.mib.split(",") if x]
    base = None
    if args.device == "cpu":
        base = measure(args.device, BASE_MIB, KEEP_BYTES, args.timeout)
    rows = []
    print(f"{'MiB':>6} {'sets':>7} {'status':>10} {'cand GB':>8} {'judge GB':>8} "
          f"{'cand sets':>9} {'judge sets':>10} {'estimate GB':>11}")
    for mib in sizes:
        # verify's own default, then (where that keeps the sets) sets made again at each call
        keeps = [KEEP_BYTES] + ([mib * MiB] if 2 * mib * MiB <= KEEP_BYTES else [])
        for keep in keeps:
            r = measure(args.device, mib, keep, args.timeout)
            r["candidate_sets"] = in_sets(r, base, "candidate_gb")
            r["judge_sets"] = in_sets(r, base, "judge_gb")
            r["estimate_gb"] = round(row_memory_gb(r["size_gb"], keep / 2**30,
                                                       gpu=args.device == "cuda"), 2)
            rows.append(r)
            print(f"{mib:>6} {'remade' if r['remade'] else 'kept':>7} {r['status']:>10} "
                  f"{r['candidate_gb']!s:>8} {r['judge_gb']!s:>8} {r['candidate_sets']!s:>9} "
                  f"{r['judge_sets']!s:>10} {r['estimate_gb']!s:>11}")
            result = {"hardware": hardware(args.device), "device": args.device,
                      "baseline": base, "rows": rows,
                      "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
