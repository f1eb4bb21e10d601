"""Run a standalone candidate on its own, in a subprocess, against its reference.

A quick self-check for tests and benchmarks (the real, hostile-proof harness is curate.verify):
the reference program and the candidate are imported as separate modules, `Model` and
`ModelNew` are built from the same seed, both run on the same `get_inputs()`, and every output
is compared with `torch.allclose(atol, rtol)`.

    python -m curate.synth.check REF.py CAND.py [--device cpu|cuda] [--atol A] [--rtol R]

prints one JSON line: {"ok", "max_abs_err", "error", "seconds"}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _flat(x):
    import torch
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat(v)]
    return [x]


def compare(ref_code: str, cand_code: str, device: str, atol: float, rtol: float,
            seed: int = 0) -> dict:
    """Load both programs (files in the working directory, the caller's scratch) and compare
    their outputs on the reference's inputs."""
    import torch

    from ..isolation.program import load_program
    if os.environ.get("TRITON_INTERPRET") == "1":
        from .interpret import patch_libdevice
        patch_libdevice()
    t0 = time.monotonic()
    ref = load_program(ref_code, f"curate_check_ref_{os.getpid()}")
    cand = load_program(cand_code, f"curate_check_cand_{os.getpid()}")
    torch.manual_seed(seed)
    init = ref.get_init_inputs()
    torch.manual_seed(seed)
    model = ref.Model(*init).to(device).eval()
    torch.manual_seed(seed)
    model_new = cand.ModelNew(*init).to(device).eval()
    torch.manual_seed(seed + 1)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()]
    with torch.no_grad():
        expected = _flat(model(*[x.clone() if isinstance(x, torch.Tensor) else x
                                 for x in inputs]))
        got = _flat(model_new(*inputs))
    if device == "cuda":
        torch.cuda.synchronize()
    if len(expected) != len(got):
        return {"ok": False, "error": f"{len(got)} outputs, expected {len(expected)}",
                "seconds": time.monotonic() - t0}
    worst, ok = 0.0, True
    for e, g in zip(expected, got):
        if not isinstance(e, torch.Tensor):
            ok = ok and e == g
            continue
        if not isinstance(g, torch.Tensor) or g.shape != e.shape:
            return {"ok": False, "error": "output shape differs", "seconds": time.monotonic() - t0}
        if e.is_floating_point():
            ok = ok and torch.allclose(g.to(e.dtype), e, atol=atol, rtol=rtol)
            if e.numel():
                worst = max(worst, (g.double() - e.double()).abs().max().item())
        else:
            ok = ok and torch.equal(g.to(e.dtype), e)
    return {"ok": bool(ok), "max_abs_err": worst, "seconds": time.monotonic() - t0}


def check_candidate(pytorch_code: str, kernel_code: str, *, device: str = "cpu",
                    atol: float = 1e-2, rtol: float = 1e-2, timeout: float = 600,
                    env: dict | None = None) -> dict:
    """Run the pair in a fresh subprocess (candidate code never runs in the caller)."""
    with tempfile.TemporaryDirectory(prefix="curate-check-") as d:
        ref_p, cand_p = Path(d, "reference.py"), Path(d, "candidate.py")
        ref_p.write_text(pytorch_code)
        cand_p.write_text(kernel_code)
        cmd = [sys.executable, "-m", "curate.synth.check", str(ref_p), str(cand_p),
               "--device", device, "--atol", str(atol), "--rtol", str(rtol)]
        try:
            proc = _run(cmd, d, env, timeout)
        except subprocess.TimeoutExpired:
            return {"ok": False, "error": "timeout", "status": "timeout"}
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            return {"ok": False, "status": "crashed" if proc.returncode < 0 else "error",
                    "error": (proc.stderr or proc.stdout)[-3000:]}
        res = json.loads(lines[-1])
        res.setdefault("status", "ok" if res.get("ok") else "mismatch")
        return res


