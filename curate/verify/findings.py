"""One `Finding` type for what a gate found, used in the worker, on the wire and in the parent,
and the table of every gate: its name, the side it runs on and what a failure means.

A reason is machine-readable (`torch_in_forward`, `harness_access:frames`); its gate is the part
before the first colon. The table gives each gate its side (`parent`: read from the code before
anything runs; `judge`: computed by the trusted reference worker; `worker`: gathered inside the
candidate's own process, so evidence that can fail a row but whose silence proves nothing) and
the status a fatal finding gives the row.

Shared by both sides of verify: imports nothing from curate.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

SEVERITIES = ("fail", "warn", "pass")
SIDES = ("parent", "judge", "worker")


@dataclass(frozen=True)
class Finding:
    """What one gate found about one row. `severity` "fail" decides the row (with `status`, or
    the gate's status from the table), "warn" is recorded only, "pass" says the gate ran."""

    reason: str
    severity: str = "fail"
    status: str | None = None
    detail: str | None = None

    def __post_init__(self):
        if not isinstance(self.reason, str) or not self.reason:
            raise ValueError(f"a finding needs a reason, not {self.reason!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, not {self.severity!r}")

    @property
    def fatal(self) -> bool:
        return self.severity == "fail"

    @property
    def gate(self) -> str:
        return self.reason.split(":", 1)[0]

    def verdict(self) -> str:
        """The status a fatal finding gives its row."""
        return self.status or gate_status(self.reason)

    def to_wire(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_wire(cls, data) -> "Finding":
        if not isinstance(data, dict) or set(data) - {"reason", "severity", "status", "detail"}:
            raise ValueError(f"not a finding: {data!r}"[:200])
        detail = data.get("detail")
        return cls(reason=str(data.get("reason")), severity=str(data.get("severity", "fail")),
                   status=data.get("status"), detail=None if detail is None else str(detail)[:500])


@dataclass(frozen=True)
class Gate:
    name: str
    side: str
    severity: str = "fail"
    status: str = "deceptive"
    what: str = ""


def _table(*gates: Gate) -> dict[str, Gate]:
    return {g.name: g for g in gates}


# Every gate verify knows. A reason whose gate is not here is a worker-side finding of status
# `deceptive` (fail) by default: an unknown reason never passes a row silently.
GATES: dict[str, Gate] = _table(
    # parent: static reading of the candidate's code, before anything runs
    Gate("no_model_new", "parent", what="the candidate defines no ModelNew"),
    Gate("no_custom_kernel", "parent", what="no Triton, CUDA or C++ kernel in the code"),
    Gate("no_kernel_code", "parent"),
    Gate("syntax_error", "parent", what="the candidate does not parse"),
    Gate("kernel_not_called", "parent", what="kernels defined, none reachable from forward"),
    Gate("kernel_unused", "parent", "warn", what="a kernel launched from nowhere (dead code)"),
    Gate("torch_in_forward", "parent", what="forward computes with PyTorch, not its kernel"),
    Gate("torch_ops_in_forward", "parent", "warn"),
    Gate("torch_ops_in_extension", "parent", "warn"),
    Gate("extension_without_kernel", "parent"),
    Gate("try_except_fallback", "parent", what="a try/except falls back to PyTorch"),
    Gate("torch_compile_in_candidate", "parent"),
    Gate("extern_kernels", "parent", "warn"),
    Gate("half_precision", "parent", what="half-precision arithmetic in a float32 program"),
    Gate("tf32", "parent", "warn", what="TF32 matmuls enabled in a float32 program"),
    Gate("harness_access", "parent", what="reaches the harness: frames, sys, threads, fds..."),
    Gate("timer_patched", "parent", what="assigns to a clock the harness times with"),
    Gate("ctypes_loader", "parent", "warn"),
    Gate("builds_with_subprocess", "parent", "warn"),
    Gate("side_stream", "parent", "warn"),
    # judge: the trusted reference worker and the parent's own clock
    Gate("reference_ignores_inputs", "judge", status="degenerate_reference"),
    Gate("reference_zero_passes_tolerance", "judge", status="degenerate_reference"),
    Gate("reference_mostly_below_tolerance", "judge", "warn", status="degenerate_reference"),
    Gate("reference_unstable", "judge", status="degenerate_reference"),
    Gate("reduced_precision", "judge"),
    Gate("precision_below_reference", "judge"),
    Gate("timed_output_mismatch", "judge", what="a timed call's output differs from the reference"),
    Gate("timing_disagrees", "judge", what="reported times below what the parent's clock shows"),
    Gate("work_outside_call", "judge", what="the candidate's process works while it should idle"),
    Gate("digest_mismatch", "judge", what="a fetched output is not the one committed to"),
    Gate("protocol_violation", "judge", what="the worker's replies are not the protocol's"),
    Gate("outputs_unreadable", "judge"),
    # worker: gathered inside the candidate's process (can fail a row, never clear one)
    Gate("input_mutated", "worker"),
    Gate("stale_output", "worker"),
    Gate("output_aliases_input", "worker"),
    Gate("output_aliases_parameter", "worker"),
    Gate("output_reuses_earlier_output", "worker"),
    Gate("output_reused", "worker"),
    Gate("output_not_plain_tensor", "worker"),
    Gate("output_depends_on_history", "worker", "warn"),
    Gate("no_custom_kernel_ran", "worker"),
    Gate("kernel_output_unused", "worker"),
    Gate("cuda_kernel_not_launched", "worker"),
    Gate("side_stream_unsynced", "worker"),
    Gate("library_patched", "worker"),
    Gate("harness_tampered", "worker"),
    Gate("gate_call_mismatch", "worker", what="gate calls answered unlike the compared call"),
    Gate("check_failed", "worker", status="runtime_error"),
)


def gate_of(reason: str) -> Gate:
    name = reason.split(":", 1)[0]
    return GATES.get(name) or Gate(name, "worker")


def gate_status(reason: str) -> str:
    return gate_of(reason).status


def finding(reason: str, detail: str | None = None, fatal: bool | None = None,
            status: str | None = None) -> Finding:
    """A finding with the table's severity (or `fatal` where the caller decides it)."""
    sev = gate_of(reason).severity if fatal is None else ("fail" if fatal else "warn")
    return Finding(reason, sev, status, detail)
