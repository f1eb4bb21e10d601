"""Which part of the Landlock sandbox breaks CUDA here? Each variant starts a fresh Python under
`curate.isolation.confine` with one set of rules and initializes CUDA (device count, a kernel).

    PYTHONPATH=. python benchmarks/confine_probe.py [--out benchmarks/results/confine_probe.json]

verify confines workers on the CPU device only, because a fully confined worker could not
initialize CUDA on the H200 machine (cudaGetDeviceCount: error 304). The variant that first
fails names the rule to relax (then `Verifier(confine=True)` can be turned on for the GPU).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from curate.isolation import confine  # noqa: E402

PROBE = r"""
import json, sys
out = {}
try:
    import torch
    out["device_count"] = torch.cuda.device_count()
    if out["device_count"]:
        x = torch.ones(1024, device="cuda")
        out["sum"] = float((x * 2).sum())
    out["ok"] = bool(out["device_count"])
except Exception as exc:
    out["ok"] = False
    out["error"] = f"{type(exc).__name__}: {exc}"[:500]
print("PROBE" + json.dumps(out))
"""

VARIANTS = {
    "none": None,
    "writes": dict(hide_home=False, deny_tcp=False, scope=False),
    "writes+tcp": dict(hide_home=False, deny_tcp=True, scope=False),
    "writes+scope": dict(hide_home=False, deny_tcp=False, scope=True),
    "writes+hide_home": dict(hide_home=True, deny_tcp=False, scope=False),
    "all (verify's)": dict(hide_home=True, deny_tcp=True, scope=True),
}


def run_variant(opts) -> dict:
    scratch = tempfile.mkdtemp(prefix="curate-probe-")
    env = dict(os.environ, HOME=scratch, TMPDIR=scratch, PYTHONPATH=str(ROOT))
    plan = None
    if opts is not None:
        plan = confine.plan(scratch, env, hide_home=opts["hide_home"])
        if plan is not None:
            plan.deny_tcp, plan.scope = opts["deny_tcp"], opts["scope"]
    proc = subprocess.run([sys.executable, "-c", PROBE], env=env, cwd=scratch,
                          capture_output=True, text=True, timeout=300,
                          preexec_fn=(lambda: confine.apply(plan)) if plan else None)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("PROBE")), None)
    res = json.loads(line[5:]) if line else {"ok": False, "error": proc.stderr[-800:]}
    res["exit_code"] = proc.returncode
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "confine_probe.json"))
    a = ap.parse_args(argv)
    report = {"landlock_abi": confine.abi_version(), "platform": platform.platform(),
              "python": platform.python_version(), "variants": {}}
    print(f"Landlock ABI {report['landlock_abi']}")
    for name, opts in VARIANTS.items():
        res = run_variant(opts)
        report["variants"][name] = res
        why = res.get("error") or ("no CUDA device visible" if not res.get("device_count") else "")
        print(f"{name:<18} {'ok' if res.get('ok') else 'FAILS'}  {why}")
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(report, indent=2))
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
