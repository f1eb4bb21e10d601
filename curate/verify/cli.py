"""`curate verify`."""

from __future__ import annotations

import click

from ..isolation.sandbox import MODES as SANDBOX_MODES
from ..pipeline.single import require_candidates, run_single
from ..report import echo_stage


@click.command("verify")
@click.argument("inp", metavar="IN")
@click.option("-o", "--output", "out", required=True, help="Output table (.parquet or .jsonl).")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto",
              show_default=True, help="cuda: time on the GPU; cpu: C++ pairs timed on the CPU, "
              "Triton pairs checked under the interpreter, CUDA pairs unsupported.")
@click.option("--workers", type=int, default=None,
              help="Candidate worker processes (default: by device and CPU count).")
@click.option("--devices", default=None, metavar="0,1,..",
              help="GPU indices to verify on, one scheduler each (default: every visible GPU).")
@click.option("--timeout", type=float, default=120.0, show_default=True,
              help="Seconds each phase of a row may take (load, correctness, timing; the row "
              "as a whole 3x this); a hang anywhere costs at most the row's deadline.")
@click.option("--compile-timeout", type=float, default=300.0, show_default=True,
              help="Seconds a C++/CUDA compiler may add to a row's compile phase (untrusted "
              "Python never runs under this limit).")
@click.option("--trials", type=int, default=3, show_default=True,
              help="Correctness trials on fresh seeded inputs (the last one rewrites in place).")
@click.option("--sandbox", type=click.Choice(SANDBOX_MODES), default="auto",
              show_default=True, help="auto: bubblewrap and a uid per worker where the machine "
              "allows (said loudly where not); strict: refuse to run without; off: none.")
@click.option("--second-shape", type=click.Choice(["auto", "all", "off"]), default="auto",
              show_default=True, help="Check verified rows once more at a second size of "
              "their problem (auto: not candidates compiled for static shapes).")
@click.option("--digest", type=click.Choice(["sums", "tree"]), default="sums",
              show_default=True, help="How timed batches commit to their outputs before the "
              "parent picks which to check: sums (cheap, not binding) or tree (binding).")
def verify(inp, out, device, workers, devices, timeout, compile_timeout, trials, sandbox,
           second_shape, digest):
    """Re-execute every pair in sandboxed workers and record its status and speedup.

    Every row of IN comes out in OUT with status (verified, incorrect, deceptive,
    compile_error, runtime_error, timeout, crashed, degenerate_reference, reference_error,
    unsupported, shape_specialized), correctness errors, speedup with a 95% interval, the
    versions it ran on and its verification record (`curate replay` runs it again). Nothing
    is filtered: `curate build` applies the threshold. A killed run resumes from OUT's ledger.

    \b
    Example:
      curate verify pairs.parquet -o verified.parquet --device cuda --devices 0,1
      curate verify pairs.parquet -o verified.parquet --device cpu --timeout 30
      curate verify pairs.parquet -o verified.parquet --sandbox strict --digest tree
    """
    from .config import parse_devices
    from .step import Verify
    if trials < 1:
        raise click.BadParameter("at least 1", param_hint="--trials")
    try:
        devices = parse_devices(devices)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--devices") from None
    require_candidates(inp)  # rows without kernel_code: say that synthesis has not run
    from .engine import SandboxUnavailable
    try:
        st = run_single(Verify(device=device, workers=workers, timeout=timeout, trials=trials,
                               sandbox=sandbox, devices=devices, second_shape=second_shape,
                               compile_timeout=compile_timeout, digest=digest), inp, out)
    except SandboxUnavailable as exc:
        raise click.UsageError(f"{exc}; use --sandbox auto or off to run anyway") from None
    echo_stage(st, out)
    statuses = (getattr(st, "extra", None) or {}).get("statuses") or {}
    for status, n in sorted(statuses.items(), key=lambda kv: -kv[1]):
        click.echo(f"  {n:6d}  {status}")


@click.command("replay")
@click.argument("source", metavar="TABLE_OR_DIR")
@click.argument("ids", metavar="ROW_ID...", nargs=-1, required=True)
@click.option("--device", type=click.Choice(["cuda", "cpu"]), default=None,
              help="Where to run it again (default: the device its record names).")
@click.option("--sandbox", type=click.Choice(SANDBOX_MODES), default="auto",
              show_default=True, help="As for `curate verify`.")
def replay(source, ids, device, sandbox):
    """Run rows' verification again from their records; print then and now side by side.

    TABLE_OR_DIR is a table verify wrote, a build directory (its data/ shards, stages and
    rejected rows) or a downloaded dataset folder (data/train-*.parquet). Each ROW_ID is an id
    or a unique prefix of one. They agree when the status is the same and, on the same kind of
    device, the speedup's interval now meets the recorded one widened by the device's noise.
    Exit 0 when every row agrees, 1 when one does not, 2 for bad input.

    \b
    Example:
      curate replay build 3f2a9c1d
      curate replay verified.parquet 3f2a9c1d 77b0e4aa --device cpu
    """
    from .replay import find_rows, replay as run_again
    from .replay_report import echo_replayed
    rows = find_rows(source, list(ids))
    results = run_again(rows, device=device, sandbox=sandbox)
    for r in results:
        echo_replayed(r)
    bad = [r for r in results if not r.agree]
    click.echo(f"{len(results) - len(bad)} of {len(results)} rows agree")
    if bad:
        raise SystemExit(1)