def _run(cmd: list[str], cwd: str, env: dict | None, timeout: float):
    """The check's own process: credentials scrubbed from its environment, a session of its
    own, and on timeout its whole process group killed (anything the candidate started too)."""
    from ..isolation import scrubbed_env
    full_env = scrubbed_env(env)
    pkg_root = str(Path(__file__).resolve().parents[2])
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [pkg_root, full_env.get("PYTHONPATH")]))
    proc = subprocess.Popen(cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, _ = proc.communicate()
        raise subprocess.TimeoutExpired(cmd, timeout, output=out) from exc
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def setup() -> None:
    """WorkerPool setup: import torch once per worker."""
    import torch  # noqa: F401
    if os.environ.get("TRITON_INTERPRET") == "1":
        from .interpret import patch_libdevice
        patch_libdevice()


def handle(task: dict) -> dict:
    """WorkerPool handler: one pair, compared in this (sandboxed) worker."""
    if task.get("not_after") and time.time() > task["not_after"]:
        return {"ok": False, "status": "skipped_deadline"}
    try:
        res = compare(task["pytorch_code"], task["kernel_code"], task.get("device", "cpu"),
                      task.get("atol", 1e-2), task.get("rtol", 1e-2))
        res["status"] = "ok" if res["ok"] else "mismatch"
        return res
    except Exception as exc:  # noqa: BLE001
        msg = f"{type(exc).__name__}: {exc}"[:2000]
        oom = "out of memory" in msg.lower() or "ALLOC_FAILED" in msg
        return {"ok": False, "status": "oom" if oom else "error", "error": msg}
    finally:
        from .inductor_worker import release_memory
        release_memory()


def check_many(pairs: list[tuple[str, str]], *, device: str = "cpu", atol: float = 1e-2,
               rtol: float = 1e-2, timeout: float = 900, env: dict | None = None) -> list[dict]:
    """Like check_candidate for many (pytorch_code, kernel_code) pairs, in one subprocess
    (imports paid once); a pair that raises gets its error, the others carry on."""
    with tempfile.TemporaryDirectory(prefix="curate-check-") as d:
        items = []
        for i, (ref, cand) in enumerate(pairs):
            Path(d, f"ref{i}.py").write_text(ref)
            Path(d, f"cand{i}.py").write_text(cand)
            items.append([str(Path(d, f"ref{i}.py")), str(Path(d, f"cand{i}.py"))])
        Path(d, "batch.json").write_text(json.dumps(items))
        cmd = [sys.executable, "-m", "curate.synth.check", "--batch", str(Path(d, "batch.json")),
               "--device", device, "--atol", str(atol), "--rtol", str(rtol)]
        try:
            proc = _run(cmd, d, env, timeout)
            out = proc.stdout
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            proc = None
        got = {}
        for ln in out.splitlines():
            if ln.startswith("{"):
                rec = json.loads(ln)
                got[rec.pop("index")] = rec
        err = "" if proc is None else (proc.stderr or "")[-2000:]
        return [got.get(i, {"ok": False, "status": "crashed", "error": err or "timeout"})
                for i in range(len(pairs))]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("ref", nargs="?")
    ap.add_argument("cand", nargs="?")
    ap.add_argument("--batch")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--atol", type=float, default=1e-2)
    ap.add_argument("--rtol", type=float, default=1e-2)
    a = ap.parse_args(argv)
    if a.batch:
        for i, (ref, cand) in enumerate(json.loads(Path(a.batch).read_text())):
            try:
                res = compare(Path(ref).read_text(), Path(cand).read_text(), a.device, a.atol,
                              a.rtol)
                res["status"] = "ok" if res["ok"] else "mismatch"
            except Exception as exc:  # noqa: BLE001 - one bad pair costs one result
                res = {"ok": False, "status": "error", "error": f"{type(exc).__name__}: {exc}"[:2000]}
            res["index"] = i
            print(json.dumps(res), flush=True)
        return 0
    res = compare(Path(a.ref).read_text(), Path(a.cand).read_text(), a.device, a.atol, a.rtol)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
