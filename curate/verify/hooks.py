"""Extension points for gates (curate/verify/gates/): small checks called at fixed points.

Worker side (inside the candidate's sandboxed worker), a `WorkerCheck` is called:

    before_import(ctx)              the reference module is loaded, the candidate's code is not
    after_import(ctx)               the candidate module is loaded, models are built
    after_call(ctx, call)           after every candidate forward in the correctness trials
    before_timing(ctx) / after_timing(ctx, timing)
    finish(ctx)                     last, before the worker answers

Parent side (trusted process), a `ParentCheck` sees the reference outputs and the candidate's
report: `before_run(ctx)` (static checks of the code, before anything runs),
`after_reference(ctx)` (e.g. does the reference depend on its inputs?) and
`after_candidate(ctx)` (e.g. the worker's notes and outputs).

A check calls `ctx.flag(reason, fatal=...)`: fatal reasons make the row `deceptive` (worker or
parent) unless `status=` names another status; non-fatal ones are recorded as warnings. Checks
are found in `curate.verify.gates` (lists `WORKER_CHECKS` and `PARENT_CHECKS`), when present.
"""

from __future__ import annotations

import importlib
import logging
import re
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("curate.verify")


@dataclass
class Flag:
    reason: str
    fatal: bool = False
    status: str | None = None   # None: `deceptive` when fatal


@dataclass
class CheckContext:
    """What a check can look at; `notes` travel from the worker to the parent (JSON-able)."""

    role: str                                   # "candidate" (worker) or "parent"
    device: str
    backend: str | None
    pytorch_code: str
    kernel_code: str | None
    ref_module: Any = None
    cand_module: Any = None
    ref_model: Any = None
    new_model: Any = None
    timers: Any = None
    row: dict | None = None                     # parent side only
    ref_outputs: list | None = None             # parent side only: per trial, list of tensors
    cand_outputs: list | None = None            # parent side only
    worker_report: dict | None = None           # parent side only
    flags: list[Flag] = field(default_factory=list)
    notes: dict = field(default_factory=dict)

    def flag(self, reason: str, fatal: bool = False, status: str | None = None) -> None:
        if not any(f.reason == reason for f in self.flags):
            self.flags.append(Flag(reason, fatal, status))


@dataclass
class CandidateCall:
    """One candidate forward in the correctness trials."""

    trial: int
    seed: int
    inplace: bool           # inputs rewritten in place into the previous trial's buffers
    inputs: list            # what the candidate was given (may have been mutated by it)
    pristine: list          # an untouched copy of the same inputs
    outputs: list           # flat list of output tensors (on the device)
    structure: str


class WorkerCheck:
    name = "check"

    def before_import(self, ctx: CheckContext) -> None: ...
    def after_import(self, ctx: CheckContext) -> None: ...
    def after_call(self, ctx: CheckContext, call: CandidateCall) -> None: ...
    def before_timing(self, ctx: CheckContext) -> None: ...
    def after_timing(self, ctx: CheckContext, timing: Any) -> None: ...
    def finish(self, ctx: CheckContext) -> None: ...


class ParentCheck:
    name = "check"

    def before_run(self, ctx: CheckContext) -> None: ...       # static checks of the code
    def after_reference(self, ctx: CheckContext) -> None: ...
    def after_candidate(self, ctx: CheckContext) -> None: ...


def load_checks(kind: str) -> list:
    """Instances from `curate.verify.gates.WORKER_CHECKS` / `PARENT_CHECKS` (classes or objects)."""
    try:
        gates = importlib.import_module("curate.verify.gates")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("curate.verify.gates"):
            return []
        raise
    items = getattr(gates, "WORKER_CHECKS" if kind == "worker" else "PARENT_CHECKS", [])
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
            ctx.flag(f"check_failed:{name}", fatal=True, status="runtime_error")
            # a gate that ran out of memory found nothing (on the H200, level1/87's degeneracy
            # gate did, in a worker left fragmented): the row gets the GPU's alone retry
            if is_out_of_memory(exc):
                ctx.flag("out_of_memory")
            ctx.notes.setdefault("check_errors", []).append(
                f"{name}.{hook}: {type(exc).__name__}: {str(exc)[:300]}")



_OOM = re.compile(r"out of memory|CUDA out of memory|std::bad_alloc|Cannot allocate memory|"
                  r"CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED", re.IGNORECASE)


def is_out_of_memory(exc: BaseException) -> bool:
    """The one reading of "ran out of memory", for candidates (harness) and gates alike."""
    return (isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError"
            or bool(_OOM.search(str(exc))))
