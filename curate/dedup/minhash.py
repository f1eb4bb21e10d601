"""MinHash signatures of programs, computed with numpy in batches and over CPU cores.

A program's shingles are the hashes of its runs of `shingle` consecutive tokens (tokens.py). A
signature is exactly what datasketch computes for the same shingle hashes
(`MinHash(num_perm, seed, hashfunc=identity).update_batch(shingles)`, scheme "affine32", the
default since datasketch 2.0), so signatures go into datasketch's `LeanMinHash` and `MinHashLSH`
(the Redis index) unchanged; tests/test_dedup.py checks the equality. datasketch itself needs
~300 us a program for this (a Python call per shingle, then a shingles x permutations matrix);
looping over permutations on cache-resident vectors of a whole batch takes ~15 us.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Iterable, Sequence

import numpy as np

from .tokens import PUNCTUATION, abstract_tokens, blob, tokens

_U32 = np.uint32


@dataclass(frozen=True)
class SketchConfig:
    """Everything that decides a signature: indexes built with other settings do not mix."""

    num_perm: int = 128
    seed: int = 1
    shingle: int = 5
    abstract: bool = False
    tokenizer: str = "fast"

    def to_json(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=8)
def permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutations (a, b) for `num_perm` and `seed`."""
    from datasketch import MinHash
    m = MinHash(num_perm=num_perm, seed=seed, scheme="affine32")
    a, b = m.permutations
    return np.ascontiguousarray(a, dtype=_U32), np.ascontiguousarray(b, dtype=_U32)


def fmix32(h: np.ndarray) -> np.ndarray:
    """MurmurHash3's finalizer, which datasketch applies to every input hash (affine32)."""
    h = h ^ (h >> _U32(16))
    h *= _U32(0x85EBCA6B)
    h ^= h >> _U32(13)
    h *= _U32(0xC2B2AE35)
    h ^= h >> _U32(16)
    return h


# --- tokens -> ids -> shingles ------------------------------------------------------------------
#
# A token's id is a polynomial hash of its bytes (mod 2**64), finalized with splitmix64: stable
# across processes and runs, and computed for the tokens of a thousand programs at once with
# numpy from their whitespace-separated token "blobs" (tokens.blob), without a Python object
# per token (a dict lookup per token alone costs more than the whole numpy pass).

_P = 0xC6A4A7935BD1E995  # odd, so invertible mod 2**64
_P_INV = pow(_P, -1, 2 ** 64)
_WS = np.zeros(256, bool)
_WS[list(b" \t\n\r\x0b\x0c")] = True
_PUNCT = np.zeros(256, bool)
_PUNCT[list(PUNCTUATION)] = True
_powers_cache: list[np.ndarray] = [np.ones(1, np.uint64), np.ones(1, np.uint64)]


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """P**t and P**-t mod 2**64 for t < n."""
    if len(_powers_cache[0]) < n:
        size = max(n, 2 * len(_powers_cache[0]))
        for k, base in enumerate((_P, _P_INV)):
            arr = np.full(size, base, np.uint64)
            arr[0] = 1
            np.cumprod(arr, out=arr)  # wraps mod 2**64
            _powers_cache[k] = arr
    return _powers_cache[0][:n], _powers_cache[1][:n]


