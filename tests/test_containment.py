"""What a hostile row may cost, seen from outside verify: a hang at import costs its row's
deadline and no more; an installed dependency that walks frames does not make honest rows fail;
a run shared with every hostile C++ fixture gives the honest rows the statuses they get alone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.hostile_table import fixture_rows

ROOT = Path(__file__).resolve().parents[1]
VERIFY_FIX = ROOT / "tests" / "fixtures" / "verify"
HANG_AT_IMPORT = "\nwhile True:   # the candidate never finishes importing\n    pass\n"


def _row(row_id: str, kernel_code: str, ref: str) -> dict:
    from curate.schema import new_record
    return new_record(id=row_id, pytorch_code=ref, kernel_code=kernel_code, backend="cpp",
                      source="file", entry_point="Model")


def _swish_ref() -> str:
    return (ROOT / "tests" / "fixtures" / "hostile" / "ref" / "swish_residual.py").read_text()


def _honest_rows() -> list[dict]:
    """The honest C++ fixtures, and the C++ pair of the verify tests on its own reference."""
    rows = [{k: v for k, v in r.items() if not k.startswith("_")}
            for r in fixture_rows(["cpp"]) if r["_case"].get("honest")]
    rows.append(_row("verify/cpp_honest", (VERIFY_FIX / "cpp_honest.py").read_text(),
                     (VERIFY_FIX / "ref_scale_add.py").read_text()))
    return rows


def _cli_verify(tmp_path: Path, rows: list[dict], timeout: float, pythonpath: str,
                limit: float) -> tuple[dict, float]:
    """`curate verify` on `rows` in a fresh process: {id: status}, and its wall time."""
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(r, default=str) + "\n" for r in rows))
    env = {**os.environ, "PYTHONPATH": pythonpath}
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "curate", "verify", str(inp), "-o", str(out),
                             "--device", "cpu", "--timeout", str(timeout)], env=env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # the run and every worker it started
        proc.communicate()
        pytest.fail(f"`curate verify --timeout {timeout}` still ran after {limit} s")
    wall = time.monotonic() - t0
    assert out.is_file(), stdout[-2000:] + stderr[-3000:]
    got = {}
    for line in out.read_text().splitlines():
        rec = json.loads(line)
        got[rec["id"]] = rec["status"]
    return got, wall


def test_a_hang_at_import_ends_timeout_within_its_deadline(tmp_path):
    honest = (ROOT / "tests" / "fixtures" / "hostile" / "cpp" / "honest_swish_add.py").read_text()
    code = honest.replace("\nclass ModelNew", HANG_AT_IMPORT + "\n\nclass ModelNew")
    assert code != honest
    rows = [_row("hang_at_import", code, _swish_ref())]
    got, wall = _cli_verify(tmp_path, rows, timeout=10, pythonpath=str(ROOT), limit=60)
    assert got == {"hang_at_import": "timeout"}, got
    assert wall <= 40, f"a 10 s row took the run {wall:.1f} s"


def test_a_frame_walking_dependency_first_on_the_path_leaves_honest_rows_verified(tmp_path):
    typing_extensions = pytest.importorskip(
        "typing_extensions", reason="needs typing_extensions installed (a dependency that "
        "calls sys._getframe) to copy onto the path")
    src = Path(typing_extensions.__file__)
    assert "_getframe" in src.read_text(), "the copied dependency no longer walks frames"
    site = tmp_path / "site"          # what `pip install --target site` leaves
    site.mkdir()
    shutil.copy(src, site / src.name)
    rows = _honest_rows()
    got, _ = _cli_verify(tmp_path, rows, timeout=120, limit=900,
                         pythonpath=os.pathsep.join([str(site), str(ROOT)]))
    assert got == {r["id"]: "verified" for r in rows}, got


def _statuses(rows: list[dict]) -> dict:
    from curate.verify import Verifier
    with Verifier(device="cpu", timeout=60) as v:
        return {rows[i]["id"]: res.status for i, res in v.verify(rows)}


@pytest.mark.slow
def test_honest_rows_end_the_same_mixed_with_every_hostile_cpp_fixture():
    honest = _honest_rows()
    hostile = [{k: v for k, v in r.items() if not k.startswith("_")}
               for r in fixture_rows(["cpp"]) if not r["_case"].get("honest")]
    assert len(hostile) >= 7, "the hostile C++ fixtures are missing"
    alone = _statuses(honest)
    mixed = _statuses(hostile + honest)
    assert {r["id"]: mixed[r["id"]] for r in honest} == alone, (alone, mixed)
