"""One integer per call's outputs, over every output byte: the worker commits to its outputs
in a timed batch's own reply (Batch.digests) before the parent picks which to fetch, and the
judge recomputes it over what it received (Compare), so an output fetched is the one committed
to.

Exact integer arithmetic on the tensor's own device, so the same bytes give the same value on
the CPU and the GPU and in whatever order a reduction adds them: each tensor's bytes viewed as
int64 words (int32 or uint8 when its size is not a multiple of 8 or 4), read as rows, reduced in
int64 along rows and along columns, and summed weighted by row and by column (so that moving
values between positions changes it too; int64 wraps modulo 2**64, which every order of addition
agrees on). Every timed call pays for one, in the reference's worker as in the candidate's: the
parent's clock can only resolve a kernel that is not small beside it. Words of 8 bytes are summed
as they are; narrower words are widened first, which costs the CPU about 30 times as much.
A small output's fixed cost (a handful of tensor operations) is most of its digest: the position
weights are kept per device, and outputs of at most SMALL words take one weighted sum.
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


SMALL = ROW << 1    # outputs of at most this many words (64 KiB): one weighted sum
_RAMPS: dict[str, torch.Tensor] = {}    # per device: 1, 2, 3, ...
_WEIGHTS: dict[tuple, torch.Tensor] = {}  # per device: (1, row + 1, column + 1) per position


def _ramp(n: int, dev: torch.device) -> torch.Tensor:
    """1..n on `dev`, cut from one tensor kept per device: a digest's fixed cost is a handful
    of tensor operations, which for a small output is most of what a timed call pays."""
    key = str(dev)
    have = _RAMPS.get(key)
    if have is None or have.numel() < n:
        have = torch.arange(1, max(n, ROW) + 1, dtype=torch.int64, device=dev)
        _RAMPS[key] = have
    return have[:n]


def _small_sums(words: torch.Tensor) -> list[int]:
    """The same three sums for a small output, as one product with the positions' weights (a
    temporary of three times its words; the same values modulo 2**64 in any grouping)."""
    key = (str(words.device), ROW, SMALL)
    w = _WEIGHTS.get(key)
    if w is None:
        pos = torch.arange(SMALL, dtype=torch.int64, device=words.device)
        w = torch.stack([torch.ones_like(pos), pos // ROW + 1, pos % ROW + 1])
        _WEIGHTS[key] = w
    return (w[:, :words.numel()] * words).sum(dim=1).tolist()


def _sums(t: torch.Tensor) -> tuple[int, int, int]:
    """The words' sum, and their row and column sums weighted by position, modulo 2**64. The
    words are read as rows of ROW: a value moved to another position changes its row's or its
    column's sum. Reductions on the tensor's device (int64 arithmetic wraps modulo 2**64, the
    same in any order), one read back: about two reads of the output, no temporary its size."""
    words = _words(t)
    n, dev = words.numel(), words.device
    if n == 0:
        return 0, 0, 0
    if n <= SMALL:
        plain, by_row, by_col = _small_sums(words)
        return plain & _MASK, by_row & _MASK, by_col & _MASK
    full = n - n % ROW
    plain = by_row = by_col = None
    if full:
        cols = None
        for start in range(0, full, CHUNK):
            block = words[start:min(start + CHUNK, full)].view(-1, ROW)
            rows = block.sum(dim=1, dtype=torch.int64)   # int64 words: summed in place
            first = start // ROW
            p, r = rows.sum(), (rows * _ramp(first + rows.numel(), dev)[first:]).sum()
            c = block.sum(dim=0, dtype=torch.int64)
            plain, by_row = (p, r) if plain is None else (plain + p, by_row + r)
            cols = c if cols is None else cols + c
        by_col = (cols * _ramp(ROW, dev)).sum()
    if full < n:   # the last, partial row
        tail = words[full:].to(torch.int64)
        p = tail.sum()
        r, c = p * (full // ROW + 1), (tail * _ramp(tail.numel(), dev)).sum()
        plain, by_row, by_col = (p, r, c) if plain is None else \
            (plain + p, by_row + r, by_col + c)
    got = torch.stack([plain, by_row, by_col]).tolist()
    return got[0] & _MASK, got[1] & _MASK, got[2] & _MASK


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
