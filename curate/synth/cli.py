"""`curate synth inductor` and `curate synth llm`."""

from __future__ import annotations

import click

from ..cli import FiniteFloat


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


@synth.command("llm")
@click.argument("inp", metavar="IN")
@click.option("-o", "--output", "out", required=True, help="Output table (.parquet or .jsonl).")
@click.option("--model", required=True, help="Model name as the server knows it.")
@click.option("--base-url", default=None, metavar="URL",
              help="OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM, SGLang). "
                   "Default: OpenAI.")
@click.option("--api-key-env", default="OPENAI_API_KEY", show_default=True, metavar="VAR",
              help="Environment variable that holds the API key.")
@click.option("--backend", type=click.Choice(["cuda", "triton"]), default="cuda",
              show_default=True, help="What the model writes: CUDA (load_inline) or Triton.")
@click.option("--samples", type=click.IntRange(min=1), default=1, show_default=True,
              help="Samples per problem (K); the sample index is sent as the seed.")
@click.option("--turns", type=click.IntRange(min=1), default=1, show_default=True,
              help="Refinement turns (T): each turn after the first carries the verdict on the "
                   "last candidate, verified on --device.")
@click.option("--temperature", type=FiniteFloat(min=0), default=0.7, show_default=True)
@click.option("--top-p", type=FiniteFloat(0, 1, min_open=True), default=1.0, show_default=True)
@click.option("--max-tokens", type=click.IntRange(min=1), default=8192, show_default=True)
@click.option("--concurrency", type=click.IntRange(min=1), default=16, show_default=True,
              help="Requests in flight at once.")
@click.option("--timeout", type=FiniteFloat(min=0, min_open=True), default=600,
              show_default=True, help="Seconds one request may take before it is retried.")
@click.option("--stream/--no-stream", default=False, show_default=True,
              help="Stream replies (server-sent events).")
@click.option("--prompt", default=None, metavar="FILE|NAME",
              help="Jinja prompt template (extends base.j2), or a bundled one: "
                   "kernelbench_cuda, kernelbench_triton, dice_infill. Default: by backend.")
@click.option("--price-input", type=FiniteFloat(min=0), default=None,
              help="Dollars per million prompt tokens (fills cost_usd).")
@click.option("--price-output", type=FiniteFloat(min=0), default=None,
              help="Dollars per million completion tokens.")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
              show_default=True, help="Where refinement turns verify candidates.")
def llm(inp, out, model, base_url, api_key_env, backend, samples, turns, temperature, top_p,
        max_tokens, concurrency, timeout, stream, prompt, price_input, price_output, device):
    """Ask a language model for candidates of every reference in IN; write every turn to OUT.

    Each problem gets --samples conversations of --turns turns; every turn is a row linked to
    its problem (ref_id) and parent turn (parent_id), with the conversation, reasoning, tokens,
    latency and cost. Replies are cached beside OUT (OUT's stem + .llm-cache.sqlite): a rerun
    sends no request it has sent before. Replies without a program go to OUT's rejected table.

    \b
    Example:
      curate ingest @examples -o refs.parquet
      curate synth llm refs.parquet -o cands.parquet --model Qwen/Qwen3-8B \\
        --base-url http://127.0.0.1:8000/v1 --backend triton --samples 4 --turns 2
    """
    from pathlib import Path

    from ..pipeline.single import run_single
    from ..report import echo_stage
    from .llm import LLMSynth

    prices = None
    if price_input is not None or price_output is not None:
        prices = {"input": price_input or 0.0, "output": price_output or 0.0}
    o = Path(out)
    step = LLMSynth(model=model, base_url=base_url, api_key_env=api_key_env, backend=backend,
                    samples=samples, turns=turns, temperature=temperature, top_p=top_p,
                    max_tokens=max_tokens, concurrency=concurrency, timeout=timeout,
                    stream=stream, prompt=prompt, prices=prices, device=device,
                    cache=str(o.with_name(f"{o.stem}.llm-cache.sqlite")))
    st = run_single(step, inp, out)
    echo_stage(st, out)
