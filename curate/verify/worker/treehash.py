"""A binding digest of a call's outputs: a tree of 128-bit states over the output's words.

`digest.digest` is three position-weighted sums of the words: cheap, exact, and enough against
honest mistakes, but not binding. Any digest that adds up a term per word can be matched by a
different output (a 2x2 "checkerboard" of +1/-1 words leaves all three sums alone), so a worker
that controls its replies could commit to a cheap wrong output and later send the right one,
adjusted within tolerance until the sums match (docs/threat-model.md).

Here every combination of two neighbours goes through a mixing function: leaves are the words,
each made into two 64-bit lanes by murmur3's finalizer (`fmix`) under two keys; each level
pairs neighbours (2i, 2i+1); a node's lanes are `fmix(a1 + fmix(b1 ^ K3))` and
`fmix(a2 + fmix(b2 ^ K4) + h1)`. Matching a committed root from a different output means
hitting a 128-bit state whose leaves come from one 64-bit word each: about 2**64 tries.

The tree is cut into passes of BLOCK leaves (padded with one fixed state), so that a GPU kernel
can reduce a block in registers: `_tree_torch` (any device, one tensor operation at a time)
and `_tree_triton` (CUDA, one launch per pass) give the same bits. The timed calls commit with
it under `--digest tree`; `sums` stays the default until its cost on the GPU is measured
(benchmarks/digest_cost.py).
"""

from __future__ import annotations

import hashlib

import torch

from .digest import _words, digest

BLOCK = 1024          # leaves (then states) reduced per program and per pass
_LOG = BLOCK.bit_length() - 1


def _s64(x: int) -> int:
    """An unsigned 64-bit constant as the signed int64 torch and Triton hold."""
    return x - (1 << 64) if x >= 1 << 63 else x


M1, M2 = _s64(0xFF51AFD7ED558CCD), _s64(0xC4CEB9FE1A85EC53)      # murmur3 fmix64
K1, K2 = _s64(0x9E3779B97F4A7C15), _s64(0xD6E8FEB86659FD93)      # leaf lanes
K3, K4 = _s64(0xA0761D6478BD642F), _s64(0xE7037ED1A0B428DB)      # node lanes
LOW31 = (1 << 31) - 1   # x >> 33 on int64 is arithmetic: masked, it is the logical shift


def _fmix(x: torch.Tensor) -> torch.Tensor:
    x = x ^ ((x >> 33) & LOW31)
    x = x * M1
    x = x ^ ((x >> 33) & LOW31)
    x = x * M2
    return x ^ ((x >> 33) & LOW31)


# the state that fills a short block (the same mix, once, at import)
PAD1, PAD2 = _fmix(torch.tensor([K3 ^ K4, K1 ^ K3], dtype=torch.int64)).tolist()


def _pad(h: torch.Tensor, fill: int) -> torch.Tensor:
    short = -h.numel() % BLOCK
    if not short:
        return h
    return torch.cat([h, torch.full((short,), fill, dtype=torch.int64, device=h.device)])


def _tree_torch(words: torch.Tensor) -> tuple[int, int]:
    """The root's two lanes, one tensor operation at a time (the reference implementation)."""
    w = words.reshape(-1).to(torch.int64)
    h1, h2 = _fmix(w ^ K1), _fmix(w ^ K2)
    while True:
        h1, h2 = _pad(h1, PAD1), _pad(h2, PAD2)
        for _ in range(_LOG):
            a1, b1 = h1.view(-1, 2).unbind(1)
            a2, b2 = h2.view(-1, 2).unbind(1)
            h1 = _fmix(a1 + _fmix(b1 ^ K3))
            h2 = _fmix(a2 + _fmix(b2 ^ K4) + h1)
        if h1.numel() == 1:
            return int(h1.item()), int(h2.item())


try:   # the Triton pass: where Triton is installed (every GPU host; CPU hosts may lack it)
    import triton
    import triton.language as tl
except ImportError:   # pragma: no cover - torch's CPU wheels ship without Triton on some hosts
    triton = None

