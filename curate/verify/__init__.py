"""verify: re-execute every pair in sandboxed workers and record what happened.

The parent (trusted) schedules three kinds of tasks on three worker pools: `compile` (import
the candidate ahead of its turn, filling the compile caches), `reference` (run the reference
program on seeded inputs and hand back its outputs) and `candidate` (run the candidate on the
same inputs, then time it against the reference in the same process). Candidate code never
runs in the parent, and reference outputs never exist in a process that imported candidate code:
the parent compares the two after loading both with `torch.load(weights_only=True)`.
"""

from .engine import Verifier, VerifyResult

__all__ = ["Verifier", "VerifyResult"]
