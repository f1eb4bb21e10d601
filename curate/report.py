"""What commands print when a stage ends: rows in, kept, dropped, and the reasons."""

from __future__ import annotations

from pathlib import Path

import click

from .tableio import sibling


def echo_stage(st, out: str | Path) -> None:
    out = Path(out)
    click.echo(f"{st.name}: {st.rows_in} rows in, {st.rows_out} kept -> {out}, "
               f"{st.dropped} dropped -> {sibling(out, 'rejected')} "
               f"({st.cached} from the ledger, {st.seconds:.1f}s)")
    for reason, n in sorted(st.reasons.items(), key=lambda kv: -kv[1])[:15]:
        click.echo(f"  {n:6d}  {reason}")
