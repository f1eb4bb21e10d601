"""The split-infill pipeline step: one candidate row in, one infill row per core out."""

from __future__ import annotations

from ..pipeline.step import Outcome, Step
from .split import SplitConfig, split_row


class SplitInfill(Step):
    """Cut each candidate into prefix/core/suffix; rows with no core are dropped with a reason."""

    name = "split-infill"
    batch_size = 256

    def __init__(self, granularity: str = "kernel", multi: str = "per-kernel",
                 fim_format: str = "none"):
        self.cfg = SplitConfig(granularity, multi, fim_format)

    def config(self) -> dict:
        return {"granularity": self.cfg.granularity, "multi": self.cfg.multi,
                "fim_format": self.cfg.fim_format}

    def process(self, rows: list[dict]) -> list[Outcome]:
        out = []
        for row in rows:
            kept, reasons = split_row(row, self.cfg)
            out.append(Outcome.keep(*kept) if kept else Outcome.drop(dict(row), *reasons))
        return out