if triton is not None:
    @triton.jit
    def fmix(x, M1: tl.constexpr, M2: tl.constexpr):
        x = x ^ ((x >> 33) & 2147483647)
        x = x * M1
        x = x ^ ((x >> 33) & 2147483647)
        x = x * M2
        return x ^ ((x >> 33) & 2147483647)

    @triton.jit
    def tree_pass(in1, in2, out1, out2, n, LEAVES: tl.constexpr, BLOCK: tl.constexpr,
                  LOG: tl.constexpr, M1: tl.constexpr, M2: tl.constexpr, K1: tl.constexpr,
                  K2: tl.constexpr, K3: tl.constexpr, K4: tl.constexpr, PAD1: tl.constexpr,
                  PAD2: tl.constexpr):
        pid = tl.program_id(0)
        offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        if LEAVES:
            w = tl.load(in1 + offs, mask=mask, other=0).to(tl.int64)
            h1 = tl.where(mask, fmix(w ^ K1, M1, M2), PAD1)
            h2 = tl.where(mask, fmix(w ^ K2, M1, M2), PAD2)
        else:
            h1 = tl.load(in1 + offs, mask=mask, other=PAD1)
            h2 = tl.load(in2 + offs, mask=mask, other=PAD2)
        for level in tl.static_range(LOG):
            a1, b1 = tl.split(tl.reshape(h1, (BLOCK >> (level + 1), 2)))
            a2, b2 = tl.split(tl.reshape(h2, (BLOCK >> (level + 1), 2)))
            h1 = fmix(a1 + fmix(b1 ^ K3, M1, M2), M1, M2)
            h2 = fmix(a2 + fmix(b2 ^ K4, M1, M2) + h1, M1, M2)
        one = tl.arange(0, 1)
        tl.store(out1 + pid + one, tl.reshape(h1, (1,)))
        tl.store(out2 + pid + one, tl.reshape(h2, (1,)))


def _tree_triton(words: torch.Tensor) -> tuple[int, int]:
    """The same root as `_tree_torch`, one launch per pass of BLOCK (CUDA, or CPU tensors
    under TRITON_INTERPRET=1)."""
    if triton is None:
        raise RuntimeError("the Triton pass needs Triton installed")
    kernel = tree_pass
    w = words.reshape(-1)
    n, leaves = w.numel(), True
    src1 = src2 = w
    while True:
        m = -(-n // BLOCK)
        out1 = torch.empty(m, dtype=torch.int64, device=w.device)
        out2 = torch.empty(m, dtype=torch.int64, device=w.device)
        kernel[(m,)](src1, src2, out1, out2, n, LEAVES=leaves, BLOCK=BLOCK, LOG=_LOG, M1=M1,
                     M2=M2, K1=K1, K2=K2, K3=K3, K4=K4, PAD1=PAD1, PAD2=PAD2)
        if m == 1:
            got = torch.stack([out1[0], out2[0]]).tolist()
            return int(got[0]), int(got[1])
        src1, src2, n, leaves = out1, out2, m, False


def _root(t: torch.Tensor, use_triton: bool | None = None) -> tuple[int, int]:
    words = _words(t)
    if words.numel() == 0:
        return PAD1, PAD2
    if use_triton is None:
        use_triton = words.is_cuda
    return _tree_triton(words) if use_triton else _tree_torch(words)


def commit(kind: str, items: list) -> int:
    """The digest of one call's outputs that the parent chose for the row: `sums`
    (digest.digest: cheap, not binding) or `tree` (binding, tree_digest)."""
    if kind == "tree":
        return tree_digest(items)
    if kind == "sums":
        return digest(items)
    raise ValueError(f"unknown digest {kind!r}")


def tree_digest(items: list, use_triton: bool | None = None) -> int:
    """The binding digest of one call's flat outputs (a non-negative integer below 2**63): each
    tensor's root, dtype and shape, mixed with its index by BLAKE2b (a non-tensor item by its
    repr). `use_triton`: None, the Triton pass on CUDA tensors and torch elsewhere."""
    h = hashlib.blake2b(digest_size=8, person=b"curate-tree")
    for i, x in enumerate(items):
        if isinstance(x, torch.Tensor):
            r1, r2 = _root(x, use_triton)
            dtype = str(x.dtype).removeprefix("torch.")
            text = f"{i}|tensor|{dtype}|{list(x.shape)}|{x.numel()}|{r1}|{r2}"
        else:
            text = f"{i}|{type(x).__name__}|{x!r}"
        h.update(text.encode() + b"\n")
    return int.from_bytes(h.digest(), "big") >> 1
