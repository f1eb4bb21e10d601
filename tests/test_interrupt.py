"""Ctrl-C or SIGTERM during a stage: one line, no traceback, exit 130/143, the ledger intact, and
the rerun resumes from it; stats count every row of a resumed stage."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from curate.pipeline.build import build
from curate.pipeline.config import load_pipeline
from curate.pipeline.step import Outcome, Step
from curate.tableio import write_rows

ROOT = Path(__file__).resolve().parents[1]
ROWS = 120
LEFTOVER = re.compile(r"^\..+\.(parquet|jsonl)\.")
PROBLEM = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * {k}
{pad}
def get_inputs():
    return [torch.randn(4)]

def get_init_inputs():
    return []
'''


def _inputs(tmp_path: Path) -> Path:
    rows = [{"id": f"p{i:03d}", "pytorch_code": PROBLEM.format(k=i, pad="\n" * (i % 3))}
            for i in range(ROWS)]
    return write_rows(tmp_path / "input.parquet", rows)


def _pipeline(tmp_path: Path, step: str, delay: float) -> Path:
    spec = tmp_path / "pipe.yaml"
    spec.write_text(f"""
name: interrupt-test
device: cpu
source:
  ingest: {{paths: ["{_inputs(tmp_path)}"]}}
steps:
  - {step}: {{delay: {delay}}}
""")
    return spec


def _build(spec: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "curate", "build", "--pipeline", str(spec),
                             "--out", str(out), "--quiet"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _ledger(out: Path, sql: str) -> list:
    db = out / "ledger.sqlite"
    if not db.exists():
        return []
    try:
        con = sqlite3.connect(db, timeout=1)
        try:
            return con.execute(sql).fetchall()
        finally:
            con.close()
    except sqlite3.OperationalError:
        return []


def _done(out: Path) -> dict:
    return dict(_ledger(out, "SELECT key, computes FROM results WHERE step LIKE 'slow-tag@%'"))


def _wait_mid_stage(proc: subprocess.Popen, out: Path, rows: int = 16) -> None:
    deadline = time.monotonic() + 60
    while len(_done(out)) < rows and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None and len(_done(out)) >= rows, "the stage never got going"


def _leftovers(out: Path) -> list[str]:
    return [p.name for p in (out / "stages").iterdir() if LEFTOVER.match(p.name)]


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["ctrl-c", "sigterm"])
def test_interrupted_build_stops_cleanly_and_the_rerun_resumes(tmp_path, sig, code):
    spec = _pipeline(tmp_path, "tests.support.pipeline_steps:SlowTag", 0.05)
    out = tmp_path / "b"
    proc = _build(spec, out)
    _wait_mid_stage(proc, out)
    t0 = time.monotonic()
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=10)
    assert time.monotonic() - t0 < 10
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "interrupted; rerun the same command to resume"

    done = _done(out)
    assert 16 <= len(done) < ROWS
    assert _ledger(out, "SELECT name FROM stages") == [("ingest",)]  # slow-tag not complete
    assert not (out / "stages" / "01-slow-tag.parquet").exists()
    assert not (out / "stats.json").exists() and _leftovers(out) == []

    again = _build(spec, out)
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    after = _done(out)
    assert len(after) == ROWS and max(after.values()) == 1, "a finished row was computed twice"
    stats = json.loads((out / "stats.json").read_text())
    slow = next(s for s in stats["stages"] if s["name"] == "slow-tag")
    assert slow["cached"] == len(done) and slow["computed"] == ROWS - len(done)
    assert slow["rows_in"] == ROWS


class StuckTeardown(Step):
    """A step whose workers will not let go: teardown hangs far past the interrupt deadline."""

    name = "slow-tag"  # counted by _done() like SlowTag
    batch_size = 8

    def __init__(self, delay: float = 0.05):
        self.delay = delay

    def process(self, rows):
        for i, row in enumerate(rows):
            time.sleep(self.delay)
            yield i, Outcome.keep(row)

    def teardown(self):
        time.sleep(60)


def test_ctrl_c_stops_within_10s_even_when_a_step_will_not_let_go(tmp_path):
    spec = _pipeline(tmp_path, "tests.test_interrupt:StuckTeardown", 0.05)
    out = tmp_path / "b"
    proc = _build(spec, out)
    _wait_mid_stage(proc, out)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert time.monotonic() - t0 < 10 and proc.returncode == 130, err
    assert "Traceback" not in err and "interrupted; rerun the same command to resume" in err
    assert len(_done(out)) >= 16  # what was committed before the interrupt stays


def test_what_a_killed_run_left_in_stages_is_removed_by_the_rerun(tmp_path):
    spec = _pipeline(tmp_path, "tests.support.pipeline_steps:SlowTag", 0.02)
    out = tmp_path / "b"
    proc = _build(spec, out)
    _wait_mid_stage(proc, out)
    proc.kill()
    proc.communicate()
    assert _leftovers(out), "SIGKILL should leave the writers' hidden part folders"
    (out / "stages" / ".01-slow-tag.parquet.tmp").write_bytes(b"half a file")

    again = _build(spec, out)
    _, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    assert _leftovers(out) == []


def test_a_stage_being_rewritten_is_not_taken_as_finished(tmp_path):
    """Its marker goes before its files change: a run killed between the two cannot leave new
    files under the old stage's marker."""
    from curate.pipeline.runner import Runner, stage_paths
    from tests.support.pipeline_steps import SlowTag

    inp = _inputs(tmp_path)
    runner = Runner(tmp_path / "b")
    out, rej = stage_paths(tmp_path / "b", 1, "slow-tag")
    runner.run_step(1, SlowTag(delay=0), inp, out, rej)
    assert runner.ledger.db.execute("SELECT count(*) FROM stages").fetchone() == (1,)

    class Boom(SlowTag):
        def process(self, rows):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        runner.run_step(1, Boom(delay=0.5), inp, out, rej)
    assert runner.ledger.db.execute("SELECT count(*) FROM stages").fetchone() == (0,)
    runner.close()


