"""What a verify worker keeps: its one row's session (a candidate's or the judge's, between the
parent's requests) and, for the whole process, the identity of the library and harness
functions it started with (a candidate that replaces them is found when its row finishes, and
its worker is replaced).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from types import ModuleType

import torch

from ..messages import DIGESTS, Batch, Load
from .calls import CallRunner, output_bytes
from .clock import TIMER_FUNCTIONS, TIMERS
from .compare import Comparison
from .hooks import CheckContext


@dataclass
class Session:
    """One row in one worker: `role` candidate or judge."""

    role: str
    device: str
    tag: str
    gates: bool
    ctx: CheckContext
    checks: list = field(default_factory=list)
    runner: CallRunner | None = None
    kept: list | None = None                        # the last batch's (outputs, structure)
    kept_calls: list = field(default_factory=list)  # judge: the calls of `kept`, timed batches
    ref_out: dict = field(default_factory=dict)     # judge: (set, scale) -> reference outputs
    ref_struct: dict = field(default_factory=dict)
    ref_calls: list = field(default_factory=list)   # judge: the correctness calls, in order
    total: Comparison = field(default_factory=Comparison)   # judge: every comparison
    precision: dict = field(default_factory=dict)
    timed_started: bool = False
    keep_bytes: int | None = None                   # Load.keep_bytes
    digest: str = "sums"                            # Load.digest (treehash.commit)
    # seconds of this worker's own work by part (evidence for the stats: where a row's time
    # goes inside a request, e.g. the judge's compare between receiving and its float64 run)
    work_s: Counter = field(default_factory=Counter)

    def spent(self, part: str, since: float) -> None:
        self.work_s[part] += TIMERS.perf_counter() - since

    def work_notes(self) -> dict:
        return {k: round(v, 4) for k, v in sorted(self.work_s.items())}

    @classmethod
    def start(cls, req: Load) -> "Session":
        """A new session for `req`, replacing the worker's previous one."""
        global _current
        ctx = CheckContext(role=req.role, device=req.device, backend=req.backend or None,
                           pytorch_code=req.pytorch_code, kernel_code=req.kernel_code,
                           timers=TIMERS)
        if req.digest not in DIGESTS:
            raise ValueError(f"unknown digest {req.digest!r}")
        _current = cls(role=req.role, device=req.device, tag=req.tag, gates=req.gates, ctx=ctx,
                       keep_bytes=req.keep_bytes, digest=req.digest)
        return _current

    def use_runner(self, runner: CallRunner) -> None:
        """The gates call the model through the same input preparation as every other call."""
        self.runner = runner
        self.ctx.call_inputs, self.ctx.pristine = runner.inputs, runner.pristine
        self.ctx.unchanged = runner.unchanged


_current: Session | None = None


def parse_calls(calls: list) -> list[tuple[int, float]]:
    """`[[set, scale], ...]` from a request (a malformed one is the parent's error: raises)."""
    out = []
    for call in calls:
        if not isinstance(call, list) or len(call) != 2:
            raise ValueError(f"a call is [set, scale], not {call!r}"[:200])
        out.append((int(call[0]), float(call[1])))
    return out


def batch_reply(s: Session, ms: list, outputs: list, harness_ms: dict | None = None) -> Batch:
    """What a batch reports; its outputs stay in the worker for Fetch."""
    s.kept = outputs
    first = outputs[0] if outputs else None
    return Batch(ms=ms, findings=list(s.ctx.findings), structure=first[1] if first else None,
                 out_bytes=output_bytes(first[0]) if first else 0,
                 harness_ms={k: round(v, 4) for k, v in (harness_ms or {}).items()})


def current(role: str) -> Session:
    """The loaded session of `role` (a request for a role this worker has not loaded is the
    parent's error: it raises, and the pool reports the worker error)."""
    if _current is None or _current.role != role:
        raise RuntimeError(f"{role} session not loaded")
    return _current


def candidate_module():
    """The candidate module this worker's last session imported (asking for one where none
    was imported is the parent's error: it raises, and the pool reports the worker error)."""
    if _current is None or _current.role != "candidate" or _current.ctx.cand_module is None:
        raise RuntimeError("keep_candidate: this worker has imported no candidate")
    return _current.ctx.cand_module


def current_role() -> str:
    if _current is None:
        raise RuntimeError("no session loaded")
    return _current.role


# -- what the measurement relies on: library and harness functions, by identity ---------------
_library: dict | None = None
_harness: dict = {}
_harness_modules: dict[str, ModuleType] = {}


def _watched() -> dict:
    import torch.nn.functional as F
    return {"torch": torch, "F": F, "Tensor": torch.Tensor, "Module": torch.nn.Module,
            "cuda": torch.cuda, "time": time}


def _snapshot() -> dict:
    return {(name, k): v for name, mod in _watched().items() for k, v in list(vars(mod).items())
            if callable(v)}


def remember_library() -> None:
    """The library functions as they are now (at setup; again once the gates installed their
    hooks, which are not the candidate's tampering)."""
    global _library
    _library = _snapshot()


def remember_harness(modules: dict[str, ModuleType]) -> None:
    """The worker's own modules whose functions a candidate must not replace."""
    _harness_modules.update(modules)
    _harness.update({(n, k): v for n, mod in modules.items() for k, v in list(vars(mod).items())
                     if callable(v) or k in ("TIMERS", "TIMER_FUNCTIONS")})


def tampered_library() -> list[str]:
    """Library functions that candidate code replaced in this process."""
    if _library is None:
        return []
    mods = _watched()
    return sorted(f"{n}.{k}" for (n, k), v in _library.items() if vars(mods[n]).get(k) is not v)


def tampered_harness() -> list[str]:
    """Functions of the worker itself (timing loop, comparison, transport, digest) or its
    timers that were replaced since it started: the candidate reached into its measurement."""
    changed = [f"{n}.{k}" for (n, k), v in _harness.items()
               if vars(_harness_modules[n]).get(k) is not v]
    if any(a is not b for a, b in zip(TIMERS.functions(), TIMER_FUNCTIONS)):
        changed.append("timers")
    return sorted(changed)


def mark_if_patched(reply):
    """A worker whose library functions were replaced is replaced after this reply."""
    changed = tampered_library()
    if changed:
        reply.recycle = True
        reply.notes.setdefault("patched", changed[:20])
    return reply
