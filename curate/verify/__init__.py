"""verify: re-execute every pair in sandboxed workers and record what happened.

The parent (trusted, this package less `worker/`) schedules requests on sandboxed workers
(curate/verify/worker/, which never imports the parent side): a compile worker imports the
candidate ahead of its turn, a judge runs the reference alone, and the candidate's worker runs
the candidate on the same inputs. They speak only through curate/verify/messages.py.

`Verifier` is imported on first use, so that a worker importing `curate.verify.worker` does
not load the parent's engine.
"""

__all__ = ["Verifier", "VerifyResult"]


def __getattr__(name: str):
    if name in __all__:
        from . import engine
        return getattr(engine, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