class StatusTag(Step):
    """Gives every row a status; CURATE_TEST_STOP_AFTER=N raises KeyboardInterrupt after N rows
    (outside config(), so the cache key of both runs is the same)."""

    name = "status-tag"
    batch_size = 8

    def __init__(self, delay: float = 0.0):
        self.delay = delay
        self.seen: dict[str, int] = {}

    def config(self):
        return {"delay": self.delay}

    def process(self, rows):
        stop = int(os.environ.get("CURATE_TEST_STOP_AFTER", "0"))
        for i, row in enumerate(rows):
            done = sum(self.seen.values())
            if stop and done >= stop:
                raise KeyboardInterrupt
            status = "verified" if int(row["id"][1:]) % 3 else "incorrect"
            self.seen[status] = self.seen.get(status, 0) + 1
            yield i, Outcome.keep({**row, "status": status})

    def stats(self):
        return {"statuses": dict(self.seen)}  # what this run computed, like Verify.stats()


def test_stats_count_every_row_of_a_resumed_stage(tmp_path, monkeypatch):
    spec = load_pipeline(_pipeline(tmp_path, "tests.test_interrupt:StatusTag", 0))
    out = tmp_path / "b"
    monkeypatch.setenv("CURATE_TEST_STOP_AFTER", "40")
    with pytest.raises(KeyboardInterrupt):
        build(spec, out, progress=False)
    monkeypatch.delenv("CURATE_TEST_STOP_AFTER")
    build(spec, out, progress=False)

    stats = json.loads((out / "stats.json").read_text())
    tag = next(s for s in stats["stages"] if s["name"] == "status-tag")
    assert tag["cached"] == 40 and tag["computed"] == ROWS - 40
    want = {"verified": sum(1 for i in range(ROWS) if i % 3),
            "incorrect": sum(1 for i in range(ROWS) if not i % 3)}
    assert tag["statuses"] == want
    assert tag["extra"]["statuses"] == want  # the step's own count covered this run only
