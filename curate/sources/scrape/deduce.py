"""Argument deduction and the keep-gates, driven from the parent, run in sandboxed workers.

Each class costs two tasks on a `fresh` WorkerPool (no process serves two tasks; workers are
forked from a server that imported torch once, under bubblewrap with a uid of their own where
this machine allows, and Landlock): `deduce` on the closure, then `check` on the finished
program text, so that what is kept is what ran. The parent only renders text.
"""

from __future__ import annotations

import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterator

from .emit import program


HANDLER = "curate.sources.scrape.deduce_worker:handle"
SETUP = "curate.sources.scrape.deduce_worker:setup"
PRELOAD = ["torch", "curate.sources.scrape.deduce_worker"]
UID_OFFSET = 2048  # slots' uids in this process's block (isolation.sandbox.uid_block): after
                   # verify's and synth's pools


@dataclass
class Job:
    """One class to deduce: its closure and the program's header line."""

    closure: str
    class_name: str
    head: str
    missing: list[str] = field(default_factory=list)


@dataclass
class Verdict:
    """A job's end: the program (kept) or the reason and last error (dropped)."""

    program: str | None
    reason: str | None
    error: str | None = None
    attempts: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class DeduceSettings:
    timeout: float = 60.0
    budget_s: float = 20.0
    max_init: int = 30
    max_forward: int = 40
    max_params: int = 20_000_000
    memory_gb: float = 6.0
    graph_breaks: bool = False

    def task(self) -> dict:
        return {"budget_s": self.budget_s, "max_init": self.max_init,
                "max_forward": self.max_forward, "max_params": self.max_params}


def uid_base() -> int:
    """The first worker uid of this run, in the block no other live run holds."""
    from ...isolation.sandbox import uid_block
    return uid_block() + UID_OFFSET


def default_jobs() -> int:
    return max(1, (os.cpu_count() or 2))


class Deducer:
    """A pool of sandboxed workers answering Jobs with Verdicts."""

    def __init__(self, settings: DeduceSettings, jobs: int | None = None,
                 sandbox: str = "auto"):
        self.settings, self.jobs = settings, min(jobs or default_jobs(), 1024)
        self.sandbox_mode = sandbox
        self.pool = None
        self.sandbox = "none"

    def start(self) -> None:
        from ...isolation import Limits, WorkerPool
        from ...isolation.sandbox import choose, label
        self._scratch = tempfile.mkdtemp(prefix="curate-scrape-")
        wrap, _ = choose(self.sandbox_mode, "cpu", [self._scratch], "scrape")
        limits = Limits(memory_gb=self.settings.memory_gb, confine=self.sandbox_mode != "off")
        from ...isolation import confine
        self.sandbox = label(wrap, limits.confine and confine.supported())
        env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        self.pool = WorkerPool(HANDLER, setup=SETUP, workers=self.jobs,
                               timeout=self.settings.timeout, env=env, limits=limits,
                               scratch_root=self._scratch, fresh=True, fork_server=PRELOAD,
                               sandbox=wrap, uid_base=uid_base() if wrap else None)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
            self.pool = None
        if getattr(self, "_scratch", None):
            import shutil
            shutil.rmtree(self._scratch, ignore_errors=True)

    def run(self, jobs: list[Job]) -> Iterator[tuple[int, Verdict]]:
        """(index, Verdict) as each job finishes."""
        if not jobs:
            return
        if self.pool is None:
            self.start()
        with ThreadPoolExecutor(self.jobs) as ex:
            futures = {ex.submit(self.one, j): i for i, j in enumerate(jobs)}
            from concurrent.futures import as_completed
            for fut in as_completed(futures):
                yield futures[fut], fut.result()

    def one(self, job: Job) -> Verdict:
        task = {"role": "deduce", "program": job.closure, "class": job.class_name,
                "missing": job.missing, **self.settings.task()}
        got = self._call(task)
        if not got.get("ok"):
            return Verdict(None, got.get("reason") or "gave_up", got.get("error"),
                           got.get("attempts", 0), got.get("seconds", 0.0))
        closure = got.get("program") or job.closure  # with stand-ins for imports that fail
        text = program(closure, job.class_name, got["init"], got["kw_init"], got["inputs"],
                       job.head)
        checked = self._call({"role": "check", "program": text,
                              "graph_breaks": self.settings.graph_breaks})
        secs = got.get("seconds", 0.0) + checked.get("seconds", 0.0)
        if not checked.get("ok"):
            return Verdict(None, checked.get("reason") or "gave_up", checked.get("error"),
                           got["attempts"], secs)
        return Verdict(text, None, None, got["attempts"], secs)

    def _call(self, task: dict) -> dict:
        res = self.pool.call(task)
        if res.status == "ok" and isinstance(res.value, dict):
            return res.value
        if res.status == "timeout":
            return {"ok": False, "reason": "timeout",
                    "error": f"no answer within {self.settings.timeout:.0f}s"}
        text = (res.error or res.output or res.status or "")[-2000:]
        low = text.lower()
        if res.status == "crashed" and ("memory" in low or res.exit_code in (-9, 137)):
            return {"ok": False, "reason": "too_large", "error": text or "worker killed"}
        return {"ok": False, "reason": "crashed", "error": text or f"worker {res.status}"}
