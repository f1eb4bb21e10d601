"""`curate ingest`."""

from __future__ import annotations

import click

from ..pipeline.single import run_single
from ..report import echo_stage
from .ingest import FORMATS, IngestSource


@click.command("ingest")
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--output", "out", required=True, help="Output table (.parquet or .jsonl).")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="auto", show_default=True,
              help="kernelbench: folders of problem files; kernelbook: KernelBook-style tables; "
                   "table: curate's own tables.")
def ingest(paths, out, fmt):
    """Read reference programs into a table; unusable problems go to OUT's rejected table.

    PATHS are KernelBench folders (level1/ ...), folders or files of KernelBench-format problems,
    or .parquet/.jsonl tables. `@examples` names the bundled example corpus.

    \b
    Example:
      curate ingest ../shared/data/kernelbench -o kb.parquet
    """
    st = run_single(IngestSource(paths, fmt), None, out, keep_ledger=False)
    echo_stage(st, out)
