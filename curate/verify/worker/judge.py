"""The judge: the reference alone (this process never imports candidate code). Load, Reference
(the correctness calls' outputs, kept; the judge checks on them), Calls (the reference timed by
the same loop as the candidate), Compare (one candidate output, passed by the transport the
parent named, against the reference's of the same call) and Finish (the row's comparison).

A failure of the reference is `Failed(status="reference_error", reasons=["reference_failed",
...])`: the row cannot be judged, whatever the candidate did.
"""

from __future__ import annotations

import torch

from ...isolation import worker
from ...isolation.program import load_program
from ..errors import classify_exception
from ..messages import (
    Batch,
    Compare,
    Compared,
    Failed,
    Finished,
    Load,
    Loaded,
    Reply,
    kept_together,
)
from . import transport
from .calls import CallRunner, output_bytes
from .clock import TIMERS, flush_for
from .compare import compare
from .hooks import load_checks, run_hook
from .memory import peak_notes, reset_peak
from .models import base_sets, build_model, describe_sets, env_info, init_args, set_bytes
from .precision import precision_profile, reference_instability
from .session import Session, batch_reply, parse_calls
from .treehash import commit


def reference_failed(exc: BaseException, device: str) -> Failed:
    info = classify_exception(exc, "call")
    return Failed(status="reference_error", reasons=["reference_failed", *info.reasons],
                  error=info.error, recycle=info.recycle, notes={"env": env_info(device)})


def load(req: Load) -> Reply:
    s = Session.start(req)
    reset_peak(s.device)   # this row's peak, not an earlier row's
    s.checks = load_checks("judge") if s.gates else []
    try:
        t0 = TIMERS.perf_counter()
        mod = load_program(req.pytorch_code, f"curate_ref_{s.tag}")
        model = build_model(mod.Model, init_args(mod, req.seed_init, s.device), req.seed_init,
                            s.device)
        s.ctx.ref_module, s.ctx.ref_model = mod, model
        s.spent("load_model", t0)
        t0 = TIMERS.perf_counter()
        sets = base_sets(mod, req.seeds, s.device, req.poke, req.keep_bytes)
        s.use_runner(CallRunner(model, sets, s.device, TIMERS, flush_for(s.device)))
        s.spent("load_sets", t0)
        t0 = TIMERS.perf_counter()
        inputs = describe_sets(sets, len(req.seeds), s.runner)
        s.spent("load_describe", t0)
    except BaseException as exc:  # noqa: BLE001 - classify_exception raises Ctrl-C again
        return reference_failed(exc, s.device)
    return Loaded(env=env_info(s.device), inputs=inputs)


class Recomputed:
    """The reference's outputs of `calls`, computed again one at a time as they are read (the
    judge's checks see them all without holding them all)."""

    def __init__(self, s: Session, calls: list):
        self.s, self.calls = s, calls

    def __len__(self) -> int:
        return len(self.calls)

    def __iter__(self):
        for call in self.calls:
            yield _reference_of(self.s, call)[0]


def reference(s: Session, calls: list, keep_bytes: int) -> Reply:
    """The reference's outputs of `calls`, kept for Compare while all of them fit in
    `keep_bytes` (larger ones are computed again when their call is compared, one at a time,
    so that multi-GiB outputs are not all held on the device at once); then the judge's
    checks, which see them all."""
    planned = parse_calls(calls)
    try:
        first = s.runner.run(planned[:1], keep=True)
        size = sum(output_bytes(items) for items, _ in first.outputs)
        keep = kept_together(size, len(planned), keep_bytes)
        structure = first.outputs[0][1] if first.outputs else None
        if not keep:
            first.outputs.clear()   # one output at a time on the device from here
        rest = s.runner.run(planned[1:], keep=keep)
    except BaseException as exc:  # noqa: BLE001
        return reference_failed(exc, s.device)
    s.ref_calls = list(dict.fromkeys(planned))   # set 0 unscaled comes twice: once here
    if keep:
        for call, (items, struct) in zip(planned, first.outputs + rest.outputs):
            s.ref_out[call] = [x.detach() if isinstance(x, torch.Tensor) else x for x in items]
            s.ref_struct[call] = struct
        s.ctx.ref_outputs = [s.ref_out[c] for c in s.ref_calls]
    else:
        s.ctx.ref_outputs = Recomputed(s, s.ref_calls)
    t0 = TIMERS.perf_counter()
    try:
        run_hook(s.checks, "after_reference", s.ctx)
    finally:
        s.ctx.ref_outputs = None
        s.spent("reference_checks", t0)
    if keep:
        return batch_reply(s, first.ms + rest.ms, first.outputs + rest.outputs)
    s.kept = None   # nothing of them stays: each is computed again when compared
    return Batch(ms=first.ms + rest.ms, findings=list(s.ctx.findings), structure=structure,
                 out_bytes=size)


