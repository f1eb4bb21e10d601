"""The verify worker's entry points: `setup()` once per process (before any program is loaded)
and `handle(task)` per request (curate.isolation's HANDLER and SETUP).

`handle` decodes the request (messages.decode refuses anything that is not one), dispatches on
its type and returns the encoded reply. A failure it can classify is a `Failed` reply; a
request it cannot serve raises, and the pool reports the worker's error.
"""

from __future__ import annotations

import importlib
import os
import sys

import torch

from ..errors import classify_exception
from ..messages import (
    REQUESTS,
    Batch,
    Calls,
    Compare,
    Compile,
    Fetch,
    Finish,
    Load,
    ProbeCuda,
    ProbeReceive,
    ProbeSend,
    Reference,
    Release,
    Released,
    Reply,
    decode,
    encode,
)
from . import calls as calls_mod
from . import (
    candidate,
    clock,  # noqa: I001 - first: the timers are captured before anything else loads
    compare,
    judge,
    memory,
    models,
    precision,
    probes,
    session,
    transport,
    treehash,
)
from . import compile as compile_mod
from . import digest as digest_mod
from .hooks import setup_checks


def setup() -> None:
    """Once per worker: import what every task needs, let the gates record the trusted code and
    hook what they watch, then remember library and harness functions' identity."""
    device = os.environ.get("CURATE_VERIFY_DEVICE", "cpu")
    if device == "cuda" and torch.cuda.is_available():
        torch.cuda.init()
    if os.environ.get("TRITON_INTERPRET") == "1":
        # erf/tanh... under the Triton interpreter (CPU runs of Triton candidates)
        importlib.import_module("curate.synth.interpret").patch_libdevice()
    # importing torch._dynamo (which every inductor candidate pulls in) wraps
    # torch.manual_seed: before the snapshot, so that it is not taken for the candidate's
    # tampering. Not `import torch._dynamo`: that would bind `torch` locally
    importlib.import_module("torch._dynamo")
    memory.same_allocator_settings()
    setup_checks()
    session.remember_library()
    session.remember_harness({
        "main": sys.modules[__name__], "candidate": candidate, "judge": judge,
        "session": session, "calls": calls_mod, "compare": compare, "clock": clock,
        "transport": transport, "digest": digest_mod, "treehash": treehash, "models": models,
        "precision": precision, "memory": memory, "compile": compile_mod, "probes": probes})


def handle(task: dict) -> dict:
    req = decode(task, expect=REQUESTS)
    ext_dir = getattr(req, "extensions_dir", "") or os.environ.get(
        "TORCH_EXTENSIONS_DIR", os.path.join(os.getcwd(), "torch_extensions"))
    if os.environ.get("TORCH_EXTENSIONS_DIR") != ext_dir:
        # only when it changes: setting it is an audit event (os.putenv) that the candidate's
        # hook walks the stack for, and every timed batch is a request
        os.environ["TORCH_EXTENSIONS_DIR"] = ext_dir
    reply = _dispatch(req)
    memory.request_peak(type(req).__name__ + ("_timed" if getattr(req, "timed", False) else ""))
    if isinstance(req, (Compile, Release, Finish)):
        # not between a row's timed batches: they would allocate afresh inside the clock
        keep = req.keep_idle_gb if isinstance(req, Finish) else memory.KEEP_IDLE_GB
        reply = memory.release_device_memory(reply, keep)
    return encode(reply)


def _dispatch(req) -> Reply:
    if isinstance(req, Load):
        if req.role not in ("candidate", "judge"):
            raise ValueError(f"a session's role is candidate or judge, not {req.role!r}")
        return candidate.load(req) if req.role == "candidate" else judge.load(req)
    simple = {ProbeCuda: probes.probe_cuda, ProbeSend: probes.probe_send,
              ProbeReceive: probes.probe_receive, Compile: compile_mod.compile_candidate}
    if type(req) in simple:
        return simple[type(req)](req)
    if isinstance(req, Release):
        return Released(released=transport.release())
    if isinstance(req, Reference):
        return judge.reference(session.current("judge"), req.calls, req.keep_bytes)
    if isinstance(req, Compare):
        return judge.compare_call(session.current("judge"), req)
    if isinstance(req, Fetch):
        return candidate.fetch(session.current("candidate"), req)
    role = session.current_role()
    s = session.current(role)
    if isinstance(req, Calls):
        return _timed_digests(s, req, candidate.calls(s, req) if role == "candidate"
                              else judge.calls(s, req.calls, req.keep))
    if isinstance(req, Finish):
        return candidate.finish(s) if role == "candidate" else judge.finish(s)
    raise ValueError(f"no handler for {type(req).__name__}")


def _timed_digests(s: session.Session, req: Calls, reply: Reply) -> Reply:
    """A timed batch commits to its outputs in its own reply (inside the parent's clock): one
    digest per call, over every output byte."""
    if not (req.timed and req.keep and isinstance(reply, Batch)):
        return reply
    try:
        t0 = clock.TIMERS.perf_counter()
        reply.digests = [treehash.commit(s.digest, items) for items, _ in s.kept or []]
        reply.harness_ms["digest"] = round((clock.TIMERS.perf_counter() - t0) * 1e3, 4)
    except BaseException as exc:  # noqa: BLE001 - a device fault the candidate left behind
        if s.role == "judge":
            return judge.reference_failed(exc, s.device)
        failed = classify_exception(exc, "call")
        failed.findings = list(s.ctx.findings)
        return session.mark_if_patched(failed)
    return reply
