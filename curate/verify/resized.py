"""A verified row's second pass, at a second size of its problem (shapes.py writes it): a fresh
candidate worker and a fresh judge load the reference program at the new sizes, build both
models from them and compare two calls (correctness.correctness_calls), by the same requests
as any first pass. The candidate sees a Load and a correctness sequence like every other: only
the shapes differ.

Correct at its own sizes and not at the second (wrong outputs, a crash, a hang, a gate failing
there) is `shape_specialized`. Where the second size cannot be judged (the reference fails
there, the row's budget or the GPU's memory runs out, the sizes are not module constants, the
generator compiled for the problem's own shapes), the row keeps its status and its record says
why.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import traceback

from .correctness import correctness
from .shapes import FACTOR, second_shape
from .sides import RowOver

log = logging.getLogger("curate.verify")
# what the second pass cannot blame on the candidate: the reference failing at the new sizes,
# the row's budget spent before a request, device memory that other rows may hold (on the CPU a
# worker's memory is its own: running out there is the candidate's doing, as is hanging where
# the reference did not)
NOT_JUDGED = {"reference_error": "reference_fails", "degenerate_reference": "reference_fails",
              "timeout": "timeout", "unsupported": "unsupported"}


def not_judged(status: str, reasons: list, device: str) -> str | None:
    """Why the second pass's outcome says nothing about the candidate (None: it does). A
    candidate that times out within a budget of its own hangs where the reference did not;
    one cut by what is left of the row's deadline ran out of the first pass's time."""
    if status == "timeout" and "row_deadline" in reasons:
        return "row_deadline"
    if status == "timeout" and "candidate_timeout" in reasons:
        return None
    if device == "cuda" and "out_of_memory" in reasons:
        return "out_of_memory"
    return NOT_JUDGED.get(status)


def static_compile(row: dict) -> bool:
    """A candidate whose generator compiled it for the problem's own shapes (torch.compile with
    dynamic=False, curate's `synth inductor`): specialized by construction, and says so."""
    return "/inductor" in (row.get("generator") or "")


class SecondShape:
    """A verified row's second pass, planned: its code at the second sizes and the device memory
    it reserves. `run` on the first pass's workers where the row's reservation can grow to it
    (waiting for that where it cannot deadlock), else later on fresh workers under a
    reservation of its own."""

    def __init__(self, row, code: str, gb: float):
        self.row, self.code, self.gb = row, code, gb

    def run(self, device, sides=None, held_gb: float = 0.0) -> bool:
        """The pass, on `sides` (the first pass's candidate and judge, whose reservation is
        `held_gb`) or on fresh workers. False: it did not run (the row's reservation may not
        wait to grow: run it again without `sides`)."""
        extra = max(0.0, self.gb - held_gb) if sides else 0.0
        row, sub = self.row, _sub_run(self.row, self.code)
        row.phase(None)   # the second pass's seconds are its own (phases_s: "second shape ...")
        if extra:
            # waiting with the first pass's reservation held, ahead of rows not yet admitted:
            # giving it back and queueing afresh for the whole second size (on fresh workers)
            # cost rows in a busy run 10-20 s more than the pass itself
            sub.phase("waiting to grow its device memory")
            grown = device.memory.regrow(row.grant, extra)
            sub.phase(None)
            if not grown:
                _spent(row, sub)
                return False
        try:
            if sides:
                _pass(sub, device, sides)
            else:
                sub.phase("waiting for device memory")
                with device.memory.reserve(self.gb):
                    _pass(sub, device)
        except RowOver:
            pass
        except Exception as exc:  # noqa: BLE001 - a harness bug here costs the check, not the row
            log.error("verify: the second shape failed on row %s: %s", row.row.get("id"),
                      traceback.format_exc())
            sub.res.end("runtime_error", "harness_error", error=f"{type(exc).__name__}: {exc}")
            row.res.notes["second_shape"]["why"] = "harness_error"
            return True
        finally:
            if extra:
                device.memory.give_back(row.grant, extra)
            sub.phase(None)
            _spent(row, sub)
        row.res.notes["second_shape"]["reused_workers"] = bool(sides)
        _decide(row, sub, row.res.notes["second_shape"])
        return True


