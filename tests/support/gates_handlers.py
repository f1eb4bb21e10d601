"""Worker-side handler for the gate tests: load a candidate in the sandbox and run the dynamic
gates on it (the verify worker does the same inside its candidate session)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

_n = [0]


def setup():
    from curate.verify.worker import gates
    from curate.verify.worker.gates.install import install
    gates.setup()   # the trusted code, before any program is loaded
    install()


def _load(code: str, stem: str):
    _n[0] += 1
    name = f"{stem}_{os.getpid()}_{_n[0]}"
    path = Path(os.getcwd()) / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def handle(task):
    import torch

    from curate.verify.worker.gates import integrity
    from curate.verify.worker.gates.ghost import phase
    from curate.verify.worker.gates.install import instrument
    from curate.verify.worker.gates.sequence import check_candidate
    device = task.get("device", "cpu")
    integrity.begin_row()
    ref = _load(task["pytorch_code"], "ref")
    torch.manual_seed(0)
    init = ref.get_init_inputs()
    ref_model = ref.Model(*init).to(device)
    ins = []
    for seed in (1, 2):
        torch.manual_seed(seed)
        ins.append([x.to(device) if isinstance(x, torch.Tensor) else x for x in ref.get_inputs()])
    with torch.no_grad(), phase("reference"):
        ref_outs = [ref_model(*[x.clone() for x in i]) for i in ins]
    findings = reference_findings(ref_outs)
    refs_differ = not any(r == "reference_ignores_inputs" for r, _ in findings)
    with phase("candidate"):
        cand = _load(task["kernel_code"], "cand")
        torch.manual_seed(0)
        model = cand.ModelNew(*init).to(device)
    instrument(cand, model)
    try:
        findings += check_candidate(model, ins[0], ins[1], device=device,
                                    ref_outputs_differ=refs_differ)
    except Exception as exc:  # noqa: BLE001
        findings.append((f"candidate_raised:{type(exc).__name__}", "error"))
        findings += integrity.integrity_findings() + integrity.candidate_violations()
    integrity.restore_integrity()
    return {"findings": [list(f) for f in findings], "retire_worker": integrity.tainted()}


def reference_findings(ref_outs: list) -> list[tuple[str, str]]:
    """The judge's degeneracy check on the reference's outputs, one per call."""
    from curate.verify.worker.gates.degeneracy import ReferenceDegeneracy
    from curate.verify.worker.gates.state import flat
    from curate.verify.worker.hooks import CheckContext
    ctx = CheckContext(role="judge", device="cpu", backend=None, pytorch_code="",
                       kernel_code=None, ref_outputs=[flat(o) for o in ref_outs])
    ReferenceDegeneracy().after_reference(ctx)
    return [(f.reason, f.severity) for f in ctx.findings]


def probe(task):
    """One sandbox probe: write, read or connect; reports what happened, never raises."""
    import socket
    kind = task["kind"]
    try:
        if kind == "write":
            with open(task["path"], "w") as fh:
                fh.write("x")
        elif kind == "read":
            with open(task["path"]) as fh:
                return {"ok": True, "content": fh.read()}
        elif kind == "connect":
            socket.create_connection(("127.0.0.1", task["port"]), timeout=3).close()
        elif kind == "kill_parent":
            os.kill(os.getppid(), 0)
        return {"ok": True}
    except OSError as exc:
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
