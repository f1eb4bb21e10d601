"""`curate build`."""

from __future__ import annotations

from pathlib import Path

import click

from ..cli import FiniteFloat
from ..errors import BadInput
from .build import build as run_build
from .executor import EXECUTORS, make_executor
from .config import load_pipeline


@click.command("build")
@click.option("--pipeline", "pipeline_file", type=click.Path(dir_okay=False),
              help="Pipeline file (default: the bundled pipelines/default.yaml).")
@click.option("--threshold", type=FiniteFloat(min=0), help="Keep verified pairs whose speedup 95% lower bound "
              "is at least this (default 2.0).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False),
              help="Build directory (default: build).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), help="Where to verify.")
@click.option("--executor", type=click.Choice(EXECUTORS), default="local", show_default=True,
              help="Where the stages run: local streams every stage at once on this machine; "
              "staged runs one stage after another; ray streams them on a Ray cluster "
              "(pip install \"curate[ray]\").")
@click.option("--ray-address", metavar="ADDR", help="The Ray cluster of --executor ray, e.g. "
              "127.0.0.1:6379 or ray://head:10001 (default: a Ray instance started here).")
@click.option("--quiet", is_flag=True, help="No progress output.")
def build(pipeline_file, threshold, out_dir, device, executor, ray_address, quiet):
    """Run a pipeline: sources -> candidates -> dedup -> verify -> keep, into a build directory.

    A build killed at any point resumes where it stopped when run again: finished rows are read
    back from <out>/ledger.sqlite, never recomputed.

    \b
    Example:
      curate build --threshold 2.0
      curate build --pipeline pipelines/ingest-only.yaml --out /tmp/b
      curate build --executor ray --ray-address 10.0.0.5:6379   # verify on the cluster's GPUs
    """
    if ray_address and executor != "ray":
        raise BadInput("--ray-address is for --executor ray", fix="add --executor ray")
    spec = load_pipeline(pipeline_file, threshold=threshold, device=device, out=out_dir)
    out = Path(spec.get("out") or "build")
    runner = make_executor(executor, ray_address=ray_address)  # a missing extra fails here
    stats = run_build(spec, out, progress=not quiet, executor=runner)
    click.echo(f"build: {stats['kept']} pairs kept, {stats['rejected']} rejected, "
               f"{stats['seconds']:.1f}s -> {out}")
    click.echo(f"  review the dataset card: {out / 'README.md'}")
    for s in stats["stages"]:
        note = " (reused)" if s["skipped"] else ""
        span = f"  rows {s['first_row']:.0f}-{s['last_row']:.0f}s" \
            if s.get("first_row") is not None else ""
        click.echo(f"  {s['name']:<16} in {s['rows_in']:6d}  out {s['rows_out']:6d}  "
                   f"dropped {s['dropped']:6d}  {s['seconds']:7.1f}s{span}{note}")
