"""`curate synth inductor` and `curate synth llm`."""

from __future__ import annotations

import click

from ..cli import FiniteFloat
from ..errors import NotAvailable


@click.group("synth")
def synth():
    """Make candidate programs (ModelNew) for reference programs.

    \b
    Example:
      curate synth inductor kb.parquet -o kb.inductor.parquet --device cpu
    """


@synth.command("inductor")
@click.argument("inp", metavar="IN")
@click.option("-o", "--output", "out", required=True, help="Output table (.parquet or .jsonl).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
              show_default=True,
              help="cuda: Triton candidates (backend=triton); cpu: inductor's C++ kernels "
                   "(backend=cpp). auto: cuda where a GPU is visible.")
@click.option("--mode", type=click.Choice(["default", "max-autotune"]), default="default",
              show_default=True, help="torch.compile mode (max-autotune runs without cudagraphs).")
@click.option("--workers", type=click.IntRange(min=1), default=None,
              help="Parallel compile workers [default: half the cores on cpu, up to 8 on cuda].")
@click.option("--timeout", type=FiniteFloat(min=0, min_open=True), default=300, show_default=True,
              help="Seconds one reference may take to compile before it is dropped.")
def inductor(inp, out, device, mode, workers, timeout):
    """Compile every reference in IN with torch.compile and write standalone candidates to OUT.

    Each candidate embeds inductor's kernels (Triton on cuda, C++ on cpu) and runs without
    torch.compile or its caches. References that fail (graph breaks, compile errors,
    timeouts) go to OUT's rejected table with a `synth:*` reason.

    \b
    Example:
      curate ingest @examples -o refs.parquet
      curate synth inductor refs.parquet -o cands.parquet --device cpu --workers 2
    """
    from ..pipeline.single import run_single
    from ..report import echo_stage
    from .inductor import InductorSynth

    st = run_single(InductorSynth(device=device, mode=mode, workers=workers, timeout=timeout),
                    inp, out)
    echo_stage(st, out)


@synth.command("llm", context_settings={"ignore_unknown_options": True,
                                         "allow_extra_args": True})
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def llm(args):
    """Candidates written by a language model (not available in this version).

    \b
    Example:
      curate synth llm refs.parquet -o cands.parquet --model NAME --base-url URL
    """
    raise NotAvailable("`curate synth llm` is not available in this version of curate: "
                       "use `curate synth inductor`")
