"""The `select` pipeline step: keep the best verified samples of each problem (see core.py)."""

from __future__ import annotations

import logging

from ..errors import BadInput
from ..pipeline.step import Outcome, Step
from .core import RULES, select

log = logging.getLogger("curate")


class Select(Step):
    """Among the verified rows of one problem (same ref_id), keep `per_problem` by `by`.

    Its answer for a row depends on the other samples of its problem, so the runner hands it
    the whole table at once."""

    name = "select"
    batch_size = None

    def __init__(self, by: str = "fastest", per_problem: int = 1, within: float = 0.1):
        if by not in RULES:
            raise BadInput(f"unknown selection rule {by!r}", fix=f"use one of {', '.join(RULES)}")
        if int(per_problem) < 1:
            raise BadInput(f"per_problem must be >= 1, got {per_problem}", fix="e.g. 1")
        if not 0.0 <= float(within) < 1.0:
            raise BadInput(f"within must be in [0, 1), got {within}",
                           fix="a fraction of the best speedup, e.g. 0.1")
        self.by, self.per_problem, self.within = by, int(per_problem), float(within)
        self.report: dict = {}

    def config(self) -> dict:
        cfg = {"by": self.by, "per_problem": self.per_problem}
        if self.by == "concise":
            cfg["within"] = self.within
        return cfg

    def stats(self) -> dict:
        """The rule and its counts (stats.json, and from there the dataset card)."""
        return dict(self.report) or self.config()

    def process(self, rows: list[dict]) -> list[Outcome]:
        result = select(rows, self.by, self.per_problem, self.within)
        self.report = result.stats
        log.info("select: %d of %d rows kept (%s, %d per problem; %d of %d problems had a "
                 "verified row)", result.stats["kept"], len(rows), self.by, self.per_problem,
                 result.stats["problems_with_verified"], result.stats["problems"])
        return [Outcome.keep(row) if keep else Outcome.drop(row, reason)
                for row, keep, reason in zip(rows, result.keep, result.reasons)]
