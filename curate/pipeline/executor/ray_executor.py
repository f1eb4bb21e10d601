"""The Ray executor: the streaming driver (driver.py) with its stages on a Ray cluster.

Each stage's step runs in actors (ray_actor.StepActor): verify one actor per GPU (`num_gpus`,
so that no two share a device; on the CPU device one actor), every other step one actor per node
(its own pools use the node's cores). A step whose answer depends on every row (dedup, select)
runs as one task. Rows go to the least busy actor and their answers stream back to the driver,
which alone writes the ledger and the tables.

Retries are set on purpose: an actor that dies (its process, its node) is restarted and the
calls it had not answered are sent again (`max_restarts`, `max_task_retries`); every answered
row is already in the ledger, so none is computed twice. A row's own failure is an Outcome,
never retried; a step that raises fails the build (`retry_exceptions=False`), as it would here.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from pathlib import Path

from ...errors import BadInput
from ...isolation.board import ENV as BOARD_ENV, board_dir, new_name, sweep_dead
from ..runner import StageStats
from ..step import Source, Step
from .base import Executor, Lane
from .driver import Driver

log = logging.getLogger("curate")

MAX_RESTARTS = 3        # an actor's process or node lost: start it again, this many times
MAX_TASK_RETRIES = 3    # the calls it had not answered: send them again
TASK_RETRIES = 2        # a whole-table task whose worker died
# one verify actor per GPU (two would need 1.8), leaving shares for the other steps that use a GPU
# (synth on the GPU, synth-llm's refinement checks): ten of them fit beside it, so that an
# upstream step never waits for a GPU that verify, waiting for its rows, holds
VERIFY_GPU = 0.9
OTHER_GPU = 0.01
MAX_CONCURRENCY = 4096  # rows in flight in one actor (the step's pools bound the real work)


def need_ray():
    try:
        import ray
    except ImportError:
        raise BadInput("--executor ray needs Ray, which is not installed",
                       fix='pip install "curate[ray]"') from None
    return ray


class RayExecutor(Executor):
    name = "ray"

    def __init__(self, address: str | None = None):
        self.ray = need_ray()
        self.address = address
        self.resources: dict = {}

    def info(self) -> dict:
        return {"executor": self.name, "ray_address": self.address,
                "ray_version": self.ray.__version__, "ray_resources": self.resources}

    def run(self, source: Source, steps: list[Step], out: Path, *, progress: bool,
            t0: float) -> list[StageStats]:
        ray = self.ray
        started = not ray.is_initialized()
        sweep_dead()                # boards left by builds killed on this host
        board = new_name()          # this build's, on every node
        if started:
            env = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
            ray.init(address=self.address, include_dashboard=False, log_to_driver=True,
                     runtime_env={"env_vars": env} if env else None)
        try:
            self.resources = {k: v for k, v in ray.cluster_resources().items()
                              if k in ("CPU", "GPU", "memory")}
            nodes = sum(1 for n in ray.nodes() if n.get("Alive"))

            def lane(step, emit, fail, out_dir):
                return RayLane(step, emit, fail, out_dir, nodes=nodes,
                               gpus=int(self.resources.get("GPU", 0)), board=board)
            return Driver(source, steps, out, lane, progress=progress, t0=t0).run()
        finally:
            if started:
                ray.shutdown()
            shutil.rmtree(board_dir(board), ignore_errors=True)


def actor_options(step: Step, stage: str, k: int) -> dict:
    """How a stage's k-th actor is placed and restarted."""
    uses_gpu = step.resources.gpus > 0
    gpu = (VERIFY_GPU if step.name == "verify" else OTHER_GPU) if uses_gpu else 0
    return {"num_cpus": 0, "num_gpus": gpu, "max_restarts": MAX_RESTARTS,
            "max_task_retries": MAX_TASK_RETRIES, "max_concurrency": MAX_CONCURRENCY,
            "name": f"curate-{stage}-{k}", "scheduling_strategy": "SPREAD"}


