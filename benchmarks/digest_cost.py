"""What the output digest costs per timed call, beside the cheapest pass over the same bytes.

    PYTHONPATH=. python benchmarks/digest_cost.py --device cpu --out benchmarks/results/digest_cost_cpu.json

Every timed call of both workers digests its output inside the parent's clock (a commitment to
the bytes the judge may fetch), so the digest is part of the harness's fixed cost per call that
`timing.credit` subtracts: the larger it is beside a kernel, the less the clock can resolve that
kernel. For float32 outputs of several sizes the table gives the digest's milliseconds when the
output's bytes divide into 8-byte words (summed as they are) and when they only divide into
4-byte words (one element more: widened to int64 first, the digest's only path before
2026-12-03), beside one `sum()` and one `clone()` of the output.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.verify_throughput import hardware  # noqa: E402


def ms(fn, device: str, repeat: int) -> float:
    import torch
    fn()
    times = []
    for _ in range(repeat):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--mib", default="1,16,256", help="output sizes in MiB, comma-separated")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    from curate.verify.worker.digest import _words, digest
    rows = []
    print(f"{'MiB':>6} {'words8 ms':>10} {'words4 ms':>10} {'sum ms':>8} {'clone ms':>9}")
    for mib in (int(m) for m in args.mib.split(",")):
        n = mib * 2**20 // 4
        even = torch.randn(n, device=args.device)
        odd = torch.randn(n + 1, device=args.device)   # 4 bytes more: 4-byte words
        assert _words(even).element_size() == 8 and _words(odd).element_size() == 4
        row = {"mib": mib,
               "digest_words8_ms": ms(lambda: digest([even]), args.device, args.repeat),
               "digest_words4_ms": ms(lambda: digest([odd]), args.device, args.repeat),
               "sum_ms": ms(lambda: even.sum().item(), args.device, args.repeat),
               "clone_ms": ms(lambda: even.clone(), args.device, args.repeat)}
        rows.append(row)
        print(f"{mib:>6} {row['digest_words8_ms']:>10.2f} {row['digest_words4_ms']:>10.2f} "
              f"{row['sum_ms']:>8.2f} {row['clone_ms']:>9.2f}")
    doc = {"hardware": hardware(args.device), "device": args.device,
           "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "rows": rows}
    if args.out:
        args.out.write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
