"""The card's account of each pair's verification, drawn from the `verification` records, and
shards that keep the records (what `curate replay` needs from a pushed dataset)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

from curate.card import render_card
from curate.hub.shards import list_shards, write_shards
from curate.schema import new_record
from curate.tableio import read_rows, write_rows

sys.path.insert(0, str(Path(__file__).parent))
from test_card import make_build  # noqa: E402


def record(i: int) -> str:
    flagged = i in (2, 5)
    return json.dumps({
        "record": 1, "versions": {"curate": "0.1.0", "gates": {"parent": "aa", "judge": "bb",
                                                               "worker": "cc"}},
        "outcome": {"status": "verified", "reasons": [], "error": None},
        "settings": {"device": "cuda", "trials": 3},
        "timing": {"method": "cuda events", "speedup": 2.5, "interval": [2.4, 2.6]},
        "device": {"kind": "cuda", "gpu": "NVIDIA H200", "capability": "9.0",
                   "driver": "570.1", "cuda": "12.8"},
        "software": {"torch": "2.11.0", "triton": "3.6.0"},
        "second_shape": {"checked": i % 3 != 0,
                         "why": None if i % 3 else "sizes_not_module_constants"},
        "second_opinion": {"tool": "kernelguard", "version": "0.3.2", "flagged": flagged,
                           "labels": ["OUTPUT_REPLAY_CACHE"] if flagged else []}})


def test_card_says_how_each_pair_was_verified_from_the_records(tmp_path):
    build = make_build(tmp_path, infill=False)
    rows = [r for ps in list_shards(build / "data").values() for p in ps for r in read_rows(p)]
    for i, r in enumerate(rows):
        r["verification"] = record(i)
    write_shards(None, build / "data", rows=rows)
    shard = next(iter(list_shards(build / "data").values()))[0]
    assert "verification" in pq.read_schema(shard).names   # shards carry what replay needs
    rejected = read_rows(build / "rejected.parquet")
    spec = json.dumps({"outcome": {"status": "shape_specialized", "error": "incorrect at the "
                                   "second (N 256->512): output 0: shape (64, 256)"},
                       "second_shape": {"checked": True, "sizes": {"N": [256, 512]}}})
    rejected.append(new_record(id="spec0001", pytorch_code="x", status="shape_specialized",
                               stage="keep", reasons=["shape_specialized"], verification=spec))
    write_rows(build / "rejected.parquet", rejected)
    text = render_card(build, repo_id="org/cuke").path.read_text()
    part = text.split("### From each pair's verification record", 1)[1].split("\n## ", 1)[0]
    assert f"{len(rows)} of {len(rows)} kept rows" in part
    assert "NVIDIA H200 (sm 9.0, driver 570.1, CUDA 12.8)" in part
    assert "curate replay copy " in part and "huggingface-cli download org/cuke" in part
    checked = sum(1 for i in range(len(rows)) if i % 3)
    assert f"{checked} of {len(rows)} kept pairs were also correct at a second size" in part
    assert "sizes not module-level integer constants" in part
    assert "`spec0001` | N 256 -> 512" in part
    assert "It flags 2 of the kept pairs" in part and "`OUTPUT_REPLAY_CACHE` 2" in part


def test_card_without_records_says_replay_cannot_run_them(tmp_path):
    build = make_build(tmp_path, infill=False)
    text = render_card(build).path.read_text()
    assert "carry no verification records" in text
