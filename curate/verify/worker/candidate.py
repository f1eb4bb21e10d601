"""The candidate's worker: Load (the reference module for inputs and parameters, then the
candidate), Calls (a batch, the first `check` calls watched by the gates), Fetch (one kept
output of the last batch, for the judge) and Finish (the closing gates and tamper checks).

Every failure the candidate causes is a `Failed` reply with the findings so far; a request this
worker cannot serve (no session, an unknown transport) raises, and the pool reports it.
"""

from __future__ import annotations

import time

import torch

from ...isolation import worker
from ...isolation.program import load_program
from ..errors import classify_exception
from ..messages import Calls, Failed, Fetch, Finished, Load, Loaded, Outputs, Reply
from . import transport
from .calls import CallRunner, OutputRefused, inputs_equal
from .clock import TIMERS, flush_for, reset_persisting_l2
from .hooks import CandidateCall, load_checks, run_hook
from .memory import peak_notes, reset_peak
from .models import (
    base_sets,
    build_model,
    env_info,
    init_args,
    share_parameters,
)
from .session import (
    Session,
    batch_reply,
    candidate_module,
    mark_if_patched,
    parse_calls,
    remember_library,
    tampered_harness,
    tampered_library,
)
from .treehash import commit


def _failed(s: Session, failed: Failed, env: dict | None = None) -> Failed:
    failed.findings = list(s.ctx.findings)
    failed.notes = {**s.ctx.notes, **({"env": env} if env else {})}
    return mark_if_patched(failed)


def load(req: Load) -> Reply:
    kept = candidate_module() if req.keep_candidate else None
    s = Session.start(req)
    ctx = s.ctx
    reset_peak(s.device)
    s.checks = load_checks("worker") if s.gates else []
    env = env_info(s.device)
    ctx.ref_module = load_program(req.pytorch_code, f"curate_ref_{s.tag}")
    run_hook(s.checks, "before_import", ctx)
    if kept is not None:
        # the library was remembered before the candidate's first import: a second session
        # keeps that picture, so nothing the candidate changed since is taken for the library
        ctx.cand_module = kept
    else:
        remember_library()   # what the gates install is not the candidate's tampering
        t_import = time.monotonic()
        try:
            ctx.cand_module = load_program(req.kernel_code or "", f"curate_cand_{s.tag}")
        except BaseException as exc:  # noqa: BLE001 - classify_exception raises Ctrl-C again
            return _failed(s, classify_exception(exc, "import"), env)
        ctx.notes["import_s"] = round(time.monotonic() - t_import, 3)
    if not hasattr(ctx.cand_module, "ModelNew"):
        return _failed(s, Failed(status="compile_error", reasons=["no_modelnew"],
                                 error="the candidate defines no class ModelNew"), env)
    try:
        _build(s, req)
    except BaseException as exc:  # noqa: BLE001
        return _failed(s, classify_exception(exc, "build"), env)
    return mark_if_patched(Loaded(env=env, notes=ctx.notes, findings=list(ctx.findings)))


def _build(s: Session, req: Load) -> None:
    """Both models from the same seed, the reference's parameters given to ModelNew, and the
    input sets every call is made from."""
    ctx, device, seed = s.ctx, s.device, req.seed_init
    ref_model = build_model(ctx.ref_module.Model, init_args(ctx.ref_module, seed, device), seed,
                            device)
    new_model = build_model(ctx.cand_module.ModelNew, init_args(ctx.ref_module, seed, device),
                            seed, device)
    ctx.notes["parameters"] = share_parameters(ref_model, new_model)
    ctx.ref_model, ctx.new_model = ref_model, new_model
    sets = base_sets(ctx.ref_module, req.seeds, device, req.poke, req.keep_bytes)
    s.use_runner(CallRunner(new_model, sets, device, TIMERS, flush_for(device)))
    s.ctx.input_sets = len(req.seeds)
    run_hook(s.checks, "after_import", ctx)