def actor_count(step: Step, nodes: int, gpus: int) -> int:
    """verify: one per GPU. Any other step: one per node where it uses several cores (its pool
    takes them all; on the GPU it gets a share of one device), else one."""
    if step.name == "verify" and step.resources.gpus > 0:
        return max(1, gpus)
    return max(1, nodes) if step.resources.cpus > 1 else 1


class RayLane(Lane):
    def __init__(self, step: Step, emit, fail, out_dir: Path, *, nodes: int, gpus: int,
                 board: str | None = None):
        super().__init__(step, emit, fail, out_dir)
        from .ray_actor import StepActor, driver_env
        import ray
        self.ray = ray
        recipe = step.recipe
        if recipe is None:
            raise BadInput(f"step {step.name!r} was not made from a pipeline file",
                           fix="make it with curate.pipeline.registry.make")
        self.recipe, self.stage = recipe, f"{os.getpid()}-{step.name}"
        # the build's board: a verify actor's timed batches stop the synth actors' workers
        self.env = {**driver_env(), BOARD_ENV: board}
        self.actors = []
        if step.batch_size is not None:
            self.actors = [StepActor.options(**actor_options(step, self.stage, k))
                           .remote(recipe, str(out_dir), self.env)
                           for k in range(actor_count(step, nodes, gpus))]
        self.inflight: dict = {}   # ObjectRef -> (position, actor index)
        self.load = [0] * len(self.actors)
        self.lock = threading.Condition()
        self.closed = False
        self._stats: dict = {}
        self._closer: threading.Thread | None = None
        self.thread = threading.Thread(target=self._collect, daemon=True,
                                       name=f"ray-{step.name}")
        self.thread.start()

    def put(self, pos: tuple, row: dict) -> None:
        with self.lock:
            k = min(range(len(self.actors)), key=self.load.__getitem__)
            self.load[k] += 1
            self.inflight[self.actors[k].run.remote(row)] = (pos, k)
            self.lock.notify()

    def put_table(self, items: list[tuple[tuple, dict]]) -> None:
        from .ray_actor import run_table
        ref = run_table.options(num_cpus=1, max_retries=TASK_RETRIES, retry_exceptions=False) \
            .remote(self.recipe, str(self.out_dir), self.env, [row for _, row in items])
        with self.lock:
            self.inflight[ref] = ([pos for pos, _ in items], None)
            self.lock.notify()

    def _collect(self) -> None:
        """Answers as they come back, each handed to the driver at once."""
        ray = self.ray
        while True:
            with self.lock:
                while not self.inflight and not self.closed:
                    self.lock.wait()
                if not self.inflight:
                    return
                refs = list(self.inflight)
            # every answer there is after a short wait: one wait per answer would be quadratic
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0.2)
            for ref in ready:
                with self.lock:
                    pos, k = self.inflight.pop(ref)
                    if k is not None:
                        self.load[k] -= 1
                try:
                    value = ray.get(ref)
                except BaseException as exc:  # past its retries, or the step raised
                    self.fail(exc)
                    return
                self._hand_on(pos, k, value)

    def _hand_on(self, pos, k, value) -> None:
        if k is not None:
            self.emit(pos, value)
            return
        outcomes, self._stats = value  # a whole-table task
        for p, outcome in zip(pos, outcomes):
            self.emit(p, outcome)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify()
        self._closer = threading.Thread(target=self._finish, daemon=True)
        self._closer.start()

    def _finish(self) -> None:
        self.thread.join()
        reports = self.ray.get([a.finish.remote() for a in self.actors]) if self.actors else []
        if reports:
            self._stats = reports[0] if len(reports) == 1 else {"actors": reports}
        for a in self.actors:
            self.ray.kill(a, no_restart=True)

    def stats(self) -> dict:
        if self._closer is not None:
            self._closer.join()
        return self._stats

    def stop(self) -> None:
        with self.lock:
            self.closed = True
            refs, self.inflight = list(self.inflight), {}
            self.lock.notify()
        for ref in refs:
            try:
                self.ray.cancel(ref, force=False)
            except Exception:  # already finished, or not cancellable: the kill below ends it
                pass
        for a in self.actors:
            self.ray.kill(a, no_restart=True)
