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
from typing import Iterable, Iterator, Sequence

import numpy as np

from .tokens import abstract_tokens, tokens

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

_VOCAB_MAX = 2_000_000
_vocab: dict[bytes, int] = {}


def _token_id(tok: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(tok, digest_size=8).digest(), "little")


def token_ids(toks: list[bytes]) -> list[int]:
    """Stable 64-bit ids of tokens (the same in every process and every run), cached."""
    ids = list(map(_vocab.get, toks))
    if None in ids:
        if len(_vocab) > _VOCAB_MAX:
            _vocab.clear()
        for i, t in enumerate(toks):
            if ids[i] is None:
                ids[i] = _vocab[t] = _token_id(t)
    return ids


def program_ids(code: str | None, cfg: "SketchConfig") -> list[int]:
    """Token ids of one program under `cfg` (tokenizer, abstraction)."""
    if not code:
        return []
    toks = tokens(code, cfg.tokenizer)
    return token_ids(abstract_tokens(toks, code) if cfg.abstract else toks)


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
           perms: tuple[np.ndarray, np.ndarray] | None = None) -> Sketches:
    """Signatures of `codes` in this process (`perms`: datasketch's permutations, when known)."""
    all_ids: list[int] = []
    lengths = np.zeros(len(codes), np.int64)
    for i, code in enumerate(codes):
        ids = program_ids(code, cfg)
        lengths[i] = len(ids)
        all_ids.extend(ids)
    ids_arr = np.array(all_ids, dtype=np.uint64)
    starts = np.zeros(len(codes), np.int64)
    if len(codes) > 1:
        np.cumsum(lengths[:-1], out=starts[1:])
    raw = ids_arr.view(np.uint8)
    exact = [hashlib.blake2b(raw[8 * s:8 * (s + n)], digest_size=16).digest() if n else b""
             for s, n in zip(starts.tolist(), lengths.tolist())]
    sh, counts = _shingle_hashes(ids_arr, starts, lengths, cfg.shingle)
    return Sketches(minhash_matrix(sh, counts, cfg.num_perm, cfg.seed, perms), exact, lengths)


def shingle_set(code: str | None, cfg: SketchConfig) -> np.ndarray:
    """The sorted distinct shingle hashes of one program (for exact Jaccard similarity)."""
    ids = program_ids(code, cfg)
    arr = np.array(ids, dtype=np.uint64)
    sh, _ = _shingle_hashes(arr, np.zeros(1, np.int64), np.array([len(ids)]), cfg.shingle)
    return np.unique(sh)


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard similarity of two sorted distinct arrays."""
    if len(a) == 0 and len(b) == 0:
        return 1.0
    inter = len(np.intersect1d(a, b, assume_unique=True))
    return inter / (len(a) + len(b) - inter)


# --- in parallel --------------------------------------------------------------------------------

def _work(args) -> Sketches:
    codes, cfg, perms = args
    return sketch(codes, cfg, perms)


def default_workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def sketch_parallel(codes: Sequence[str | None], cfg: SketchConfig, workers: int | None = None,
                    chunk: int = 1000, min_parallel: int = 4000) -> Sketches:
    """Signatures of `codes` over `workers` processes, `chunk` programs a task: memory stays at a
    few chunks in flight. Small inputs stay in this process (starting workers costs ~0.3 s)."""
    workers = workers or default_workers()
    if workers <= 1 or len(codes) < min_parallel:
        return sketch(codes, cfg)
    parts = _map_chunks(codes, cfg, workers, chunk)
    return Sketches(np.concatenate([p.sigs for p in parts]) if parts else
                    np.empty((0, cfg.num_perm), _U32),
                    [e for p in parts for e in p.exact],
                    np.concatenate([p.ntokens for p in parts]) if parts else np.zeros(0, np.int64))


def _map_chunks(codes: Sequence[str | None], cfg: SketchConfig, workers: int,
                chunk: int) -> list[Sketches]:
    # Not fork: the caller may hold threads (progress bars, sqlite). The forkserver imports only
    # numpy and this module, once; the permutations travel with the tasks, so that the workers
    # never import datasketch (and the scipy it loads, ~1.3 s).
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        ctx.set_forkserver_preload([__name__])
    perms = permutations(cfg.num_perm, cfg.seed)
    tasks = ((codes[i:i + chunk], cfg, perms) for i in range(0, len(codes), chunk))
    with ctx.Pool(workers) as pool:
        return list(pool.imap(_work, tasks))


def iter_chunks(items: Sequence, size: int) -> Iterator[Sequence]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


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