def _splitmix(h: np.ndarray) -> np.ndarray:
    h = h ^ (h >> np.uint64(30))
    h *= np.uint64(0xBF58476D1CE4E5B9)
    h ^= h >> np.uint64(27)
    h *= np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def blob_ids(blobs: Sequence[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (uint64) of several programs' token blobs, end to end, and the number of tokens
    of each program. Tokens are cut as tokens.split_words cuts them."""
    big = b"\n".join(blobs)
    n = len(big)
    if n == 0:
        return np.empty(0, np.uint64), np.zeros(len(blobs), np.int64)
    arr = np.frombuffer(big, np.uint8)
    punct = _PUNCT[arr]
    word = ~(_WS[arr] | punct)
    first = word.copy()  # a token starts at a word byte after a non-word byte, or at punctuation
    first[1:] &= ~word[:-1]
    first |= punct
    last = word.copy()
    last[:-1] &= ~word[1:]
    last |= punct
    starts = np.flatnonzero(first)
    ends = np.flatnonzero(last) + 1
    pw, inv = _powers(n)
    prefix = np.zeros(n + 1, np.uint64)
    np.cumsum(arr * pw, out=prefix[1:])  # arr * pw is uint64; sums wrap mod 2**64
    h = (prefix[ends] - prefix[starts]) * inv[starts]
    h += (ends - starts).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    bounds = np.zeros(len(blobs) + 1, np.int64)
    np.cumsum([len(b) + 1 for b in blobs], out=bounds[1:])
    counts = np.diff(np.searchsorted(starts, bounds))
    return _splitmix(h), counts


def program_blob(code: str | None, cfg: "SketchConfig") -> bytes:
    """One program's tokens under `cfg` (tokenizer, abstraction) as a blob."""
    if not code:
        return b""
    if cfg.abstract:
        return b" ".join(abstract_tokens(tokens(code, cfg.tokenizer), code))
    return blob(code, cfg.tokenizer)


def token_ids(toks: list[bytes]) -> np.ndarray:
    """Stable 64-bit ids of tokens (the same in every process and every run)."""
    return blob_ids([b" ".join(toks)])[0]


# Odd 64-bit multipliers: a shingle's hash is sum(id[j] * C[j]) mod 2**64, top 32 bits.
_C = np.array([0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
               0xA0761D6478BD642F, 0xE7037ED1A0B428DB, 0x8EBC6AF09C88C6E3, 0x589965CC75374CC3],
              dtype=np.uint64)


def _shingle_hashes(ids: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
                    k: int) -> tuple[np.ndarray, np.ndarray]:
    """Shingle hashes (uint32) of several programs whose ids lie end to end in `ids`, and the
    number of shingles of each. A program shorter than k tokens is one shingle of all of them."""
    total = len(ids)
    if total == 0:
        return np.empty(0, _U32), np.zeros(len(lengths), np.int64)
    padded = np.concatenate([ids, np.zeros(k - 1, np.uint64)])
    h = padded[:total] * _C[0]
    for j in range(1, k):
        h += padded[j:total + j] * _C[j % len(_C)]  # wraps: arithmetic mod 2**64
    # A shingle starting at position p of a program is valid where p + k <= the program's end.
    ends = np.repeat(starts + lengths, lengths)
    pos = np.arange(total, dtype=np.int64)
    valid = pos + k <= ends
    short = np.flatnonzero((lengths < k) & (lengths > 0))
    for i in short:  # one shingle of all the tokens of a short program
        st, n = int(starts[i]), int(lengths[i])
        h[st] = np.sum(ids[st:st + n] * _C[np.arange(n) % len(_C)], dtype=np.uint64)
        valid[st] = True
    counts = np.maximum(lengths - k + 1, 0)
    counts[short] = 1
    return (h[valid] >> np.uint64(32)).astype(_U32), counts


def minhash_matrix(shingles: np.ndarray, counts: np.ndarray, num_perm: int,
                   seed: int, perms: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Signatures (len(counts) x num_perm, uint32) of programs whose shingle hashes lie end to end
    in `shingles`; a program with no shingles gets the empty signature (all 0xFFFFFFFF)."""
    a, b = perms if perms is not None else permutations(num_perm, seed)
    out = np.full((len(counts), num_perm), np.iinfo(_U32).max, dtype=_U32)
    has = counts > 0
    if not has.any():
        return out
    offsets = np.zeros(int(has.sum()), np.int64)
    np.cumsum(counts[has][:-1], out=offsets[1:])
    hv = fmix32(shingles.astype(_U32, copy=True))
    tmp = np.empty_like(hv)
    rows = np.flatnonzero(has)
    sub = np.empty((len(rows), num_perm), dtype=_U32)
    for k in range(num_perm):
        np.multiply(hv, a[k], out=tmp)
        tmp += b[k]
        sub[:, k] = np.minimum.reduceat(tmp, offsets)
    out[rows] = sub
    return out


@dataclass
class Sketches:
    """Signatures and exact-duplicate keys of a list of programs."""

    sigs: np.ndarray        # (n, num_perm) uint32
    exact: list[bytes]      # blake2b of the token-id stream (empty program: b"")
    ntokens: np.ndarray     # tokens per program (0: empty program, no signature)


def sketch(codes: Sequence[str | None], cfg: SketchConfig,
           perms: tuple[np.ndarray, np.ndarray] | None = None, chunk: int = 1000) -> Sketches:
    """Signatures of `codes` in this process (`perms`: datasketch's permutations, when known),
    `chunk` programs at a time so that the numpy temporaries stay small."""
    parts = [_sketch(codes[i:i + chunk], cfg, perms) for i in range(0, len(codes), chunk)]
    if len(parts) == 1:
        return parts[0]
    if not parts:
        return Sketches(np.empty((0, cfg.num_perm), _U32), [], np.zeros(0, np.int64))
    return Sketches(np.concatenate([p.sigs for p in parts]), [e for p in parts for e in p.exact],
                    np.concatenate([p.ntokens for p in parts]))


def _sketch(codes: Sequence[str | None], cfg: SketchConfig,
            perms: tuple[np.ndarray, np.ndarray] | None) -> Sketches:
    ids, lengths = blob_ids([program_blob(c, cfg) for c in codes])
    starts = np.zeros(len(codes), np.int64)
    if len(codes) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    raw = ids.view(np.uint8)
    exact = [hashlib.blake2b(raw[8 * s:8 * (s + n)], digest_size=16).digest() if n else b""
             for s, n in zip(starts.tolist(), lengths.tolist())]
    sh, counts = _shingle_hashes(ids, starts, lengths, cfg.shingle)
    return Sketches(minhash_matrix(sh, counts, cfg.num_perm, cfg.seed, perms), exact, lengths)


def shingle_set(code: str | None, cfg: SketchConfig) -> np.ndarray:
    """The sorted distinct shingle hashes of one program (for exact Jaccard similarity)."""
    return shingle_sets([code], cfg)[0]


def shingle_sets(codes: Sequence[str | None], cfg: SketchConfig,
                 chunk: int = 1000) -> list[np.ndarray]:
    """`shingle_set` of many programs, hashed together (numpy's per-call cost dominates one
    program's worth of work)."""
    out: list[np.ndarray] = []
    for i in range(0, len(codes), chunk):
        part = codes[i:i + chunk]
        ids, lengths = blob_ids([program_blob(c, cfg) for c in part])
        starts = np.zeros(len(part), np.int64)
        if len(part) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        sh, counts = _shingle_hashes(ids, starts, lengths, cfg.shingle)
        bounds = np.zeros(len(part) + 1, np.int64)
        np.cumsum(counts, out=bounds[1:])
        out.extend(np.unique(sh[bounds[j]:bounds[j + 1]]) for j in range(len(part)))
    return out


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted distinct arrays."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


# --- in parallel --------------------------------------------------------------------------------

def _sketch_task(args) -> Sketches:
    codes, cfg, perms = args
    return sketch(codes, cfg, perms)


def _shingles_task(args) -> list[np.ndarray]:
    codes, cfg = args
    return shingle_sets(codes, cfg)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class Signer:
    """Signatures and shingle sets over `workers` processes, `chunk` programs a task, so that
    memory stays at a few chunks in flight. The pool starts on first need and serves every
    phase of a run; small inputs stay in this process (starting workers costs ~0.3 s).

    Not fork: the caller may hold threads (progress bars, sqlite). The forkserver imports only
    numpy and this module, once; datasketch's permutations travel with the tasks, so that the
    workers never import datasketch (and the scipy it loads, ~1.3 s)."""

    def __init__(self, workers: int | None = None, *, chunk: int = 1000,
                 min_parallel: int = 4000):
        self.workers = workers or default_workers()
        self.chunk = chunk
        self.min_parallel = min_parallel
        self._pool = None

    def __enter__(self) -> "Signer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None

    def _parallel(self, n: int) -> bool:
        return self.workers > 1 and n >= self.min_parallel

    def pool(self):
        if self._pool is None:
            methods = multiprocessing.get_all_start_methods()
            ctx = multiprocessing.get_context(
                "forkserver" if "forkserver" in methods else "spawn")
            if "forkserver" in methods:
                ctx.set_forkserver_preload([__name__])
            self._pool = ctx.Pool(self.workers)
        return self._pool

    def sketch(self, codes: Sequence[str | None], cfg: SketchConfig) -> Sketches:
        perms = permutations(cfg.num_perm, cfg.seed)
        if not self._parallel(len(codes)):
            return sketch(codes, cfg, perms)
        tasks = ((codes[i:i + self.chunk], cfg, perms)
                 for i in range(0, len(codes), self.chunk))
        parts = list(self.pool().imap(_sketch_task, tasks))
        return Sketches(np.concatenate([p.sigs for p in parts]),
                        [e for p in parts for e in p.exact],
                        np.concatenate([p.ntokens for p in parts]))

    def shingle_sets(self, codes: Sequence[str | None], cfg: SketchConfig) -> list[np.ndarray]:
        if not self._parallel(len(codes) * 4):
            return shingle_sets(codes, cfg)
        size = max(50, min(self.chunk, len(codes) // (4 * self.workers) + 1))
        tasks = ((codes[i:i + size], cfg) for i in range(0, len(codes), size))
        return [s for part in self.pool().imap(_shingles_task, tasks) for s in part]


def sketch_parallel(codes: Sequence[str | None], cfg: SketchConfig, workers: int | None = None,
                    chunk: int = 1000, min_parallel: int = 4000) -> Sketches:
    """Signatures of `codes` over `workers` processes (see Signer)."""
    with Signer(workers, chunk=chunk, min_parallel=min_parallel) as signer:
        return signer.sketch(codes, cfg)


def unique_codes(codes: Iterable[str | None]) -> tuple[list[str | None], list[int]]:
    """Distinct programs and, for each input, the index of its distinct program: rows that share
    a reference (several candidates of one problem) are tokenized once."""
    seen: dict = {}
    uniq: list[str | None] = []
    where: list[int] = []
    for c in codes:
        j = seen.get(c)
        if j is None:
            j = seen[c] = len(uniq)
            uniq.append(c)
        where.append(j)
    return uniq, where
