"""The dynamic gates as a worker check (hooks.WorkerCheck): install the launch hooks and the
audit hook before the candidate is imported, wrap its compiled kernels after, count the custom
launches of the first compared call, poison free memory before every watched call, and after
the first one run the gates' own calls (sequence.py) through the worker's input preparation."""

from __future__ import annotations

import re

from . import integrity
from .candidate import GateCalls
from .ghost import custom_op_mode
from .install import install, instrument
from .poison import poison_free_memory
from .sequence import check_candidate
from .state import FAIL, STATE

_CUDA_KERNEL_NAME = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                               r"(?:static\s+)?void\s+(\w+)")


def cuda_kernel_names(code: str | None) -> list[str]:
    return sorted(set(_CUDA_KERNEL_NAME.findall(code or "")))


def other_call(k: int, scale: float, sets: int) -> tuple[int, float]:
    """Call b: another trial's input set, as the parent's calls name them. Not the same set at
    another scale: a program whose output does not change with the scale of its inputs
    (cosine similarity, a normalization) would look stale to the gates."""
    if sets > 1:
        return (k + 1) % sets, scale
    return k, other_scale(scale)


def other_scale(scale: float) -> float:
    """Call b's scale: by the parent's own rule (1 + m / 2**14, m in 1..4096) and far from
    call a's, so that the two calls' values differ well past any tolerance."""
    return 1.0 + 1 / 2**14 if scale >= 1.125 else 1.25


class DynamicGates:
    name = "dynamic"

    def before_import(self, ctx) -> None:
        install()
        stop_counting()  # a mode left over from an earlier row of this worker
        integrity.begin_row()
        STATE.phase = "candidate"
        # flag at once: a refused write or socket raises inside the candidate, and the worker
        # then answers with the error and the findings gathered so far
        STATE.on_violation = lambda reason: ctx.flag(reason, fatal=True)
        self.checked = False

    def after_import(self, ctx) -> None:
        instrument(ctx.cand_module, ctx.new_model)
        poison_free_memory(ctx.device)
        start_counting()  # the launches of the first compared call

    def after_call(self, ctx, call) -> None:
        if not self.checked:
            self.checked = True
            real = stop_counting()
            if real is not None and not real:
                ctx.flag("no_custom_kernel_ran", fatal=True,
                         detail="no custom launch in the first compared call")
            self._check(ctx, call)
        self._flag_violations(ctx)
        poison_free_memory(ctx.device, like=call.pristine)

    def before_timing(self, ctx) -> None:
        stop_counting()
        self._flag_violations(ctx)

    def after_timing(self, ctx, timing) -> None:
        self._flag_violations(ctx)

    def finish(self, ctx) -> None:
        stop_counting()
        self._flag_violations(ctx)
        for reason, severity in integrity.integrity_findings():
            ctx.flag(reason, fatal=severity == FAIL)
        integrity.restore_integrity()
        STATE.phase = "idle"
        STATE.on_violation = None

    def _flag_violations(self, ctx) -> None:
        for reason, severity in integrity.candidate_violations():
            ctx.flag(reason, fatal=severity == FAIL)

    def _check(self, ctx, call) -> None:
        scale = float(getattr(call, "scale", 1.0))
        if ctx.call_inputs is not None and ctx.pristine is not None:
            calls = GateCalls(ctx.call_inputs, ctx.pristine, (call.seed, scale),
                              other_call(call.seed, scale, ctx.input_sets), ctx.unchanged)
        else:  # a worker without a runner: the watched call's own inputs, and no call b
            calls = GateCalls.of_lists(call.pristine, None)
        expected = [t.detach() for t in call.outputs if hasattr(t, "detach")]  # a copy already
        names = cuda_kernel_names(ctx.kernel_code) if ctx.backend == "cuda" else ()
        findings = check_candidate(ctx.new_model, device=ctx.device, reference=ctx.ref_model,
                                   cuda_kernel_names=names, calls=calls, expected_a=expected)
        for reason, severity in findings:
            ctx.flag(reason, fatal=severity == FAIL)
        ctx.notes["custom_launches"] = STATE.last_launches[:20]


# -- counting the launches of the compared call itself ---------------------------------------
_COUNTING: list = []     # [(mode or None, launches)] while the first compared call is counted


def start_counting() -> None:
    """Count custom launches from now until stop_counting(): the first compared call's own
    launches, so that a candidate running its kernels only when the gates call is seen."""
    stop_counting()
    launches: list = []
    STATE.counting, STATE.launches = True, launches
    try:
        mode = custom_op_mode()
        mode.__enter__()
    except Exception:  # noqa: BLE001
        mode = None
    _COUNTING.append((mode, launches))


def stop_counting() -> list | None:
    """The launches counted since start_counting() (None when it was not counting)."""
    if not _COUNTING:
        return None
    mode, launches = _COUNTING.pop()
    if mode is not None:
        try:
            mode.__exit__(None, None, None)
        except Exception:  # noqa: BLE001, S110 - not the innermost mode any more
            pass
    STATE.counting, STATE.launches = False, []
    return list(launches)
