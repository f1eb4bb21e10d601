"""One integer per call's outputs, over every output byte: the worker commits to its outputs
in a timed batch's own reply (Batch.digests) before the parent picks which to fetch, and the judge recomputes it over what it
received (Compare), so an output fetched is the one committed to.

Exact integer arithmetic on the tensor's own device, so the same bytes give the same value on
the CPU and the GPU and in whatever order a reduction adds them: each tensor's bytes viewed as
int64 words (int32 or uint8 when its size is not a multiple of 8 or 4), read as rows, reduced in
int64 along rows and along columns, and summed weighted by row and by column (so that moving
values between positions changes it too; int64 wraps modulo 2**64, which every order of addition
agrees on). Every timed call pays for one, in the reference's worker as in the candidate's: the
parent's clock can only resolve a kernel that is not small beside it. Words of 8 bytes are summed
as they are; narrower words are widened first, which costs the CPU about 30 times as much.
The sums are mixed with the item's index, dtype and shape by BLAKE2b; a non-tensor item by its
repr.
"""

from __future__ import annotations

import hashlib

import torch

ROW = 1 << 12       # words are read as rows of this many
CHUNK = ROW << 12   # words reduced at a time (whole rows)
_MASK = (1 << 64) - 1


def _words(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as the widest words that divide its size (the size alone decides, so
    the judge's copy of an output reads as the candidate's original did)."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    raw = flat.view(torch.uint8)
    for width, dtype in ((8, torch.int64), (4, torch.int32)):
        if raw.numel() % width == 0:
            if raw.storage_offset() % width:
                raw = raw.clone()       # a view that starts between words: aligned copy
            return raw.view(dtype)
    return raw


def _sums(t: torch.Tensor) -> tuple[int, int, int]:
    """The words' sum, and their row and column sums weighted by position, modulo 2**64. The
    words are read as rows of ROW: a value moved to another position changes its row's or its
    column's sum. Reductions on the tensor's device (int64 arithmetic wraps modulo 2**64, the
    same in any order), one read back: about two reads of the output, no temporary its size."""
    words = _words(t)
    n, dev = words.numel(), words.device
    full = n - n % ROW
    acc = torch.zeros(2, dtype=torch.int64, device=dev)      # plain, by row
    cols = torch.zeros(ROW, dtype=torch.int64, device=dev)
    for start in range(0, full, CHUNK):
        block = words[start:min(start + CHUNK, full)].view(-1, ROW)
        rows = block.sum(dim=1, dtype=torch.int64)   # int64 words: summed in place, no widening
        first = start // ROW + 1
        weights = torch.arange(first, first + rows.numel(), dtype=torch.int64, device=dev)
        acc += torch.stack([rows.sum(), (rows * weights).sum()])
        cols += block.sum(dim=0, dtype=torch.int64)
    if full < n:
        tail = words[full:].to(torch.int64)
        acc += torch.stack([tail.sum(), tail.sum() * (full // ROW + 1)])
        cols[: tail.numel()] += tail
    by_col = (cols * torch.arange(1, ROW + 1, dtype=torch.int64, device=dev)).sum()
    plain, by_row, col = torch.cat([acc, by_col.reshape(1)]).tolist()
    return plain & _MASK, by_row & _MASK, col & _MASK


def _item_text(index: int, x) -> str:
    if isinstance(x, torch.Tensor):
        plain, by_row, by_col = _sums(x)
        dtype = str(x.dtype).removeprefix("torch.")
        return f"{index}|tensor|{dtype}|{list(x.shape)}|{plain}|{by_row}|{by_col}"
    return f"{index}|{type(x).__name__}|{x!r}"


def digest(items: list) -> int:
    """The digest of one call's flat outputs (a non-negative integer below 2**63)."""
    h = hashlib.blake2b(digest_size=8)
    for i, x in enumerate(items):
        h.update(_item_text(i, x).encode())
        h.update(b"\n")
    return int.from_bytes(h.digest(), "big") >> 1
