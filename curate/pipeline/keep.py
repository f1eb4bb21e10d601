"""The keep filter of `curate build`: verified rows whose speedup lower bound meets the threshold."""

from __future__ import annotations

from .step import Filter


class KeepVerified(Filter):
    name = "keep"

    def __init__(self, threshold: float = 2.0):
        self.threshold = float(threshold)

    def config(self) -> dict:
        return {"threshold": self.threshold}

    def keep(self, row: dict) -> tuple[bool, str | None]:
        status = row.get("status")
        if status != "verified":
            return False, f"status:{status or 'unverified'}"
        low = row.get("speedup_ci_low")
        if low is None:
            return False, "speed_not_measured"
        if low < self.threshold:
            return False, f"below_threshold:{self.threshold:g}"
        return True, None
