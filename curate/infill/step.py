"""The split-infill pipeline step: one candidate row in, one infill row per core out."""

from __future__ import annotations

from collections import Counter

from ..errors import BadInput
from ..pipeline.step import Outcome, Step
from .split import SplitConfig, split_row


class SplitInfill(Step):
    """Cut each candidate into prefix/core/suffix; rows with no core are dropped with a reason."""

    name = "split-infill"
    batch_size = 256

    def __init__(self, granularity: str = "kernel", multi: str = "per-kernel",
                 fim_format: str = "none"):
        try:
            self.cfg = SplitConfig(granularity, multi, fim_format)
        except ValueError as exc:
            raise BadInput(f"split-infill: {exc}", fix="see `curate split-infill --help`") from None
        self.kinds: Counter = Counter()

    def config(self) -> dict:
        return {"granularity": self.cfg.granularity, "multi": self.cfg.multi,
                "fim_format": self.cfg.fim_format}

    def process(self, rows: list[dict]) -> list[Outcome]:
        out = []
        for row in rows:
            kept, reasons = split_row(row, self.cfg)
            self.kinds.update(r["core_kind"] for r in kept)
            out.append(Outcome.keep(*kept) if kept else Outcome.drop(dict(row), *reasons))
        return out

    def stats(self) -> dict:
        """Infill rows made in this run, by core kind (rows read back from the ledger excluded)."""
        return {"core_kinds": dict(sorted(self.kinds.items()))}
