"""Run one step as a stand-alone command: IN -> OUT, dropped rows beside OUT, resumable."""

from __future__ import annotations

from pathlib import Path

from ..errors import BadInput
from ..tableio import sibling, table_format
from .runner import Runner, StageStats
from .step import Source, Step


def ledger_for(out: Path) -> Path:
    """`kb.parquet` -> `kb.ledger.sqlite`: the stand-alone command's resume file."""
    return out.with_name(f"{out.stem}.ledger.sqlite")


def run_single(step: Step | Source, inp: str | Path | None, out: str | Path, *,
               progress: bool = True, keep_ledger: bool = True) -> StageStats:
    out = Path(out)
    table_format(out)
    rejected = sibling(out, "rejected")
    if inp is not None:
        inp = Path(inp)
        if not inp.is_file():
            raise BadInput("no such file", path=str(inp), fix="check the input path")
        table_format(inp)
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
