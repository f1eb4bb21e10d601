"""A row's verification record (the `verification` column, JSON): what was checked, on what, by
which versions, and what came out; enough for `curate replay` to run the same verification
again. Assembled in the parent from what the row's phases kept (`VerifyResult.notes`) and what
the trusted judge reported; schemas/record.v1.yaml and docs/record.md describe its fields.

The run's secret (which scales the calls get, which timed outputs the judge checks) is never
recorded: it is one per run, so a record written while the run goes on could tell a later row
of the same run what will be checked. The record says that it existed.
"""

from __future__ import annotations

import json
import math
import statistics

from .. import __version__
from ..record import row_key
from . import machine
from .findings import GATES
from .opinion import second_opinion
from .row import row_seeds

RECORD_VERSION = 1
SETTINGS = ("device", "trials", "seed", "timeout", "time_budget", "min_timed", "max_timed",
            "gates", "static_gates", "threshold", "second_shape", "digest")


def assemble(verifier, row: dict, run, res) -> str:
    """The record of one verified (or rejected) row as a JSON string."""
    cfg, notes = verifier.cfg, res.notes
    rec = {
        "record": RECORD_VERSION,
        "versions": {"curate": __version__, "gates": machine.gate_versions()},
        "outcome": outcome(res, run),
        "settings": {**{k: getattr(cfg, k) for k in SETTINGS},
                     "backend": run.backend if run else row.get("backend")},
        "seeds": seeds(cfg, row),
        "findings": findings(run),
        "inputs": notes.get("inputs"),
        "outputs": notes.get("outputs"),
        "correctness": {"trials": cfg.trials, "input_sets": cfg.trials + 1,
                        "correct": res.correct, "max_abs_err": res.max_abs_err,
                        "max_rel_err": res.max_rel_err},
        "timing": timing(cfg, res),
        "device": device(cfg, notes),
        "software": software(cfg, res, row),
        "sandbox": sandbox(verifier),
        "second_shape": notes.get("second_shape") or {"checked": False, "why": "not_verified"},
        "second_opinion": second_opinion(row.get("kernel_code")),
        "phases_s": notes.get("phases_s"),
        "work_s": {"judge": notes.get("judge_work_s"), "candidate": notes.get("worker_work_s")},
        "memory": memory(notes),
    }
    return json.dumps(_plain(rec), sort_keys=True, separators=(",", ":"))


def memory(notes: dict) -> dict:
    """What the row reserved on its device against what each worker says it held at its peak
    (the candidate's figure is its own claim): evidence that calibrates `row_memory_gb`."""
    keys = ("size_gb", "reserved_gb", "peak_gb", "peak_reserved_gb", "judge_peak_gb",
            "judge_peak_reserved_gb", "peak_rss_gb", "judge_peak_rss_gb",
            "peak_by_request_gb", "judge_peak_by_request_gb")
    return {k.replace("peak_", "candidate_peak_", 1) if k.startswith("peak_") else k: notes[k]
            for k in keys if notes.get(k) is not None}


def read(value) -> dict | None:
    """A row's record as a dict (None where there is none or it does not parse)."""
    if isinstance(value, dict):
        return value
    if not isinstance(value, str) or not value:
        return None
    try:
        out = json.loads(value)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def outcome(res, run) -> dict:
    """The verdict, and for a rejected row where it failed (the phase it was in, the gate and
    the side of the finding that decided it)."""
    out = {"status": res.status, "reasons": list(res.reasons), "error": res.error}
    if res.status != "verified":
        # a row that ended before its first named phase ended in the precheck (static gates)
        out["phase"] = (run.where or "precheck") if run is not None else "harness"
        fatal = [f for f in (run.findings if run else []) if f.fatal]
        if fatal:
            gate = GATES.get(fatal[0].gate)
            out["gate"] = {"reason": fatal[0].reason, "side": gate.side if gate else "worker"}
    return out


def seeds(cfg, row: dict) -> dict:
    return {"run": cfg.seed, **row_seeds(cfg.seed, row_key(row), cfg.trials),
            "secret": "one per run, drawn at start, never recorded (it picks scales and "
                      "which timed outputs are checked)"}


def findings(run) -> dict:
    """Every finding with its gate and side; the gates of the sides that ran and found
    nothing passed."""
    if run is None:
        return {"found": [], "passed": []}
    found = []
    for f in run.findings:
        gate = GATES.get(f.gate)
        found.append({**f.to_wire(), "gate": f.gate, "side": gate.side if gate else "worker"})
    ran = {"parent"} if run.cfg.gates and run.cfg.static_gates else set()
    if run.cfg.gates and run.res.notes.get("inputs") is not None:
        ran |= {"judge", "worker"}
    named = {f.gate for f in run.findings}
    passed = sorted(g.name for g in GATES.values() if g.side in ran and g.name not in named)
    return {"found": found, "passed": passed}


def timing(cfg, res) -> dict | None:
    samples = res.notes.get("samples_ms")
    if not samples:
        return None
    gpu = cfg.device == "cuda"
    out = {"method": "cuda events per call in each side's worker; the parent's wall clock over "
                     "each batch bounds them" if gpu else
                     "wall clock (perf_counter) per call; the parent's clock over each batch",
           "l2_flush": gpu, "sync": "device-wide (every stream)" if gpu else None,
           "orders": "alternating (candidate first in even rounds)",
           "cpu_threads": cfg.cpu_threads,
           "digest": {"sums": "position-weighted sums of the output words (not binding)",
                      "tree": "a tree of 128-bit states over the output words (binding)"
                      }[cfg.digest],
           **(res.notes.get("timing") or {}),
           "ref_ms": summary(samples.get("ref")), "kernel_ms": summary(samples.get("kernel")),
           "speedup": res.speedup, "interval": [res.speedup_ci_low, res.speedup_ci_high],
           "check": res.notes.get("timing_check")}
    if res.notes.get("pairs"):
        out["pairs"] = res.notes["pairs"]
    return out


def summary(xs) -> dict | None:
    xs = sorted(float(x) for x in xs or [])
    if not xs:
        return None

    def q(p):
        return xs[min(len(xs) - 1, int(p * len(xs)))]
    return {"n": len(xs), "median": statistics.median(xs), "mean": statistics.fmean(xs),
            "min": xs[0], "p05": q(0.05), "p95": q(0.95), "max": xs[-1]}


def device(cfg, notes: dict) -> dict:
    env = notes.get("judge_env") or {}
    if cfg.device == "cuda":
        return {"kind": "cuda", "gpu": env.get("gpu"), "capability": env.get("capability"),
                "driver": machine.nvidia_driver(), "cuda": env.get("cuda_version")}
    return {"kind": "cpu", **machine.cpu()}


def software(cfg, res, row: dict) -> dict:
    return {"torch": res.torch_version, "triton": res.triton_version, "cuda": res.cuda_version,
            **machine.compilers(cfg.device),
            "flags": machine.declared_flags(row.get("kernel_code"))}


def sandbox(verifier) -> dict:
    label = verifier.sandbox
    p = verifier.placement
    out = {"candidate": label, "judge": label,
           "compile": label if verifier.cfg.compile_ahead else None,
           "probe": verifier.sandbox_probe, "transport": verifier.transport}
    if p is not None:
        out["limits"] = {"memory_gb": p.limits.memory_gb, "output_bytes": p.limits.output_bytes}
    return out


def _plain(x):
    """JSON without NaN or infinities (as strings), floats rounded to 6 significant digits."""
    if isinstance(x, float):
        return float(f"{x:.6g}") if math.isfinite(x) else str(x)
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x