def _spent(row, sub) -> None:
    for k, v in sub.spent.items():
        row.spent[f"second shape {k}"] += v
    sub.spent.clear()


def plan_second(row, device, need) -> SecondShape | None:
    """After a first pass that left the row `verified`: the second pass to run, or None (the
    row's `notes["second_shape"]` says why not). `need(scale)`: the device memory the row
    reserves with its inputs and outputs `scale` times as large; a second shape that would need
    the whole device is not run."""
    if row.res.status != "verified":
        return None
    mode = row.cfg.second_shape
    note = row.res.notes["second_shape"] = {"mode": mode, "checked": False}
    if mode == "off":
        note["why"] = "off"
        return None
    if mode == "auto" and static_compile(row.row):
        note["why"] = "static_compile"
        return None
    shape = second_shape(row.row["pytorch_code"])
    note.update(shape.record())
    if shape.code is None:
        return None
    gb = need(float(FACTOR ** len(shape.sizes)))
    if gb >= device.memory.capacity and not row.exclusive:
        note["why"] = "too_large"
        return None
    return SecondShape(row, shape.code, gb)


def _sub_run(row, code: str):
    sub = type(row)(row.run, row.index, {**row.row, "pytorch_code": code})   # the same phases
    sub.cfg = dataclasses.replace(row.cfg, trials=1)
    sub.key = f"{row.key}:second"
    sub.second_pass = True
    sub.rng = random.Random(f"{row.run.secret.hex()}:{sub.key}")
    sub.clock = row.clock.next_pass()   # its own phase budgets; the row's deadline bounds both
    sub.findings = []
    return sub


def _pass(sub, device, sides=None) -> None:
    """Load both sides at the second sizes (a reused candidate worker keeps the module it
    imported: only the reference is loaded again), two correctness calls, the verdict."""
    if sides:
        cand, judge = (sub.side(side.worker, side.role) for side in sides)
        sub._load(judge, cand, reused=True)
        _judge(sub, device, cand, judge)
        return
    sub.phase("waiting for workers")
    env = {**sub.run.row_cache(sub.row), **device.env()}
    with device.pools["candidate"].hold(env=env) as cw, \
            device.pools["judge"].hold(env=device.env()) as jw:
        cand, judge = sub.side(cw, "candidate"), sub.side(jw, "judge")
        sub._load(judge, cand)   # a reference that fails here is nobody's fault
        _judge(sub, device, cand, judge)


def _judge(sub, device, cand, judge) -> None:
    correctness(sub, device, cand, judge)
    sub._finish(device, cand, judge, first=True)


def _decide(row, sub, note: dict) -> None:
    got, res = sub.res, row.res
    note.update(status=got.status, reasons=list(got.reasons), error=got.error,
                max_abs_err=got.max_abs_err, max_rel_err=got.max_rel_err,
                inputs=got.notes.get("inputs"), outputs=got.notes.get("outputs"),
                findings=[f.to_wire() for f in sub.findings])
    if got.status == "verified":
        note["checked"] = True
        return
    why = not_judged(got.status, got.reasons, row.cfg.device)
    if why:
        note["why"] = why
        return
    # whatever else went wrong at the second size (wrong outputs, a crash, a gate that found
    # garbage in them or a fallback taken only there) is the row being specialized: its first
    # pass ran every gate at the problem's own sizes and passed
    note["checked"] = True
    sizes = ", ".join(f"{k} {a}->{b}" for k, (a, b) in note["sizes"].items())
    res.end("shape_specialized", "shape_specialized",
            *(f"second_shape:{r}" for r in got.reasons or [got.status]),
            error=f"correct at the problem's sizes, {got.status} at the second ({sizes}): "
                  f"{got.error or ''}".strip())
