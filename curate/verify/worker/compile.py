"""Compile ahead: import the candidate before its row, so that CUDA extensions and inductor's
C++ are built into the row's caches on a CPU process while the GPU serves other rows; with
`size`, also the reference's sizes from meta tensors.

The candidate's forward never runs here: untrusted code must not run under the compiler's time
limit (Triton kernels compile at their first launch, in the candidate's own worker). Only build
failures decide the row here; anything else is for the candidate's worker to meet and report.
"""

from __future__ import annotations

import time

import torch

from ...isolation.program import load_program
from ..errors import classify_exception
from ..messages import Compile, Compiled, Reply
from .compare import flatten_outputs
from .session import mark_if_patched


def compile_candidate(req: Compile) -> Reply:
    t0 = time.monotonic()
    try:
        load_program(req.kernel_code, f"curate_cand_{req.tag}")
    except BaseException as exc:  # noqa: BLE001 - classify_exception raises Ctrl-C again
        failed = classify_exception(exc, "import")
        failed.recycle = True   # a half-imported program may have changed this process
        return failed
    import_s = round(time.monotonic() - t0, 3)
    size_gb = meta_sizes(req.pytorch_code, req.tag) if req.size else None
    return mark_if_patched(Compiled(seconds=time.monotonic() - t0, import_s=import_s,
                                    size_gb=size_gb))


def _gib(items) -> float:
    return sum(t.numel() * t.element_size() for t in items if isinstance(t, torch.Tensor)) / 2**30


def meta_sizes(pytorch_code: str, tag: str) -> dict | None:
    """GiB of the reference's inputs, outputs and parameters, from shapes alone (meta tensors,
    nothing allocated): the parent sizes the row's device memory by them. None when the
    program does not run on the meta device."""
    try:
        ref = load_program(pytorch_code, f"curate_ref_{tag}")
        with torch.device("meta"), torch.no_grad():
            inputs = list(ref.get_inputs())
            args = list(ref.get_init_inputs()) if hasattr(ref, "get_init_inputs") else []
            model = ref.Model(*args)
            out, _ = flatten_outputs(model(*inputs))
        params = list(model.parameters()) + list(model.buffers())
        return {"inputs": round(_gib(inputs), 4), "outputs": round(_gib(out), 4),
                "params": round(_gib(params), 4)}
    except Exception:  # noqa: BLE001 - data-dependent shapes, .cuda() calls, numpy...
        return None
