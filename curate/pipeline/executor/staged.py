"""The staged executor: one stage after another, each over the whole table (pipeline/runner.py),
with a stage marker per stage. What the streaming executors are compared with in the tests."""

from __future__ import annotations

from pathlib import Path

from ..runner import Runner, StageStats, cache_key, stage_paths, step_id
from ..step import Source, Step
from .base import Executor


class StagedExecutor(Executor):
    name = "staged"

    def run(self, source: Source, steps: list[Step], out: Path, *, progress: bool,
            t0: float) -> list[StageStats]:
        runner = Runner(out, progress=progress, t0=t0)
        try:
            kept, rejected = stage_paths(out, 0, source.name)
            runner.run_source(0, source, kept, rejected)
            upstream = cache_key(source.name, source.config())
            for i, step in enumerate(steps, start=1):
                nxt, rej = stage_paths(out, i, step.name)
                runner.run_step(i, step, kept, nxt, rej, upstream=upstream)
                upstream = cache_key(upstream, step_id(step))
                kept = nxt
        finally:
            runner.close()
        return runner.stats
