"""The `curate` command line: a thin Click layer over the library.

Commands live beside the stage they drive (curate/<stage>/cli.py) and are imported only when
called, so `curate --help` is instant and a stage that is not in this version says so plainly.
"""

from __future__ import annotations

import importlib
import logging
import math
import os
import signal
import sys
import threading
import traceback

import click

from . import __version__
from .errors import BadInput, NotAvailable, Terminated

INTERRUPTED = "interrupted; rerun the same command to resume"
STOP_WITHIN_S = 8.0  # from Ctrl-C to exit, however long a worker pool takes to let go

# name -> (module:attribute, one-line help). The order is the order of the user's work.
COMMANDS = {
    "ingest": ("curate.sources.cli:ingest", "Read KernelBench folders and pair tables into a table."),
    "scrape": ("curate.sources.scrape.cli:scrape", "Collect reference programs from repositories."),
    "synth": ("curate.synth.cli:synth", "Make candidate kernels (torch.compile, LLMs)."),
    "dedup": ("curate.dedup.cli:dedup", "Drop near duplicates and evaluation-set copies."),
    "verify": ("curate.verify.cli:verify", "Re-execute every pair in isolation; record its status."),
    "select": ("curate.select.cli:select", "Keep the best verified samples of each problem."),
    "build": ("curate.pipeline.cli:build", "Run the whole pipeline into a build directory."),
    "replay": ("curate.verify.cli:replay", "Run rows' verification again from their records."),
    "split-infill": ("curate.infill.cli:split_infill", "Cut kernels into prefix/core/suffix rows."),
    "card": ("curate.card.cli:card", "Render the dataset card (README.md) of a build."),
    "push": ("curate.hub.cli:push", "Upload shards and card to the Hugging Face Hub."),
}


class FiniteFloat(click.FloatRange):
    """A FloatRange that also refuses nan and inf (FloatRange lets nan through)."""

    name = "number"

    def convert(self, value, param, ctx):
        rv = super().convert(value, param, ctx)
        if not math.isfinite(rv):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return rv


def _unavailable(name: str, summary: str) -> click.Command:
    @click.command(name, help=f"{summary}\n\nNot available in this version of curate yet.",
                   context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
    def cmd():
        raise NotAvailable(f"`curate {name}`: this stage does not exist in this version of "
                           "curate yet")
    return cmd


class LazyGroup(click.Group):
    def list_commands(self, ctx):
        return list(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        target, summary = COMMANDS[name]
        mod, _, attr = target.partition(":")
        try:
            return getattr(importlib.import_module(mod), attr)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith(mod.rsplit(".", 1)[0]) and exc.name.startswith("curate"):
                return _unavailable(name, summary)
            raise

    def format_commands(self, ctx, formatter):
        rows = [(name, summary) for name, (_, summary) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]},
             epilog="Example:\n\n\b\n  curate build --threshold 2.0\n  curate split-infill\n"
                    "  curate push --repo org/cuke")
@click.version_option(__version__, prog_name="curate")
@click.option("-v", "--verbose", is_flag=True, help="Log more.")
def main(verbose: bool) -> None:
    """Build verified PyTorch -> CUDA/Triton training pairs for kernel-writing models."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)


def run() -> None:
    """Console entry point: map errors onto the contract's exit codes (2 bad input, 1 failure,
    130 Ctrl-C, 143 SIGTERM: the rows finished so far stay in the ledger for the rerun)."""
    _exit_state["pid"] = os.getpid()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    try:
        main.main(standalone_mode=False)
    except click.exceptions.Abort as exc:  # click turns Ctrl-C into Abort
        if isinstance(exc.__cause__, KeyboardInterrupt):
            _interrupted(exc.__cause__)
        click.echo("aborted", err=True)
        sys.exit(1)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2 if isinstance(exc, click.UsageError) else exc.exit_code)
    except (BadInput, NotAvailable) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except KeyboardInterrupt as exc:
        _interrupted(exc)
    except Exception as exc:  # the work failed; say what and where, keep the trace on request
        cause = _interrupt_behind(exc)
        if cause is not None:  # cleanup after Ctrl-C failed in turn: still an interrupt
            _interrupted(cause)
        if os.environ.get("CURATE_DEBUG"):
            traceback.print_exc()
        click.echo(f"error: {type(exc).__name__}: {exc} (set CURATE_DEBUG=1 for the traceback)",
                   err=True)
        sys.exit(1)
    sys.exit(0)


def _on_signal(signum, frame):
    """Ctrl-C or SIGTERM: unwind the stages like KeyboardInterrupt (finished rows committed,
    partial outputs removed), with a deadline in case something will not stop."""
    terminated = signum == signal.SIGTERM
    if os.getpid() != _exit_state["pid"]:  # a forked worker inherited this: Python's defaults
        if terminated:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        raise KeyboardInterrupt()
    _deadline(143 if terminated else 130)
    raise Terminated() if terminated else KeyboardInterrupt()


_exit_state = {"pid": None, "timer": None, "said": False}


def _deadline(code: int) -> None:
    if _exit_state["timer"] is None:
        timer = threading.Timer(STOP_WITHIN_S, _hard_exit, (code,))
        timer.daemon = True
        timer.start()
        _exit_state["timer"] = timer


def _interrupt_behind(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that `exc` was raised while handling, if any."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, KeyboardInterrupt):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _interrupted(exc: KeyboardInterrupt) -> None:
    """One line, no traceback, exit 130 (143 for SIGTERM). The stages have already unwound;
    worker threads that will not stop get to hold the exit up only until the deadline."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # a second Ctrl-C must not print a traceback
    code = 143 if isinstance(exc, Terminated) else 130
    _deadline(code)
    click.echo(INTERRUPTED, err=True)
    _exit_state["said"] = True
    sys.exit(code)


def _hard_exit(code: int) -> None:
    if not _exit_state["said"]:
        print(INTERRUPTED, file=sys.stderr)
    sys.stderr.flush()
    os._exit(code)
