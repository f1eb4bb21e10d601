"""The honest C++ fixtures' speedups on the CPU device, at the code of this checkout (or of another
one given with PYTHONPATH): the before/after figure for a change to verify's timing.

    PYTHONPATH=. python benchmarks/honest_speed.py --repeat 3 --out benchmarks/results/honest_speed_cpu.json
    PYTHONPATH=/path/to/old/checkout python benchmarks/honest_speed.py --label before ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "hostile"
CASES = {"honest_swish_add": "swish", "honest_try_except": "swish",
         "honest_recycled_buffer": "swish"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--label", default="after")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    import curate
    from curate.verify import Verifier
    spec = json.loads((FIXTURES / "cases.json").read_text())
    runs: dict[str, list] = {c: [] for c in CASES}
    for rep in range(args.repeat):
        rows = [{"id": c, "backend": "cpp", "source": "file",
                 "pytorch_code": (FIXTURES / spec["references"][ref]).read_text(),
                 "kernel_code": (FIXTURES / "cpp" / f"{c}.py").read_text() + f"\n# {rep}\n"}
                for c, ref in CASES.items()]
        with Verifier(device="cpu", workers=1) as v:
            for i, r in v.verify(rows):
                runs[rows[i]["id"]].append({"status": r.status, "speedup": r.speedup,
                                            "ci": [r.speedup_ci_low, r.speedup_ci_high]})
    summary = {c: statistics.median([x["speedup"] for x in rs if x["speedup"]] or [0.0])
               for c, rs in runs.items()}
    for c, m in summary.items():
        print(f"{args.label:7s} {c:26s} median speedup {m:.3f}  "
              f"{[round(x['speedup'] or 0, 3) for x in runs[c]]}")
    import platform
    import torch
    args.out.write_text(json.dumps({"label": args.label, "curate": str(Path(curate.__file__).parent),
                                    "python": platform.python_version(), "torch": torch.__version__,
                                    "cpus": __import__("os").cpu_count(),
                                    "runs": runs, "median": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
