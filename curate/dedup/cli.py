"""`curate dedup`."""

from __future__ import annotations

import click

from ..cli import FiniteFloat
from ..pipeline.single import run_single
from ..report import echo_stage
from .core import ON
from .step import Dedup


@click.command("dedup")
@click.argument("inp", metavar="IN")
@click.option("-o", "--output", "out", required=True, help="Output table (.parquet or .jsonl).")
@click.option("--jaccard", type=FiniteFloat(0, 1, min_open=True), default=0.8, show_default=True,
              help="Rows whose token-shingle Jaccard similarity reaches this are duplicates.")
@click.option("--against", multiple=True, metavar="PATH|ORG/NAME",
              help="Evaluation set to decontaminate against: a KernelBench folder, problem "
                   "files or a table; a Hub dataset id (e.g. ScalingIntelligence/KernelBench, "
                   "cached once read); @kernelbench: the local copy named by "
                   "$CURATE_KERNELBENCH (or ../shared/data/kernelbench), else "
                   "ScalingIntelligence/KernelBench from the Hub. Repeatable.")
@click.option("--on", type=click.Choice(ON), default="both", show_default=True,
              help="Compare the reference, the candidate, or both (the pair).")
@click.option("--index", metavar="redis://HOST:PORT/NAME",
              help="Persistent MinHash LSH index in Redis: deduplicate against every row kept by "
                   "earlier runs, and add this run's kept rows. Default: in memory.")
@click.option("--abstract", is_flag=True,
              help="Abstract identifiers and literals, so that renamed copies collide.")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="Processes for signatures (default: cores).")
def dedup(inp, out, jaccard, against, on, index, abstract, workers):
    """Drop near-duplicate rows (one kept per cluster) and copies of evaluation problems.

    Dropped rows go to OUT's rejected table with `dup_of`, `cluster_id` and a reason
    (duplicate:exact, duplicate:near, duplicate:indexed, contaminated:level1/19_ReLU.py).

    \b
    Examples:
      curate dedup pairs.parquet -o unique.parquet --against @kernelbench
      curate dedup pairs.parquet -o unique.parquet --against ScalingIntelligence/KernelBench
    """
    step = Dedup(jaccard=jaccard, against=list(against), on=on, index=index, abstract=abstract,
                 workers=workers)
    st = run_single(step, inp, out)
    echo_stage(st, out)
    report = step.stats()
    if against and not report.get("decontaminated", True):
        click.echo("WARNING: no evaluation set was found: no decontamination was done", err=True)
