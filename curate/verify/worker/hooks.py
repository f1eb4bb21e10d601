"""Extension points for the worker side's gates (curate/verify/worker/gates/): small checks
called at fixed points inside a sandboxed verify worker.

In the candidate's worker a `WorkerCheck` is called:

    before_import(ctx)              the reference module is loaded, the candidate's code is not
    after_import(ctx)               the candidate module is loaded, models are built
    after_call(ctx, call)           after each of the first calls the worker watches
    before_timing(ctx) / after_timing(ctx, timing)
    finish(ctx)                     last, before the worker answers Finish

In the judge (the trusted reference worker) a `JudgeCheck` sees the reference's outputs:
`after_reference(ctx)` (is the reference any test at all?).

A check calls `ctx.flag(reason, fatal=...)`: a fatal reason is a finding of severity "fail" (the
row's status from findings.GATES unless `status=` names another), a non-fatal one "warn".
Checks come from `curate.verify.worker.gates` (lists `WORKER_CHECKS` and `JUDGE_CHECKS`).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import is_out_of_memory
from ..findings import Finding

log = logging.getLogger("curate.verify")


@dataclass
class CheckContext:
    """What a check can look at; `findings` and `notes` go back to the parent (JSON-able)."""

    role: str                                   # "candidate" or "judge"
    device: str
    backend: str | None
    pytorch_code: str
    kernel_code: str | None
    ref_module: Any = None
    cand_module: Any = None
    ref_model: Any = None
    new_model: Any = None
    timers: Any = None
    # the worker's own input preparation (CallRunner.inputs / .pristine): `call_inputs(k, scale)`
    # writes call (k, scale) into the buffers every call uses and returns them, `pristine(k,
    # scale)` is a separate copy. Gates call the model only through these, so nothing in the
    # arguments tells their calls from the compared and timed ones
    call_inputs: Callable | None = None
    pristine: Callable | None = None
    # `unchanged(k, scale, args, keep)`: whether the buffers a call left still hold its inputs
    # (CallRunner.unchanged: for sets made again, without a second set on the device)
    unchanged: Callable | None = None
    input_sets: int = 0     # trial input sets the calls may name (the poked set not counted)
    ref_outputs: list | None = None             # judge: per call, the reference's outputs
    findings: list[Finding] = field(default_factory=list)
    notes: dict = field(default_factory=dict)

    def flag(self, reason: str, fatal: bool = False, status: str | None = None,
             detail: str | None = None) -> None:
        """Record a finding once per reason; a fatal flag upgrades an earlier warning."""
        severity = "fail" if fatal else "warn"
        for i, old in enumerate(self.findings):
            if old.reason == reason:
                if fatal and not old.fatal:
                    self.findings[i] = Finding(reason, severity, status or old.status,
                                               detail or old.detail)
                return
        self.findings.append(Finding(reason, severity, status, detail))

    def reasons(self, fatal: bool | None = None) -> list[str]:
        return [f.reason for f in self.findings if fatal is None or f.fatal == fatal]


@dataclass
class CandidateCall:
    """One watched candidate forward."""

    trial: int              # index of the call in its batch
    seed: int               # the call's input set k
    inplace: bool           # inputs rewritten in place into the previous trial's buffers
    inputs: list            # what the candidate was given (may have been mutated by it)
    pristine: list          # an untouched copy of the same inputs ([] for large sets on the GPU)
    outputs: list           # the harness's copy of the flat outputs (on the device)
    structure: str
    scale: float = 1.0      # the call's scale (inputs of set k times scale)


class WorkerCheck:
    name = "check"

    def before_import(self, ctx: CheckContext) -> None: ...
    def after_import(self, ctx: CheckContext) -> None: ...
    def after_call(self, ctx: CheckContext, call: CandidateCall) -> None: ...
    def before_timing(self, ctx: CheckContext) -> None: ...
    def after_timing(self, ctx: CheckContext, timing: Any) -> None: ...
    def finish(self, ctx: CheckContext) -> None: ...


class JudgeCheck:
    name = "check"

    def after_reference(self, ctx: CheckContext) -> None: ...


def setup_checks() -> None:
    """Once per worker, from the worker's setup(), before any program is loaded: the gates
    record what code is trusted (by identity: the files loaded now) and hook what they watch."""
    importlib.import_module("curate.verify.worker.gates").setup()


def load_checks(kind: str) -> list:
    """Instances from `curate.verify.worker.gates.WORKER_CHECKS` / `JUDGE_CHECKS`."""
    if kind not in ("worker", "judge"):
        raise ValueError(f"checks are 'worker' or 'judge', not {kind!r}")
    # imported by name: the gates use this module's types, this module never imports them
    gates = importlib.import_module("curate.verify.worker.gates")
    items = getattr(gates, "WORKER_CHECKS" if kind == "worker" else "JUDGE_CHECKS", [])
    return [c() if isinstance(c, type) else c for c in items]


def run_hook(checks: list, hook: str, ctx: CheckContext, *args) -> None:
    """Call `hook` on every check. A check that breaks never raises over the candidate's own
    result, and it fails the row closed (`runtime_error`, reason `check_failed:<name>`, the
    error in notes): a gate that could not run has not passed, and a candidate that makes a
    gate break (by running out of memory inside it, say) must not be `verified` for it."""
    for check in checks:
        fn = getattr(check, hook, None)
        if fn is None:
            continue
        try:
            fn(ctx, *args)
        except Exception as exc:  # noqa: BLE001
            name = getattr(check, "name", "check")
            log.warning("check %s.%s failed: %s", name, hook, exc)
            ctx.flag(f"check_failed:{name}", fatal=True, status="runtime_error",
                     detail=f"{hook}: {type(exc).__name__}")
            # a gate that ran out of memory found nothing: the row gets the GPU's alone retry
            if is_out_of_memory(exc):
                ctx.flag("out_of_memory")
            ctx.notes.setdefault("check_errors", []).append(
                f"{name}.{hook}: {type(exc).__name__}: {str(exc)[:300]}")

