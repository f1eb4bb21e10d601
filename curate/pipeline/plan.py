"""The stages a build runs, whatever executes them: the pipeline's steps, with dedup split so
that it is no barrier between synthesis and verify.

A dedup step followed by a verify step becomes two: one over the references right after the
source (decontamination, and near duplicates among the references: saves synthesizing them), and
one over the candidates right after verify, where each cluster keeps its verified, fastest row
(DESIGN.md's rule). Every executor runs this same plan, so that the staged, streaming and Ray
builds of one input keep the same rows.
"""

from __future__ import annotations

from .step import Step


def plan(steps: list[Step]) -> list[Step]:
    out = list(steps)
    for step in steps:
        at = out.index(step)
        verify = next((j for j in range(at + 1, len(out)) if out[j].name == "verify"), None)
        parts = step.split() if verify is not None else None
        if parts is None:
            continue
        pre, post = parts
        out[verify + 1:verify + 1] = [post]
        del out[at]
        out.insert(0, pre)
    return out
