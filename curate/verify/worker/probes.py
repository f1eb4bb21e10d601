"""What the parent asks a fresh worker before trusting a setup: can it run CUDA and a Triton
kernel here (inside the sandbox), and does a way of passing outputs work between two workers?"""

from __future__ import annotations

import torch

from ...isolation import worker
from ...isolation.program import load_program
from ..messages import ProbeCuda, Probed, ProbeReceive, ProbeSend
from . import transport
from .clock import sync

PROBE_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def add_one(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=mask) + 1.0, mask=mask)
"""


def _known_tensor(device: str) -> torch.Tensor:
    return torch.arange(4096, dtype=torch.float32, device=device) * 1.5


def probe_cuda(req: ProbeCuda) -> Probed:
    """CUDA and a Triton kernel launch in this (confined) worker: the sandbox check."""
    x = torch.zeros(1000, device=req.device)
    mod = load_program(PROBE_KERNEL, "curate_probe_cuda")
    mod.add_one[(4,)](x, x.numel(), BLOCK=256)
    sync(req.device)
    total = torch.cuda.mem_get_info()[1] / 2**30 if req.device == "cuda" else None
    return Probed(status="ok" if float(x.sum()) == 1000.0 else "error", total_gb=total)


def probe_send(req: ProbeSend) -> Probed:
    """The sending half: one known tensor exported by `transport` (cuda_ipc or cuda_fd)."""
    x = _known_tensor(req.device)
    _, total = torch.cuda.mem_get_info()
    if req.transport == "cuda_fd":
        desc, fds = transport.send_cuda_fd([x, None])
        worker.reply_fds(fds)
    else:
        desc = transport.send_cuda_ipc([x, None])
    return Probed(total_gb=total / 2**30, export=desc)


def probe_receive(req: ProbeReceive) -> Probed:
    """The receiving half: the export opened by the same transport and checked bit for bit."""
    items = transport.receive(req.export, req.device, worker.task_fds(), req.transport)
    ok = len(items) == 2 and items[1] is None and torch.equal(items[0], _known_tensor(req.device))
    del items
    return Probed(status="ok" if ok else "mismatch")
