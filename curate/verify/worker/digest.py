"""One integer per call's outputs, over every output byte: the worker commits to its outputs
(Digest) before the parent picks which to fetch, and the judge recomputes it over what it
received (Compare), so an output fetched is the one committed to.

Exact integer arithmetic on the tensor's own device, so the same bytes give the same value on
the CPU and the GPU and in whatever order a reduction adds them: each tensor's bytes viewed as
int32 words (uint8 when its size is not a multiple of 4), widened to int64, summed, and summed
again weighted by position (so that moving values between positions changes it too; int64
wraps modulo 2**64, which every order of addition agrees on). The sums are mixed with the
item's index, dtype and shape by BLAKE2b; a non-tensor item by its repr.
"""

from __future__ import annotations

import hashlib

import torch

CHUNK = 1 << 24   # words widened to int64 at a time: bounds the temporaries for large outputs
_MASK = (1 << 64) - 1


def _words(t: torch.Tensor) -> torch.Tensor:
    flat = t.detach().contiguous().reshape(-1)
    if flat.dtype == torch.bool:
        flat = flat.view(torch.uint8)
    raw = flat.view(torch.uint8)
    return raw.view(torch.int32) if raw.numel() % 4 == 0 else raw


def _sums(t: torch.Tensor) -> tuple[int, int]:
    """The plain and the position-weighted sum of `t`'s words, modulo 2**64."""
    words = _words(t)
    plain = weighted = 0
    for start in range(0, words.numel(), CHUNK):
        w = words[start:start + CHUNK].to(torch.int64)
        pos = torch.arange(start + 1, start + 1 + w.numel(), dtype=torch.int64, device=w.device)
        plain += int(w.sum())
        weighted += int((w * pos).sum())
        del w, pos
    return plain & _MASK, weighted & _MASK


def _item_text(index: int, x) -> str:
    if isinstance(x, torch.Tensor):
        plain, weighted = _sums(x)
        dtype = str(x.dtype).removeprefix("torch.")
        return f"{index}|tensor|{dtype}|{list(x.shape)}|{plain}|{weighted}"
    return f"{index}|{type(x).__name__}|{x!r}"


def digest(items: list) -> int:
    """The digest of one call's flat outputs (a non-negative integer below 2**63)."""
    h = hashlib.blake2b(digest_size=8)
    for i, x in enumerate(items):
        h.update(_item_text(i, x).encode())
        h.update(b"\n")
    return int.from_bytes(h.digest(), "big") >> 1
