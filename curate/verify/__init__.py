"""verify: re-execute every pair in sandboxed workers and record what happened.

The parent (this package, trusted) never imports candidate or reference code. Each row gets a
fresh compile worker, then on its device a fresh candidate worker and a fresh judge (the
reference alone), all from `curate.verify.worker`, spoken to only through
`curate.verify.messages`. The judge compares outputs; the parent's own clock decides speed;
what the candidate's process says is evidence, never a verdict. docs/verify.md has the rules.
"""

from .engine import Verifier, VerifyResult

__all__ = ["Verifier", "VerifyResult"]
