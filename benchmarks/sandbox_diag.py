"""What runs inside the verify sandbox on this machine: cuBLAS, cuDNN and a Triton kernel in a
bubblewrapped process under a worker uid, each printed with its error (GPU machine).

    PYTHONPATH=. python benchmarks/sandbox_diag.py [--pairs kb_pairs.jsonl --limit 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

SNIPPETS = {
    "cuda_init": "import torch; torch.zeros(1, device='cuda'); print('ok')",
    "cublas_mm": "import torch; a = torch.randn(256, 256, device='cuda'); "
                 "print(float((a @ a).sum()))",
    "cudnn_conv": "import torch, torch.nn.functional as F; "
                  "x = torch.randn(8, 3, 32, 32, device='cuda'); "
                  "w = torch.randn(16, 3, 3, 3, device='cuda'); print(float(F.conv2d(x, w).sum()))",
    "triton_add": "import torch, triton, triton.language as tl\n"
                  "@triton.jit\n"
                  "def k(x, y, n, B: tl.constexpr):\n"
                  "    o = tl.program_id(0) * B + tl.arange(0, B)\n"
                  "    tl.store(y + o, tl.load(x + o, mask=o < n) + 1, mask=o < n)\n"
                  "x = torch.randn(1000, device='cuda'); y = torch.empty_like(x)\n"
                  "k[(4,)](x, y, 1000, B=256); print(float((y - x - 1).abs().max()))",
}


def snippets() -> dict:
    from curate.isolation.sandbox import UID_BASE, bwrap_argv, chown_tree
    out = {}
    scratch = tempfile.mkdtemp(prefix="curate-diag-")
    chown_tree(scratch, UID_BASE)
    argv = bwrap_argv([scratch], "cuda")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": scratch,
           "TRITON_CACHE_DIR": f"{scratch}/triton", "PYTHONPATH": os.getcwd()}
    drop = (f"import os; os.setgroups([]); os.setgid({UID_BASE}); os.setuid({UID_BASE}); "
            f"os.chdir({scratch!r})\n")
    for name, code in SNIPPETS.items():
        for label, prefix in (("root", []), ("bwrap+uid", argv)):
            p = subprocess.run(prefix + [sys.executable, "-c", (drop if prefix else "") + code],
                               capture_output=True, text=True, timeout=120, env=env)
            out[f"{name}/{label}"] = {"rc": p.returncode,
                                      "tail": (p.stdout + p.stderr).strip()[-400:]}
            print(f"{name:12s} {label:10s} rc={p.returncode} {(p.stdout + p.stderr).strip()[-300:]}",
                  flush=True)
    return out


def pairs(path: str, limit: int) -> dict:
    from curate.verify import Verifier
    rows = [json.loads(x) for x in open(path)][:limit]
    rows = [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows]
    out = {}
    for sandbox in ("off", "auto"):
        with Verifier(device="cuda", sandbox=sandbox) as v:
            for i, res in v.verify(rows):
                out[f"{rows[i].get('path')}/{sandbox}"] = {"status": res.status,
                                                          "reasons": res.reasons,
                                                          "error": res.error}
                print(f"{sandbox:5s} {str(rows[i].get('path'))[:44]:44s} {res.status:14s} "
                      f"{res.reasons} {(res.error or '')[:1500]}", flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs")
    ap.add_argument("--limit", type=int, default=3)
    ap.add_argument("--out")
    args = ap.parse_args()
    report = {"snippets": snippets()}
    if args.pairs:
        report["pairs"] = pairs(args.pairs, args.limit)
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(report, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
