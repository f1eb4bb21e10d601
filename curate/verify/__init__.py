"""verify: re-execute every pair in sandboxed workers and record what happened.

The parent (this package less `worker/`, trusted) never imports candidate or reference code.
Each row gets a fresh compile worker, then on its device a fresh candidate worker and a fresh
judge (the reference alone), all from `curate.verify.worker`, spoken to only through
`curate.verify.messages`. The judge compares outputs; the parent's own clock decides speed;
what the candidate's process says is evidence, never a verdict. docs/verify.md has the rules.

`Verifier` is imported on first use, so that a worker importing `curate.verify.worker` does
not load the parent's engine.
"""

__all__ = ["Verifier", "VerifyResult"]


def __getattr__(name: str):
    if name in __all__:
        from . import engine
        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
