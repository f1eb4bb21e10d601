"""One side of a row (the candidate's worker, the judge, the compile worker) as the parent
talks to it: every request typed, every reply decoded against what that request may get back,
every second of it charged to the row's budget. Whatever ends the row raises `RowOver` with the
row's result already decided, so a row's phases read as a straight line."""

from __future__ import annotations

import os
import threading
import time

from . import messages as msg
from .budget import RowClock
from .findings import Finding
from .result import VerifyResult
from .verdict import apply_findings, judge_failure, task_failure


class RowOver(Exception):
    """The row is decided (its VerifyResult says how); no further phase runs."""


class Side:
    """A held worker in one role of one row."""

    def __init__(self, worker, role: str, res: VerifyResult, clock: RowClock, findings: list,
                 on_phase=None):
        self.worker, self.role, self.res, self.clock = worker, role, res, clock
        self.findings = findings          # the row's findings, shared by its sides
        self.on_phase = on_phase or (lambda name: None)
        self.last_wall = 0.0
        self.deadline_bound = False       # the last request's limit was the row's deadline

    @property
    def pid(self) -> int | None:
        return self.worker.pid

    def ask(self, request: msg.Message, phase: str, expect: tuple, *, fds=None,
            accept_fds: bool = False, compiler_grace: float = 0.0, cap: float | None = None):
        """Send `request`; the reply if it is one of `expect` and not a failure. Returns
        `(reply, fds)`: descriptors that came with it belong to the caller. `cap` bounds this
        request below the phase's budget (a timed batch that holds the device alone)."""
        limit = self._limit(request, phase, cap)
        self.on_phase(f"{self.role} {request.kind}")
        kwargs = {"fds": fds, "accept_fds": accept_fds}
        if compiler_grace:
            kwargs["compiler_grace"] = compiler_grace
        t0 = time.perf_counter()
        tr = self.worker.call(msg.encode(request), limit, **kwargs)
        return self._received(tr, time.perf_counter() - t0, phase, expect)

    def begin(self, request: msg.Message, phase: str, expect: tuple) -> Pending:
        """Send `request` and return at once, so this side works while the caller asks the
        other; `Pending.wait()` reads the reply in the caller's thread (only that thread writes
        the row's result). No descriptors either way."""
        limit = self._limit(request, phase, None)
        return Pending(self, msg.encode(request), limit, phase, expect)

    def _limit(self, request: msg.Message, phase: str, cap: float | None) -> float:
        self.deadline_bound = self.clock.deadline_binds(phase, cap)
        limit = self.clock.limit(phase)
        if cap is not None:
            limit = min(limit, cap)
        if limit <= 0:
            self._end("timeout", f"{phase}_deadline",
                      error=f"the row's {phase} budget was spent before its {request.kind}")
        return limit

    def _received(self, tr, wall: float, phase: str, expect: tuple):
        self.last_wall = wall
        self.clock.charge(phase, tr.seconds - (getattr(tr, "compiler_s", 0.0) or 0.0))
        try:
            return self._reply(tr, expect), list(tr.fds)
        except RowOver:
            _close(tr.fds)
            raise

    def _reply(self, tr, expect: tuple):
        if not tr.ok:
            status, reasons, error = task_failure(tr.status, self.role, seconds=tr.seconds,
                                                  exit_code=tr.exit_code, output=tr.output,
                                                  error=tr.error)
            if tr.status == "timeout" and self.deadline_bound:
                reasons.append("row_deadline")   # the row's time ran out, not the phase's
            if self.role == "judge":
                status, reasons = judge_failure(tr.status, reasons)
            self._end(status, *reasons, error=error)
        try:
            reply = msg.decode(tr.value, (*expect, msg.Failed))
        except msg.ProtocolError as exc:
            if self.role == "judge":
                self._end("reference_error", "judge_protocol_error", error=str(exc))
            self.findings.append(Finding("protocol_violation", "fail", detail=str(exc)[:300]))
            self._decide()
            raise AssertionError("unreachable")  # pragma: no cover
        for k, v in _safe_notes(reply.notes).items():   # never over the parent's own notes
            self.res.notes.setdefault(k, v)
        self.take(reply.findings)
        if isinstance(reply, msg.Failed):
            status, reasons = reply.status, list(reply.reasons)
            if self.role == "judge" and status not in ("reference_error", "degenerate_reference"):
                status, reasons = judge_failure(status, reasons)
            self._end(status, *reasons, error=reply.error)
        return reply

    def take(self, findings: list[Finding]) -> None:
        """Findings from this side. The candidate's own process can report against itself;
        its silence proves nothing (the parent's checks decide what clears a row)."""
        self.findings.extend(findings)
        if any(f.fatal for f in findings):
            self._decide()

    def _decide(self) -> None:
        if apply_findings(self.findings, self.res):
            raise RowOver

    def _end(self, status: str, *reasons: str, error: str | None = None) -> None:
        if apply_findings(self.findings, self.res):   # deception outranks the error it caused
            self.res.reason(*reasons)
        else:
            self.res.end(status, *reasons, error=error)
        raise RowOver


class Pending:
    """A request in flight on a side, sent from a thread of its own (`Side.begin`)."""

    def __init__(self, side: Side, task: dict, limit: float, phase: str, expect: tuple):
        self.side, self.phase, self.expect = side, phase, expect
        self._box: dict = {}
        self._thread = threading.Thread(target=self._call, args=(task, limit), daemon=True,
                                        name=f"{side.role}-{task.get('kind', 'request')}")
        self._thread.start()

    def _call(self, task: dict, limit: float) -> None:
        t0 = time.perf_counter()
        try:
            self._box["tr"] = self.side.worker.call(task, limit)
        except BaseException as exc:  # noqa: BLE001 - raised again by wait()
            self._box["exc"] = exc
        self._box["wall"] = time.perf_counter() - t0

    def wait(self):
        """The reply, as `Side.ask` returns it (the row may end here: `RowOver`)."""
        self._thread.join()
        if "exc" in self._box:
            raise self._box["exc"]
        self._box["read"] = True
        return self.side._received(self._box["tr"], self._box["wall"], self.phase,
                                   self.expect)

    def drop(self) -> None:
        """Wait for the request to end and discard its reply (the row ended meanwhile)."""
        self._thread.join()
        tr = self._box.get("tr")
        if tr is not None and not self._box.get("read"):
            _close(tr.fds)


def _safe_notes(notes: dict) -> dict:
    """A worker's notes are for people: plain values only, bounded in size."""
    out = {}
    for k, v in list(notes.items())[:40]:
        if isinstance(k, str) and isinstance(v, (str, int, float, bool, list, dict, type(None))):
            out[k[:60]] = v if not isinstance(v, str) else v[:500]
    return out


def _close(fds) -> None:
    for fd in fds or []:
        try:
            os.close(fd)
        except OSError:
            pass