def calls(s: Session, planned_calls: list, keep: bool) -> Reply:
    planned = parse_calls(planned_calls)
    s.kept, s.kept_calls = None, []
    try:
        batch = s.runner.run(planned, keep=keep)
    except BaseException as exc:  # noqa: BLE001
        return reference_failed(exc, s.device)
    s.kept_calls = planned if keep else []
    return batch_reply(s, batch.ms, batch.outputs, batch.harness_ms)


def _reference_of(s: Session, call: tuple[int, float]) -> tuple[list, str]:
    if call in s.ref_out:
        return s.ref_out[call], s.ref_struct[call]
    return s.runner.output(*call)


def _refuse(s: Session, reason: str, detail: str) -> Compared:
    s.total.fail(reason, detail)
    s.ctx.flag(reason, fatal=True, detail=detail)
    return Compared(ok=False, findings=list(s.ctx.findings))


def _own_timed_output(s: Session, call: tuple) -> tuple[list, str] | None:
    """This judge's own output of `call` in its last timed batch, if the batch made that call;
    the rest of what the batch kept goes (its digests went with the batch's reply), so a
    checked timed output is compared without a forward again and without the batch's other
    outputs beside it (the reference's output held once, not twice, beside the one received)."""
    kept, calls = s.kept, s.kept_calls
    s.kept, s.kept_calls = None, []
    if kept and call in calls:
        return kept[calls.index(call)]
    return None


def compare_call(s: Session, req: Compare) -> Reply:
    (call,) = parse_calls([req.call])
    try:
        ref_items, ref_struct = _own_timed_output(s, call) or _reference_of(s, call)
    except BaseException as exc:  # noqa: BLE001
        return reference_failed(exc, s.device)
    where = f"call {call[0]}/{call[1]}"
    t0 = TIMERS.perf_counter()
    try:
        items = transport.receive(req.outputs, s.device, worker.task_fds(), req.transport)
    except Exception as exc:  # noqa: BLE001 - a hostile or broken description
        return _refuse(s, "outputs_unreadable", f"{where}: {type(exc).__name__}: {exc}"[:300])
    if req.digest is not None and commit(s.digest, items) != req.digest:
        return _refuse(s, "digest_mismatch",
                       f"{where}: the outputs received are not the ones committed to")
    s.spent("receive", t0)
    try:
        t0 = TIMERS.perf_counter()
        cmp = compare(ref_items, items, ref_struct, req.structure)
        s.total.merge(cmp)
        s.spent("compare", t0)
        if cmp.ok and req.precision and s.gates and not s.precision:
            t0 = TIMERS.perf_counter()
            _precision(s, call, ref_items, items)
            s.spent("precision", t0)
    except BaseException as exc:  # noqa: BLE001
        return reference_failed(exc, s.device)
    return Compared(ok=cmp.ok, findings=list(s.ctx.findings))


def _precision(s: Session, call, ref_items: list, items: list) -> None:
    keep = s.keep_bytes if s.device == "cuda" else None   # the CPU never skips it
    runner = s.runner
    # the inputs are made only for the float64 run, which large rows skip on the GPU
    s.precision = precision_profile(s.ctx.ref_model,
                                    lambda: runner.fresh(*call, keep=[*ref_items, *items]),
                                    ref_items, items, float64_keep_bytes=keep,
                                    input_bytes=set_bytes(runner.bufs))
    if s.precision.get("reduced_precision"):
        s.ctx.flag("reduced_precision", fatal=True)
    elif s.precision.get("below_float32"):
        # on the GPU a float32 reference and an honest candidate may differ in TF32 use: a
        # warning there, a failure on the CPU
        s.ctx.flag("precision_below_reference", fatal=s.device == "cpu")


def finish(s: Session) -> Reply:
    """The row's comparison; when it failed, whether the reference itself is stable (a float32
    reference its own float64 run does not reproduce cannot judge anyone)."""
    if not s.total.ok and s.gates and s.ref_calls:
        t0 = TIMERS.perf_counter()
        (k, scale) = s.ref_calls[0]
        ref_items, _ = _reference_of(s, (k, scale))
        unstable = reference_instability(s.ctx.ref_model,
                                         s.runner.fresh(k, scale, keep=ref_items), ref_items)
        if unstable:
            s.ctx.flag("reference_unstable", fatal=True, status="degenerate_reference")
            s.ctx.notes["reference_vs_float64"] = unstable
        s.spent("stability", t0)
    t = s.total
    peak = peak_notes(s.device, "judge_")
    return Finished(env=env_info(s.device), findings=list(s.ctx.findings),
                    notes={**s.ctx.notes, **s.precision, **peak,
                           "judge_work_s": s.work_notes()},
                    comparison={"ok": t.ok, "reasons": t.reasons, "max_abs_err": t.max_abs_err,
                                "max_rel_err": t.max_rel_err, "detail": t.detail,
                                "outputs": t.outputs})
