"""Where a build's stages run (the datatrove model: one interface, several places).

    staged   one stage after another in this process (pipeline/runner.py)
    local    every stage at once on this machine, a row moving on as soon as its stage answered
    ray      the same streaming, its stages on a Ray cluster (the `ray` extra)

The stages know nothing of where they run: each executor gets the source and the planned steps
(pipeline/plan.py) and returns the stage statistics; the driver alone writes the ledger and the
tables.
"""

from __future__ import annotations

from .base import Executor

EXECUTORS = ("local", "staged", "ray")


def make_executor(name: str, *, ray_address: str | None = None) -> Executor:
    from ...errors import BadInput
    if name == "staged":
        from .staged import StagedExecutor
        return StagedExecutor()
    if name == "local":
        from .local import LocalExecutor
        return LocalExecutor()
    if name == "ray":
        from .ray_executor import RayExecutor
        return RayExecutor(address=ray_address)
    raise BadInput(f"unknown executor {name!r}", fix=f"use one of {', '.join(EXECUTORS)}")
