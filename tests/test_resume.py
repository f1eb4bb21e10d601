"""A build killed with SIGKILL mid-stage resumes: same rows, no duplicates, nothing redone."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from curate.tableio import read_rows, write_rows

ROOT = Path(__file__).resolve().parents[1]
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


def _pipeline(tmp_path: Path) -> Path:
    rows = [{"id": f"p{i:03d}", "pytorch_code": PROBLEM.format(k=i, pad="\n" * (i % 3))}
            for i in range(120)]
    write_rows(tmp_path / "input.parquet", rows)
    spec = tmp_path / "pipe.yaml"
    spec.write_text(f"""
name: resume-test
device: cpu
source:
  ingest: {{paths: ["{tmp_path / 'input.parquet'}"]}}
steps:
  - tests.support.pipeline_steps:SlowTag: {{delay: 0.05}}
""")
    return spec


def _build(spec: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "curate", "build", "--pipeline", str(spec),
                             "--out", str(out), "--quiet"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _ledger_rows(out: Path) -> dict:
    db = out / "ledger.sqlite"
    if not db.exists():
        return {}
    try:
        con = sqlite3.connect(db, timeout=1)
        rows = dict(con.execute("SELECT key, computes FROM results WHERE step LIKE 'slow-tag@%'"))
        con.close()
        return rows
    except sqlite3.OperationalError:
        return {}


def test_killed_build_resumes_without_recomputing(tmp_path):
    spec = _pipeline(tmp_path)
    ref = _build(spec, tmp_path / "clean")
    assert ref.wait(timeout=120) == 0, ref.stderr.read().decode()

    out = tmp_path / "killed"
    proc = _build(spec, out)
    deadline = time.monotonic() + 60
    while len(_ledger_rows(out)) < 40 and time.monotonic() < deadline:
        time.sleep(0.1)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = _ledger_rows(out)
    assert 40 <= len(done_before) < 120, "the kill did not land mid-stage"
    assert not (out / "stats.json").exists()

    again = _build(spec, out)
    assert again.wait(timeout=120) == 0, again.stderr.read().decode()
    after = _ledger_rows(out)
    assert len(after) == 120
    assert max(after.values()) == 1, "a finished row was computed twice"
    stats = json.loads((out / "stats.json").read_text())
    slow = next(s for s in stats["stages"] if s["name"] == "slow-tag")
    assert slow["cached"] == len(done_before) and slow["computed"] == 120 - len(done_before)

    def rows(d, name):
        return sorted((r["id"], r.get("n_lines")) for r in read_rows(d / name))
    for name in ["stages/01-slow-tag.parquet", "rejected.parquet"]:
        assert rows(out, name) == rows(tmp_path / "clean", name)
    kept = read_rows(out / "data/train-00000-of-00001.parquet")
    assert len(kept) == len({r["id"] for r in kept}) > 0


def test_finished_build_is_reused_whole(tmp_path):
    spec = _pipeline(tmp_path)
    first = _build(spec, tmp_path / "b")
    assert first.wait(timeout=120) == 0
    t0 = time.monotonic()
    second = _build(spec, tmp_path / "b")
    assert second.wait(timeout=120) == 0
    stats = json.loads((tmp_path / "b" / "stats.json").read_text())
    assert all(s["skipped"] for s in stats["stages"])
    assert max(_ledger_rows(tmp_path / "b").values()) == 1
    assert time.monotonic() - t0 < 30


def test_the_ledger_says_how_far_each_step_got(tmp_path):
    """Per step: rows finished and when the first and the last finished (what a benchmark reads
    of a build cut at its limit)."""
    from curate.pipeline.ledger import Ledger
    from curate.pipeline.step import Outcome
    ledger = Ledger(tmp_path / "ledger.sqlite")
    t0 = time.time()
    ledger.record("synth", "a", Outcome(kept=[{"id": "a"}]))
    ledger.record("synth", "b", Outcome(dropped={"id": "b"}, reasons=["x"]))
    ledger.record("verify", "a", Outcome(kept=[{"id": "a"}]))
    got = ledger.progress()
    ledger.close()
    assert set(got) == {"synth", "verify"} and got["synth"][0] == 2 and got["verify"][0] == 1
    n, first, last = got["synth"]
    assert t0 <= first <= last <= time.time()
