"""The worker side's gates: dynamic gates in the candidate's worker, reference degeneracy in the
judge. `WORKER_CHECKS` / `JUDGE_CHECKS` plug them into the worker (curate/verify/worker/hooks.py)."""

WORKER_CHECKS: list = []
JUDGE_CHECKS: list = []


def setup() -> None:
    """Called by hooks.setup_checks() from the worker's setup()."""
