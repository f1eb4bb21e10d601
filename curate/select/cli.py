"""`curate select`."""

from __future__ import annotations

import click

from ..cli import FiniteFloat
from ..pipeline.single import run_single
from ..report import echo_stage
from .core import RULES
from .step import Select


@click.command("select")
@click.argument("inp", metavar="IN")
@click.option("-o", "--output", "out", required=True, help="Output table (.parquet or .jsonl).")
@click.option("--by", type=click.Choice(RULES), default="fastest", show_default=True,
              help="fastest: highest speedup; concise: shortest reasoning among those within "
                   "--within of the best speedup; first: earliest turn, then sample.")
@click.option("--per-problem", type=click.IntRange(min=1), default=1, show_default=True,
              help="Rows kept per problem (rows with the same ref_id).")
@click.option("--within", type=FiniteFloat(0, 1, max_open=True), default=0.1,
              show_default=True, help="concise: fraction of the best speedup a row may lose.")
def select(inp, out, by, per_problem, within):
    """Keep the best verified samples of each problem in IN (run after verify).

    Rows that are not verified, or not chosen, go to OUT's rejected table with a reason
    (select:unverified, select:not_chosen:RULE, select:slower_than_best:X).

    \b
    Example:
      curate verify cands.parquet -o verified.parquet --device cuda
      curate select verified.parquet -o best.parquet --by concise --per-problem 1
    """
    st = run_single(Select(by=by, per_problem=per_problem, within=within), inp, out)
    echo_stage(st, out)
    extra = st.extra or {}
    if extra:
        click.echo(f"select: {extra.get('kept', 0)} kept by {by} ({per_problem} per problem); "
                   f"{extra.get('problems_with_verified', 0)} of {extra.get('problems', 0)} "
                   "problems had a verified row", err=True)
