"""Run untrusted code in sandboxed worker processes, never in the main one.

A `WorkerPool` keeps N long-lived workers (imports and setup paid once per worker, not per row).
Each worker is a fresh `python -m curate.isolation.worker` process in its own session and process
group, with a scrubbed environment (no tokens or keys), a private scratch directory as working
directory and HOME, resource limits, and (as root on Linux) its own empty network namespace.
Tasks and results travel as length-prefixed JSON over private pipes, so nothing the worker
sends can execute code in the parent. A worker that crashes, hangs past its deadline, floods its
output or sends garbage is killed with its whole process group and replaced; its task gets a
failure result and every other task carries on.

By layer: env.py (what a worker may see), limits.py (rlimits, network), backend.py (the one door
through which a worker process or the fork server starts), deadline.py (a task's time limit:
frozen and compiler seconds given back), pool.py (dispatch and bookkeeping), zygote.py (the fork
server), worker.py and program.py (inside the worker), sandbox.py, confine.py, freeze.py.
"""

from .env import scrubbed_env
from .limits import Limits
from .pool import TaskResult, WorkerPool

__all__ = ["Limits", "TaskResult", "WorkerPool", "scrubbed_env"]