def calls(s: Session, req: Calls) -> Reply:
    planned = parse_calls(req.calls)
    try:
        return _calls(s, req, planned)
    except OutputRefused as exc:
        s.ctx.flag(exc.reason, fatal=True)
        return _failed(s, Failed(status="deceptive", reasons=[exc.reason],
                                 error=str(exc)[:500]))
    except BaseException as exc:  # noqa: BLE001
        return _failed(s, classify_exception(exc, "call"))


def _calls(s: Session, req: Calls, planned: list[tuple[int, float]]) -> Reply:
    if req.timed and not s.timed_started:
        s.timed_started = True
        run_hook(s.checks, "before_timing", s.ctx)

    def after(i, args, items, struct, copy):
        if i >= req.check:
            return
        k, scale = planned[i]
        t_gates = TIMERS.perf_counter()
        if s.runner.remade:
            # large sets: no second set beside the buffers (digests of the buffers as the call
            # left them and written again); the gates take what they need through
            # ctx.pristine. `items` is None where the batch kept a copy of the outputs
            if not s.runner.unchanged(k, scale, args, keep=[*(items or ()), *(copy or ())]):
                s.ctx.flag("input_mutated")
            pristine = []
        else:
            pristine = s.runner.pristine(k, scale)
            if not inputs_equal(args, pristine):
                s.ctx.flag("input_mutated")
        if copy is None:
            copy = [x.detach().clone() if isinstance(x, torch.Tensor) else x for x in items]
        run_hook(s.checks, "after_call", s.ctx, CandidateCall(
            trial=req.first + i, seed=k, inplace=req.first + i > 0, inputs=args,
            pristine=pristine, outputs=copy, structure=struct, scale=scale))
        s.spent("gates", t_gates)

    s.kept = None  # the previous batch's outputs go before this batch allocates
    batch = s.runner.run(planned, keep=req.keep, after=after, first=req.first)
    # nothing more before the reply: the parent's clock is running
    return batch_reply(s, batch.ms, batch.outputs, batch.harness_ms)


def fetch(s: Session, req: Fetch) -> Reply:
    """One kept output of the last batch, by the transport the parent named, with its digest
    (computed over the bytes being sent)."""
    if req.transport not in transport.TRANSPORTS:
        raise ValueError(f"unknown transport {req.transport!r}")
    if not s.kept or not 0 <= req.index < len(s.kept):
        raise RuntimeError(f"no kept output {req.index}")
    items, struct = s.kept[req.index]
    t0 = TIMERS.perf_counter()
    transport.release(empty_cache=False)
    try:
        desc, fds = transport.send(items, req.transport)
        value = commit(s.digest, items)
    except BaseException as exc:  # noqa: BLE001 - outputs the transport cannot carry
        return _failed(s, classify_exception(exc, "call"))
    s.spent("export", t0)
    if fds:
        worker.reply_fds(fds)
    return Outputs(outputs=desc, structure=struct, digest=value)


def finish(s: Session) -> Reply:
    """The closing gates, then whether the candidate replaced library or harness functions."""
    ctx = s.ctx
    if s.timed_started:
        run_hook(s.checks, "after_timing", ctx, None)
    run_hook(s.checks, "finish", ctx)
    notes = ctx.notes
    notes.update(peak_notes(s.device))
    notes["worker_work_s"] = s.work_notes()
    notes["persisting_l2_reset"] = reset_persisting_l2() if s.device == "cuda" else None
    patched = tampered_library()
    if patched:  # torch, F, Tensor methods or timers replaced for the whole process
        ctx.flag("library_patched", fatal=True)
        notes["patched"] = patched[:20]
    harness = tampered_harness()
    if harness:
        ctx.flag("harness_tampered", fatal=True)
        notes["harness_tampered"] = harness[:20]
    return mark_if_patched(Finished(findings=list(ctx.findings), notes=notes))
