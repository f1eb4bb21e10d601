"""Run split-infill over a table or a build directory (data/ shards -> infill/ shards)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from .. import __version__
from ..errors import BadInput
from ..hub.shards import write_shards
from ..pipeline.runner import StageStats
from ..pipeline.single import run_single
from ..tableio import TableWriter, read_batches, sibling
from .step import SplitInfill


def split_table(inp: str | Path, out: str | Path, *, granularity: str = "kernel",
                multi: str = "per-kernel", fim_format: str = "none",
                progress: bool = True) -> StageStats:
    """IN -> OUT (infill rows); rows without a core go to OUT's `.rejected` sibling."""
    step = SplitInfill(granularity, multi, fim_format)
    return run_single(step, inp, out, progress=progress)


def build_input(build: str | Path) -> Path:
    """The kept pairs of a build as one table: its only data/ shard, or the shards joined."""
    build = Path(build)
    shards = sorted((build / "data").glob("*.parquet"))
    if not shards:
        raise BadInput("the build directory has no data/*.parquet shards", path=str(build),
                       fix="run `curate build` first (or pass a table)")
    if len(shards) == 1:
        return shards[0]
    joined = build / "stages" / "split-infill.input.parquet"
    with TableWriter(joined) as w:
        for shard in shards:
            for batch in read_batches(shard):
                w.write(batch)
    return joined


def split_build_dir(build: str | Path, *, granularity: str = "kernel", multi: str = "per-kernel",
                    fim_format: str = "none", progress: bool = True, check: int = 0,
                    device: str = "cpu") -> tuple[StageStats, dict]:
    """A build's data/ shards -> <build>/infill/train-*.parquet and <build>/infill/config.json,
    then the card rendered again, so that the card reviewed after this is the one pushed.

    The stage's own table, its rejected rows and ledger live in <build>/stages/ like every other
    stage's, so that infill/ holds only what the Hub should serve. `check` > 0 re-verifies that
    many rows (check_sample) and records the result in config.json.
    """
    build = Path(build)
    stages = build / "stages"
    table = stages / "split-infill.parquet"
    inp = build_input(build)
    st = split_table(inp, table, granularity=granularity, multi=multi, fim_format=fim_format,
                     progress=progress)
    written = write_shards(table, build / "infill", split="train")
    kinds = Counter()
    split_pairs = set()
    rows = 0
    for path in written:
        t = pq.read_table(path, columns=["id", "core_kind"])
        rows += t.num_rows
        kinds.update(k for k in t.column("core_kind").to_pylist() if k)
        split_pairs.update(t.column("id").to_pylist())
    summary = {
        "curate_version": __version__,
        "config_name": "infill",
        "granularity": granularity,
        "multi": multi,
        "fim_format": fim_format,
        "text_column": fim_format != "none",
        "invariant": "prefix + core + suffix == kernel_code",
        "columns": ["prefix", "core", "suffix", "core_kind", "core_name"]
        + (["text"] if fim_format != "none" else []),
        "row_key": ["id", "core_name"],  # a pair with several kernels gives several rows
        "pairs_in": st.rows_in,
        "pairs_split": st.rows_in - st.dropped,
        "pairs_rejected": st.dropped,
        "rows": rows,
        "core_kinds": dict(sorted(kinds.items())),
        "reasons": dict(sorted(st.reasons.items(), key=lambda kv: -kv[1])),
        "shards": [p.relative_to(build).as_posix() for p in written],
        "data_files": "infill/train-*.parquet",
        "rejected_table": sibling(table, "rejected").relative_to(build).as_posix(),
        "table": table.relative_to(build).as_posix(),
    }
    if check:
        summary["solvability"] = check_sample(table, check, device=device)
    (build / "infill" / "config.json").write_text(json.dumps(summary, indent=2) + "\n")
    summary["table"] = str(table)
    summary["card"] = refresh_card(build)
    return st, summary


def refresh_card(build: Path) -> Path | None:
    """Render <build>/README.md again from the build as it is now (name and repo stick)."""
    from ..card.render import render_card
    return render_card(build).path


def check_sample(table: str | Path, n: int, *, device: str = "cpu", seed: int = 0) -> dict:
    """Solvability of `n` random infill rows of `table`, through curate.verify's harness.

    Own core must verify, the empty core must not (solvable.check_solvable). CUDA rows need
    device=cuda; on the CPU they come back `unsupported` and count as not checked.
    """
    from .solvable import check_solvable, harness_verify, subprocess_verify

    rows = [r for b in read_batches(table) for r in b]
    if device == "cpu":
        rows = [r for r in rows if r.get("backend") != "cuda"]
    try:
        ctx = harness_verify(device)
        verify_ctx = ctx.__enter__()
    except ImportError:  # a curate without the verify stage: the small CPU check instead
        ctx, verify_ctx = None, subprocess_verify
    try:
        results = check_solvable(rows, verify_ctx, sample=n, seed=seed)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
    return {
        "device": device,
        "checked": len(results),
        "solvable": sum(r.solvable for r in results),
        "full": dict(Counter(r.full for r in results)),
        "empty": dict(Counter(r.empty for r in results)),
        "rows": [r.to_json() for r in results],
    }
