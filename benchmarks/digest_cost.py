"""What the output digest costs per timed call, beside the cheapest pass over the same bytes.

    PYTHONPATH=. python benchmarks/digest_cost.py --device cpu --out benchmarks/results/digest_cost_cpu.json

Every timed call of both workers digests its output inside the parent's clock (a commitment to
the bytes the judge may fetch), so the digest is part of the harness's fixed cost per call that
`timing.credit` subtracts: the larger it is beside a kernel, the less the clock can resolve that
kernel. For float32 outputs of several sizes the table gives the digest's milliseconds when the
output's bytes divide into 8-byte words (summed as they are) and when they only divide into
4-byte words (one element more: widened to int64 first, the digest's only path before
2026-12-03), beside one `sum()` and one `clone()` of the output. Outputs of at most
`digest.SMALL` words take one weighted sum (since 2026-12-04); `rowcol ms` is the same output
through the rows-and-columns path that larger ones take (the only path before). `tree ms` is
the binding digest (verify/worker/treehash.py) that would replace it: one Triton launch per pass
on the GPU, torch's tensor operations on the CPU.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.verify_throughput import hardware, save_result  # noqa: E402


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

    from curate.verify.worker import digest as dg
    from curate.verify.worker.digest import _words, digest
    from curate.verify.worker.treehash import tree_digest
    rows = []
    print(f"{'MiB':>8} {'words8 ms':>10} {'rowcol ms':>10} {'words4 ms':>10} {'tree ms':>9} "
          f"{'sum ms':>8} {'clone ms':>9}")
    for mib in (float(m) for m in args.mib.split(",")):
        n = int(mib * 2**20) // 4
        repeat = args.repeat if mib >= 1 else max(args.repeat, 200)   # microseconds: more
        even = torch.randn(n, device=args.device)
        odd = torch.randn(n + 1, device=args.device)   # 4 bytes more: 4-byte words
        assert _words(even).element_size() == 8 and _words(odd).element_size() == 4
        row = {"mib": mib,
               "digest_words8_ms": ms(lambda: digest([even]), args.device, repeat),
               "digest_words4_ms": ms(lambda: digest([odd]), args.device, repeat),
               # the binding digest: Triton's pass on the GPU, torch's operations on the CPU
               "tree_ms": ms(lambda: tree_digest([even]), args.device,
                             repeat if args.device == "cuda" else min(repeat, 3)),
               "sum_ms": ms(lambda: even.sum().item(), args.device, repeat),
               "clone_ms": ms(lambda: even.clone(), args.device, repeat)}
        small, dg.SMALL = dg.SMALL, 0
        try:
            row["digest_rowcol_ms"] = ms(lambda: digest([even]), args.device, repeat)
        finally:
            dg.SMALL = small
        rows.append(row)
        print(f"{mib:>8g} {row['digest_words8_ms']:>10.4f} {row['digest_rowcol_ms']:>10.4f} "
              f"{row['digest_words4_ms']:>10.4f} {row['tree_ms']:>9.4f} {row['sum_ms']:>8.4f} "
              f"{row['clone_ms']:>9.4f}")
    return save_result(args.out, {"hardware": hardware(args.device), "device": args.device,
                                  "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                  "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
