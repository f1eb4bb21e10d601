"""What verify writes for one row, and the statuses and backends it knows."""

from __future__ import annotations

from dataclasses import dataclass, field

STATUSES = ("verified", "incorrect", "deceptive", "compile_error", "runtime_error", "timeout",
            "crashed", "degenerate_reference", "reference_error", "unsupported",
            "shape_specialized")
BACKENDS = ("triton", "cuda", "cpp")


@dataclass
class VerifyResult:
    """The columns verify writes for one row (plus what the run cost, for stats and benchmarks)."""

    status: str = "runtime_error"
    correct: bool | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    speedup: float | None = None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    ref_ms: float | None = None
    kernel_ms: float | None = None
    reasons: list[str] = field(default_factory=list)
    gpu: str | None = None
    torch_version: str | None = None
    triton_version: str | None = None
    cuda_version: str | None = None
    sandbox: str | None = None
    error: str | None = None
    verification: str | None = None   # the row's verification record (JSON, record.py)
    # not columns: what the run cost
    seconds: float = 0.0
    timed_wall_s: float = 0.0
    timed_trials: int = 0
    device_index: int | None = None
    notes: dict = field(default_factory=dict)

    COLUMNS = ("status", "correct", "max_abs_err", "max_rel_err", "speedup", "speedup_ci_low",
               "speedup_ci_high", "ref_ms", "kernel_ms", "gpu", "torch_version",
               "triton_version", "cuda_version", "sandbox", "error", "verification")

    def columns(self) -> dict:
        return {k: getattr(self, k) for k in self.COLUMNS}

    def reason(self, *rs: str) -> None:
        for r in rs:
            if r and r not in self.reasons:
                self.reasons.append(r)

    def end(self, status: str, *reasons: str, error: str | None = None) -> None:
        """Decide the row: `status` with `reasons` (and an error message where there is one)."""
        self.status = status if status in STATUSES else "runtime_error"
        self.reason(*reasons)
        if error is not None:
            self.error = short(error)


def infer_backend(code: str | None) -> str | None:
    if not code:
        return None
    if "load_inline" in code or "__global__" in code:
        return "cuda" if ("cuda_sources" in code or "__global__" in code) else "cpp"
    if "triton" in code:
        return "triton"
    if "cpp_pybinding" in code or "extern \"C\"" in code:
        return "cpp"
    return None


def short(text: str | None, limit: int = 2000) -> str | None:
    if text is None:
        return None
    text = text.strip()
    return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2:]
