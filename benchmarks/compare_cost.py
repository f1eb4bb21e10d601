"""What the judge's output comparison costs on one large output, now and at an earlier commit.

    PYTHONPATH=. python benchmarks/compare_cost.py --device cuda --gib 0.25,1.5,6 --before REV --out F

The judge compares every correctness call's output with the reference's (compare.compare), a
chunk at a time so that multi-GiB outputs need no output-sized temporaries. On the GPU each
chunk's read back waits for the device; the table gives, per float32 output size, the
comparison's milliseconds at this checkout and at `--before` (its compare.py loaded from git),
whether both give the same figures, and beside them the degeneracy gate's pass (below_tolerance),
one digest, one sum() and one clone() of the output.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.digest_cost import ms  # noqa: E402
from benchmarks.verify_throughput import hardware, save_result  # noqa: E402


def load_before(rev: str):
    """compare.py as it was at `rev`, as a module of its own."""
    src = subprocess.run(["git", "show", f"{rev}:curate/verify/worker/compare.py"], cwd=REPO,
                         check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp()) / "compare_before.py"
    path.write_text(src.replace("from .", "from curate.verify.worker."))
    spec = importlib.util.spec_from_file_location("compare_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod   # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--gib", default="0.25,1.5", help="output sizes in GiB, comma-separated")
    ap.add_argument("--before", default=None, help="a commit whose compare.py to time beside")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    import torch

    from curate.verify.worker import compare as now
    from curate.verify.worker.digest import digest
    from curate.verify.worker.gates.degeneracy import below_tolerance
    before = load_before(args.before) if args.before else None

    def t(fn) -> float:
        return round(ms(fn, args.device, 3), 2)   # the median of 3, after one warm-up

    rows = []
    print(f"{'GiB':>6} {'before ms':>9} {'now ms':>8} {'same':>5} {'below_tol ms':>12} "
          f"{'digest ms':>9} {'sum ms':>7} {'clone ms':>8}")
    for gib in (float(g) for g in args.gib.split(",") if g):
        r = torch.randn(int(gib * 2**30 / 4), device=args.device)
        x = r + 1e-4 * torch.randn_like(r)
        a = now.compare([r], [x])
        row = {"gib": gib, "now_ms": t(lambda: now.compare([r], [x])),
               "below_tolerance_ms": t(lambda: below_tolerance(r)),
               "digest_ms": t(lambda: digest([x])),
               "sum_ms": t(lambda: x.sum()),
               "clone_ms": t(lambda: x.clone())}
        if before is not None:
            b = before.compare([r], [x])
            row["before_ms"] = t(lambda: before.compare([r], [x]))
            row["same"] = ((a.ok, a.max_abs_err, a.max_rel_err) ==
                           (b.ok, b.max_abs_err, b.max_rel_err) and
                           abs(a.rel_norm - b.rel_norm) <= 1e-9 * max(b.rel_norm, 1e-30))
        rows.append(row)
        print(f"{gib:>6} {row.get('before_ms', '-'):>9} {row['now_ms']:>8} "
              f"{str(row.get('same', '-')):>5} {row['below_tolerance_ms']:>12} "
              f"{row['digest_ms']:>9} {row['sum_ms']:>7} {row['clone_ms']:>8}")
        r = x = None   # the next size's tensors take their place
    return save_result(args.out, {"device": args.device, "hardware": hardware(args.device),
                                  "before": args.before, "rows": rows})


if __name__ == "__main__":
    sys.exit(main())
