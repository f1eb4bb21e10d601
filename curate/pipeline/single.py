"""Run one step as a stand-alone command: IN -> OUT, dropped rows beside OUT, resumable."""

from __future__ import annotations

import logging
from pathlib import Path

from ..errors import BadInput
from ..tableio import count_filled, sibling, table_format
from .runner import Runner, StageStats
from .step import Source, Step

log = logging.getLogger("curate")


def ledger_for(out: Path) -> Path:
    """`kb.parquet` -> `kb.ledger.sqlite`: the stand-alone command's resume file."""
    return out.with_name(f"{out.stem}.ledger.sqlite")


def run_single(step: Step | Source, inp: str | Path | None, out: str | Path, *,
               progress: bool = True, keep_ledger: bool = True) -> StageStats:
    out = Path(out)
    table_format(out)
    rejected = sibling(out, "rejected")
    if inp is not None:  # the runner checks the table itself before any work
        inp = Path(inp)
        if inp.resolve() == out.resolve():
            raise BadInput("output would overwrite the input", path=str(out),
                           fix="write to another file with -o")
    runner = Runner(out.parent, ledger_path=ledger_for(out) if keep_ledger else ":memory:",
                    progress=progress)
    try:
        if isinstance(step, Source):
            return runner.run_source(0, step, out, rejected)
        return runner.run_step(0, step, inp, out, rejected)
    finally:
        runner.close()


def require_candidates(inp: str | Path, *, warn_share: float = 0.5) -> None:
    """Verify needs candidates: a table where no row has a `kernel_code` has not been through
    synthesis (bad input, exit 2); where many rows lack one, say so before the work starts."""
    rows, filled = count_filled(inp, "kernel_code")
    how = f"run `curate synth inductor {inp} -o cands.parquet` first and verify cands.parquet"
    if rows and not filled:
        raise BadInput(f"none of the {rows} rows has a kernel_code: synthesis has not run, "
                       "so there is no candidate to verify", path=str(inp), fix=how)
    if rows and rows - filled >= warn_share * rows:
        log.warning("%s: %d of %d rows have no kernel_code (synthesis has not run for them); "
                    "they come out as unsupported (no_candidate). To make candidates: %s",
                    inp, rows - filled, rows, how)
