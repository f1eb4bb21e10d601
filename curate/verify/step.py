"""The `verify` pipeline step: every row comes out with its status (verify filters nothing)."""

from __future__ import annotations

import os
from typing import Iterable, Iterator

from ..pipeline.feed import recorded
from ..pipeline.step import Outcome, Resources, Step
from ..record import add_reasons
from .config import parse_devices
from .engine import Verifier
from .result import STATUSES


class Verify(Step):
    name = "verify"
    batch_size = 256
    cache = True

    def __init__(self, device: str = "cpu", workers: int | None = None, timeout: float = 120,
                 trials: int = 3, seed: int = 0, time_budget: float | None = None,
                 compile_workers: int | None = None, compile_timeout: float = 300.0,
                 devices: str | list | None = None, cache_dir: str | None = None,
                 memory_gb: float | None = None, sandbox: str = "auto",
                 threshold: float | None = None, second_shape: str = "auto",
                 digest: str = "sums"):
        if device == "auto":
            from ..pipeline.config import detect_device
            device = detect_device()
        if isinstance(devices, (str, int)):
            devices = parse_devices(str(devices))
        options = {"cache_dir": cache_dir} if cache_dir else {}
        self.verifier = Verifier(device=device, workers=workers, timeout=timeout, trials=trials,
                                 seed=seed, time_budget=time_budget,
                                 compile_workers=compile_workers, compile_timeout=compile_timeout,
                                 devices=devices, memory_gb=memory_gb, sandbox=sandbox,
                                 threshold=threshold, second_shape=second_shape, digest=digest,
                                 **options)
        self.device = device
        ngpus = len(devices) if devices else 1
        self.resources = Resources(cpus=os.cpu_count() or 1,
                                   gpus=ngpus if device == "cuda" else 0)

    def config(self) -> dict:
        return self.verifier.config()

    def setup(self) -> None:
        self.verifier.start()

    def teardown(self) -> None:
        self.verifier.close()

    def stats(self) -> dict:
        """Statuses, time spent in timed trials and workers replaced (into stats.json)."""
        v = self.verifier
        statuses = {k: n for k, n in v.stats.items() if k in STATUSES}
        return {"device": v.device, "statuses": statuses, **v.device_report(),
                "timed_wall_s": round(v.timed_wall_s, 3), "workers_replaced": v.replaced,
                "workers": v.workers, "trials": v.trials, "sandbox": v.sandbox,
                "sandbox_probe": v.sandbox_probe, "transport": v.transport,
                "cpu_threads": v.cpu_threads, "retimed_rows": v.retimed,
                "second_shape": dict(v.second_shape),
                "startup_s": round(v.startup_s, 2),
                "probe_s": v.placement.probe_s if v.placement else {},
                "phase_s": {k: round(s, 2) for k, s in sorted(v.phase_s.items())}}

    def process(self, rows: list[dict]) -> Iterator[tuple[int, Outcome]]:
        return self.process_stream(rows)

    def process_stream(self, rows: Iterable[dict]) -> Iterator[tuple[int, Outcome]]:
        """Each row starts as it arrives (the verifier reads its input as it comes)."""
        seen: list[dict] = []
        for i, res in self.verifier.verify(recorded(rows, seen)):
            row = dict(seen[i])
            row.update(res.columns())
            add_reasons(row, *res.reasons)
            yield i, Outcome.keep(row)

