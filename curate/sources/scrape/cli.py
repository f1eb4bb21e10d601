"""`curate scrape`."""

from __future__ import annotations

import click

from ...pipeline.single import run_single
from ...report import echo_stage


@click.command("scrape")
@click.argument("paths", nargs=-1)
@click.option("-o", "--output", "out", required=True, help="Output table (.parquet or .jsonl).")
@click.option("--from-list", "from_list", type=click.Path(dir_okay=False),
              help="A file of repositories, one per line: URL_OR_PATH [COMMIT] [STARS].")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Sandboxed deduction workers [default: the CPU count].")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="At most this many classes per repository.")
@click.option("--timeout", type=click.FloatRange(min=1), default=60.0, show_default=True,
              help="Seconds per class and task (deduction, then the checks).")
@click.option("--graph-breaks", is_flag=True,
              help="Also drop classes whose forward breaks the torch.compile graph.")
@click.option("--sandbox", type=click.Choice(["auto", "off"]), default="auto",
              show_default=True, help="auto: bubblewrap and Landlock where this machine has them.")
def scrape(paths, out, from_list, jobs, limit, timeout, graph_breaks, sandbox):
    """Find nn.Module classes in repositories; keep those made into runnable programs.

    PATHS are git URLs (cloned at their default branch's head, or at a commit from the list),
    local folders or files. `@torch-nn` names torch's own torch/nn/modules. A class is kept when
    its KernelBench program runs on the CPU, is deterministic under a seed and its output
    depends on its input; the others go to OUT's rejected table with `scrape:<reason>`.
    Rerunning the same command resumes.

    \b
    Example:
      curate scrape @torch-nn -o torch_nn.parquet --limit 50
      curate scrape --from-list repos.txt -o scraped.parquet --jobs 8
    """
    from . import ScrapeSource
    source = ScrapeSource(paths, from_list=from_list, jobs=jobs, limit=limit, timeout=timeout,
                          graph_breaks=graph_breaks, sandbox=sandbox)
    st = run_single(source, None, out)
    echo_stage(st, out)
