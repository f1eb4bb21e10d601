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
from .executor import make_executor
from .executor.base import Executor
from .plan import plan
from .runner import stage_paths

log = logging.getLogger("curate")


def build(spec: dict, out_dir: str | Path, *, progress: bool = True,
          executor: str | Executor = "local", ray_address: str | None = None) -> dict:
    """Run `spec` (see pipeline/config.py) into `out_dir` with `executor` (pipeline/executor:
    local, staged or ray); return the stats written to stats.json."""
    out = Path(out_dir)
    source = pconfig.build_source(spec)  # every setting checked before anything is written
    steps = plan(pconfig.build_steps(spec))
    if isinstance(executor, str):
        executor = make_executor(executor, ray_address=ray_address)
    out.mkdir(parents=True, exist_ok=True)
    (out / "pipeline.yaml").write_text(pconfig.dump(spec))
    clear_leftovers(out / "stages")  # what a killed run left half-written
    clear_leftovers(out)
    t0 = time.monotonic()
    stage_stats = executor.run(source, steps, out, progress=progress, t0=t0)
    _concat([stage_paths(out, i, s.name)[1] for i, s in enumerate([source, *steps])],
            out / "rejected.parquet")
    shards = write_shards(stage_paths(out, len(steps), ([source, *steps])[-1].name)[0],
                          out / "data")
    stats = {
        "curate_version": __version__,
        "pipeline": spec.get("name"),
        "device": spec.get("device"),
        "threshold": spec.get("threshold"),
        "python": platform.python_version(),
        "seconds": round(time.monotonic() - t0, 3),
        "kept": sum(pq.ParquetFile(p).metadata.num_rows for p in shards),
        "rejected": pq.ParquetFile(out / "rejected.parquet").metadata.num_rows,
        **executor.info(),
        "stages": [s.to_json() for s in stage_stats],
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
