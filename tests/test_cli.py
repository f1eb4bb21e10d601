"""The command line: every command of the contract is listed and documented with an example."""

import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from curate.cli import COMMANDS, main

CONTRACT = ["ingest", "scrape", "synth", "dedup", "verify", "build", "split-infill", "card", "push"]


def test_help_lists_every_contract_command():
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0
    for name in CONTRACT:
        assert f"  {name} " in res.output


def _commands():
    for name in COMMANDS:
        cmd = main.get_command(click.Context(main), name)
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(click.Context(cmd)):
                yield [name, sub], cmd.get_command(click.Context(cmd), sub)
        else:
            yield [name], cmd


@pytest.mark.parametrize("argv,cmd", list(_commands()), ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_command_has_help_with_an_example_or_says_it_is_not_available(argv, cmd):
    res = CliRunner().invoke(main, [*argv, "--help"])
    assert res.exit_code == 0, res.output
    if "Not available in this version" in res.output:
        run = subprocess.run([sys.executable, "-m", "curate", *argv], capture_output=True, text=True)
        assert run.returncode == 2 and "does not exist in this version" in run.stderr
    else:
        assert "Example" in res.output and f"curate {' '.join(argv)}" in res.output


def test_unknown_option_is_usage_error_exit_2():
    run = subprocess.run([sys.executable, "-m", "curate", "ingest", "--nope"], capture_output=True,
                         text=True)
    assert run.returncode == 2


def test_build_ingest_only_pipeline(tmp_path, examples_dir):
    out = tmp_path / "b"
    res = CliRunner().invoke(main, ["build", "--pipeline", "pipelines/ingest-only.yaml",
                                    "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    for rel in ["pipeline.yaml", "ledger.sqlite", "stages/00-ingest.parquet", "rejected.parquet", "README.md",
                "stats.json", "data/train-00000-of-00001.parquet"]:
        assert (out / rel).exists(), rel
    import json
    stats = json.loads((out / "stats.json").read_text())
    assert stats["kept"] == len(list(examples_dir.glob("*.py")))
    assert stats["stages"][0]["name"] == "ingest"
