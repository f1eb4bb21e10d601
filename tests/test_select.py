"""`curate select` and the `select` step: per-problem choice among verified samples (polars)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from curate.cli import main
from curate.select.core import select
from curate.tableio import read_rows, write_rows


REFERENCE = (Path(__file__).resolve().parents[1] / "examples" / "01_gelu_bias_residual.py").read_text()


def _row(problem, sample, turn, status="verified", speedup=None, reasoning=""):
    return {"id": f"{problem}-{sample}-{turn}", "pytorch_code": f"{REFERENCE}\n# {problem}\n",
            "ref_id": problem,
            "kernel_code": f"# {problem} {sample} {turn}", "sample": sample, "turn": turn,
            "status": status, "speedup": speedup, "reasoning": reasoning, "reasons": []}


ROWS = [
    _row("p", 0, 0, speedup=2.0, reasoning="x" * 500),
    _row("p", 0, 1, speedup=3.0, reasoning="x" * 900),
    _row("p", 1, 0, speedup=2.8, reasoning="x" * 100),
    _row("p", 1, 1, status="incorrect", speedup=None),
    _row("q", 0, 0, status="compile_error"),
    _row("r", 0, 1, speedup=None, reasoning="long" * 10),
    _row("r", 1, 0, speedup=None, reasoning="short"),
]


def _kept(sel):
    return [ROWS[i]["id"] for i, k in enumerate(sel.keep) if k]


def test_fastest_keeps_the_highest_speedup_per_problem():
    sel = select(ROWS, "fastest")
    assert _kept(sel) == ["p-0-1", "r-1-0"]  # r: no speed measured, then shorter reasoning
    assert sel.reasons[3] == "select:unverified" and sel.reasons[4] == "select:unverified"
    assert sel.reasons[0] == "select:not_chosen:fastest"
    assert sel.stats == {"rule": "fastest", "per_problem": 1, "rows": 7, "problems": 3,
                         "problems_with_verified": 2, "verified": 5, "kept": 2}


def test_concise_keeps_the_shortest_reasoning_within_x_of_the_best():
    sel = select(ROWS, "concise", within=0.1)   # p: best 3.0, 2.8 is within 10%, 2.0 is not
    assert _kept(sel) == ["p-1-0", "r-1-0"]
    assert sel.reasons[0] == "select:slower_than_best:0.1"
    assert sel.reasons[1] == "select:not_chosen:concise"
    assert select(ROWS, "concise", within=0.01).keep[1]  # only 3.0 itself is near the best


def test_first_and_per_problem():
    assert _kept(select(ROWS, "first")) == ["p-0-0", "r-1-0"]
    sel = select(ROWS, "fastest", per_problem=2)
    assert _kept(sel) == ["p-0-1", "p-1-0", "r-0-1", "r-1-0"]
    assert sel.stats["kept"] == 4


def test_rows_without_ref_id_are_grouped_by_their_reference():
    rows = [dict(r, ref_id=None) for r in ROWS[:3]]
    assert sum(select(rows, "fastest").keep) == 1


def test_cli_writes_kept_and_rejected_with_reasons(tmp_path):
    inp, out = tmp_path / "v.jsonl", tmp_path / "best.parquet"
    write_rows(inp, ROWS)
    res = CliRunner().invoke(main, ["select", str(inp), "-o", str(out), "--by", "concise"])
    assert res.exit_code == 0, res.output
    assert sorted(r["id"] for r in read_rows(out)) == ["p-1-0", "r-1-0"]
    rejected = read_rows(tmp_path / "best.rejected.parquet")
    assert len(rejected) == 5 and all(r["stage"] == "select" for r in rejected)
    assert "select:unverified" in {x for r in rejected for x in r["reasons"]}


def test_cli_refuses_a_bad_rule(tmp_path):
    inp = tmp_path / "v.jsonl"
    write_rows(inp, ROWS)
    res = CliRunner().invoke(main, ["select", str(inp), "-o", str(tmp_path / "o.parquet"),
                                    "--by", "slowest"])
    assert res.exit_code == 2


def test_build_records_the_rule_in_stats_and_card(tmp_path):
    """A pipeline whose source is a verified table: select's rule and counts reach stats.json
    and the dataset card."""
    table = tmp_path / "verified.jsonl"
    write_rows(table, ROWS)
    pipe = tmp_path / "p.yaml"
    pipe.write_text(f"name: sel\ndevice: cpu\nthreshold: 1.0\nsource:\n  ingest: {{paths: "
                    f"[{json.dumps(str(table))}], format: table}}\nsteps:\n"
                    "  - select: {by: fastest, per_problem: 1}\n  - keep: {}\n")
    out = tmp_path / "b"
    res = CliRunner().invoke(main, ["build", "--pipeline", str(pipe), "--out", str(out),
                                    "--quiet"])
    assert res.exit_code == 0, res.output
    stats = json.loads((out / "stats.json").read_text())
    sel = next(s for s in stats["stages"] if s["name"] == "select")
    assert sel["rows_in"] == 7 and sel["rows_out"] == 2
    assert sel["extra"]["rule"] == "fastest" and sel["extra"]["kept"] == 2
    card = (out / "README.md").read_text()
    assert "fastest" in card and "per problem" in card


@pytest.mark.parametrize("bad", [{"by": "nope"}, {"per_problem": 0}, {"within": 1.5}])
def test_step_refuses_bad_settings(bad):
    from curate.errors import BadInput
    from curate.select.step import Select
    with pytest.raises(BadInput):
        Select(**bad)
