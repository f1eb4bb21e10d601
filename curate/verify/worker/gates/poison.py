"""Memory poisoning: what a candidate could be handed uninitialized is NaN before its calls, so
an output read from recycled memory (the reference's freed output, say) shows up."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..memory import MMAP_THRESHOLD
from .state import tensors_in


def poison_free_memory(device: str = "cuda",
                       like: Iterable[Any] | Callable[[], Iterable[Any]] = (),
                       max_bytes: int = 8 << 30) -> int:
    """Fill memory the candidate could be handed uninitialized with NaN, so that an output read
    from recycled memory (e.g. the reference's freed output) shows up as NaN.

    CUDA: every free block cached by the allocator is claimed at its exact size, filled and given
    back. CPU: blocks of the sizes of `like` (the reference's outputs and inputs) below
    MMAP_THRESHOLD are allocated, filled and freed, which is what malloc would hand out next for
    those sizes (larger blocks come from fresh mappings, zeroed: no earlier values to hide).
    `like` may be a function that makes them, called on the CPU only (the GPU needs no sizes:
    a copy of a call's inputs made for nothing is a whole input set on the device).
    Returns the bytes poisoned."""
    import torch
    held = []
    total = 0
    if str(device).startswith("cuda") and torch.cuda.is_available():
        try:
            snap = torch.cuda.memory_snapshot()
        except Exception:  # noqa: BLE001
            snap = []
        sizes = []
        for seg in snap:
            for blk in seg.get("blocks", []):
                if blk.get("state") == "inactive" and blk.get("size", 0) > 0:
                    sizes.append(int(blk["size"]))
        for size in sorted(sizes, reverse=True):
            if total + size > max_bytes:
                continue
            try:
                t = torch.empty(size // 4, dtype=torch.float32, device=device)
            except Exception:  # noqa: BLE001, S112
                continue
            t.fill_(float("nan"))
            held.append(t)
            total += size
        torch.cuda.synchronize()
        del held
        return total
    for ref in like() if callable(like) else like:
        for t in tensors_in([ref]):
            nbytes = t.numel() * t.element_size()
            if nbytes == 0 or nbytes >= MMAP_THRESHOLD:
                continue
            for _ in range(4):
                buf = torch.empty(max(1, nbytes // 4), dtype=torch.float32)
                buf.fill_(float("nan"))
                held.append(buf)
                total += nbytes
    del held
    return total
