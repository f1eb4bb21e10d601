"""`curate build`: run a pipeline into a build directory (DESIGN.md, "Build directory")."""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from pathlib import Path

import pyarrow.parquet as pq

from .. import __version__
from ..hub.shards import write_shards
from ..tableio import TableWriter, clear_leftovers, read_batches
from . import config as pconfig
from .runner import Runner, cache_key, stage_paths, step_id

log = logging.getLogger("curate")


def build(spec: dict, out_dir: str | Path, *, progress: bool = True) -> dict:
    """Run `spec` (see pipeline/config.py) into `out_dir`; return the stats written to stats.json."""
    out = Path(out_dir)
    source = pconfig.build_source(spec)  # every setting checked before anything is written
    steps = pconfig.build_steps(spec)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pipeline.yaml").write_text(pconfig.dump(spec))
    clear_leftovers(out / "stages")  # what a killed run left half-written
    clear_leftovers(out)
    t0 = time.monotonic()
    runner = Runner(out, progress=progress)
    try:
        kept, rejected = stage_paths(out, 0, source.name)
        runner.run_source(0, source, kept, rejected)
        upstream = cache_key(source.name, source.config())
        for i, step in enumerate(steps, start=1):
            nxt, rej = stage_paths(out, i, step.name)
            runner.run_step(i, step, kept, nxt, rej, upstream=upstream)
            upstream = cache_key(upstream, step_id(step))
            kept = nxt
        stages = [stage_paths(out, i, s.name)[1] for i, s in
                  enumerate([source, *steps])]
        _concat(stages, out / "rejected.parquet")
        shards = write_shards(kept, out / "data")
    finally:
        runner.close()
    stats = {
        "curate_version": __version__,
        "pipeline": spec.get("name"),
        "device": spec.get("device"),
        "threshold": spec.get("threshold"),
        "python": platform.python_version(),
        "seconds": round(time.monotonic() - t0, 3),
        "kept": sum(pq.ParquetFile(p).metadata.num_rows for p in shards),
        "rejected": pq.ParquetFile(out / "rejected.parquet").metadata.num_rows,
        "stages": [s.to_json() for s in runner.stats],
        "shards": [p.relative_to(out).as_posix() for p in shards],
    }
    tmp = out / ".stats.json.tmp"  # a build cut short never leaves a stats.json half-written
    tmp.write_text(json.dumps(stats, indent=2))
    os.replace(tmp, out / "stats.json")
    from ..card.render import render_card  # the card to review before `curate push`
    render_card(out)
    return stats


def _concat(paths: list[Path], dest: Path) -> None:
    with TableWriter(dest) as w:
        for p in paths:
            for batch in read_batches(p):
                w.write(batch)
