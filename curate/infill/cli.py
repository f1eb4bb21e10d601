"""`curate split-infill`."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import BadInput
from ..report import echo_stage
from .run import build_input, check_sample, split_build_dir, split_table
from .split import FIM_FORMATS, GRANULARITIES, MULTI


@click.command("split-infill")
@click.argument("source", required=False, default="build")
@click.option("-o", "--output", "out", help="Write a table (.parquet or .jsonl) instead of the "
              "build directory's infill/ shards.")
@click.option("--granularity", type=click.Choice(GRANULARITIES), default="kernel",
              show_default=True, help="kernel: the whole definition is the core; body: only "
              "the statements inside it; source: the whole CUDA source string of a load_inline "
              "program (DICE's layout; kernel where there is none).")
@click.option("--multi", type=click.Choice(MULTI), default="per-kernel", show_default=True,
              help="Several kernels in a program: one row per kernel, or one row whose core "
                   "spans them all.")
@click.option("--fim-format", type=click.Choice(list(FIM_FORMATS)), default="none",
              show_default=True, help="Also render a fill-in-the-middle `text` column in this "
              "model family's token convention (prefix, suffix, then the core as the middle).")
@click.option("--check-solvable", "check", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="Re-verify N random rows: with their own core they must verify, "
              "with the core left empty they must fail (recorded in infill/config.json).")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True,
              help="Where --check-solvable verifies (CUDA rows need cuda).")
@click.option("--quiet", is_flag=True, help="No progress output.")
def split_infill(source, out, granularity, multi, fim_format, check, device, quiet):
    """Cut candidate kernels into prefix/core/suffix rows for kernel-infilling training.

    SOURCE is a build directory (default: build; its data/ shards are read and infill/ shards
    written beside them, with infill/config.json) or a table. The core is the kernel (the
    __global__ function, the @triton.jit function, inductor's C++ kernel()); every row holds
    prefix + core + suffix == kernel_code, byte for byte. Programs with no core go to the
    rejected table with the reason. On a build directory the dataset card (README.md) is
    rendered again, so that the card you review next is the one `curate push` publishes.

    \b
    Example:
      curate split-infill
      curate split-infill build --granularity body --fim-format starcoder
      curate split-infill pairs.parquet -o infill.parquet --multi span
      curate split-infill --check-solvable 20 --device cuda
    """
    src = Path(source)
    opts = dict(granularity=granularity, multi=multi, fim_format=fim_format,
                progress=not quiet)
    if src.is_dir() and out is None:
        st, summary = split_build_dir(src, check=check, device=device, **opts)
        echo_stage(st, summary["table"])
        click.echo(f"split-infill: {summary['rows']} infill rows in {len(summary['shards'])} "
                   f"shard(s) -> {src / 'infill'} (config: {src / 'infill' / 'config.json'})")
        if check:
            _echo_check(summary["solvability"])
        click.echo(f"card: rendered again with the infill config: {summary['card']} "
                   "(review it before `curate push`)")
        return
    if not src.exists():
        if source == "build":
            raise BadInput("no build directory here", path=str(src),
                           fix="run `curate build` first, or pass a build directory or a table")
        raise BadInput("no such file or directory", path=str(src), fix="check the path")
    if src.is_dir():
        src = build_input(src)
    elif out is None:
        out = src.with_name(f"{src.stem}.infill{src.suffix}")
    st = split_table(src, out, **opts)
    echo_stage(st, out)
    if check:
        _echo_check(check_sample(out, check, device=device))


def _echo_check(result: dict) -> None:
    click.echo(f"solvability: {result['solvable']}/{result['checked']} sampled rows verify with "
               f"their core and fail without it (own core: {result['full']}; empty core: "
               f"{result['empty']})")
