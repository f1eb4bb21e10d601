"""Write a table as size-bounded parquet shards named the Hub's way (train-00000-of-00004).

A folder (`<out>/data`, `<out>/infill`) always holds one consistent set of shards: writing it
removes every old shard of every split first, so a rebuild never leaves a stale validation shard
behind. An optional validation split is drawn by dedup cluster (`split_by_cluster`), so that near
duplicates never straddle train and validation.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ..record import content_hash
from ..schema import conform
from ..tableio import read_batches

DEFAULT_MAX_BYTES = 500 * 1024 * 1024
SHARD_RE = re.compile(r"^(?P<split>[a-z_]+)-(?P<i>\d{5})-of-(?P<n>\d{5})\.parquet$")


def shard_name(split: str, i: int, n: int) -> str:
    return f"{split}-{i:05d}-of-{n:05d}.parquet"


def list_shards(folder: str | Path) -> dict[str, list[Path]]:
    """split -> its shard files, in order (an absent folder has none)."""
    out: dict[str, list[Path]] = {}
    folder = Path(folder)
    if not folder.is_dir():
        return out
    for p in sorted(folder.iterdir()):
        m = SHARD_RE.match(p.name)
        if m:
            out.setdefault(m["split"], []).append(p)
    return out


def _clear(dest: Path) -> None:
    for paths in list_shards(dest).values():
        for p in paths:
            p.unlink()


def _group(batches: Iterable[list[dict]], max_bytes: int) -> Iterator[list[pa.Table]]:
    """Tables of about `max_bytes` (in-memory size) each; at least one (possibly empty) group."""
    group: list[pa.Table] = []
    size = 0
    emitted = False
    for batch in batches:
        if not batch:
            continue
        t = conform(batch)
        if size and size + t.nbytes > max_bytes:
            yield group
            emitted = True
            group, size = [], 0
        group.append(t)
        size += t.nbytes
    if group or not emitted:
        yield group or [conform([])]


def write_splits(splits: dict[str, Iterable[list[dict]]], dest_dir: str | Path, *,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> dict[str, list[Path]]:
    """Write each split's batches as shards in `dest_dir`; every shard gets one shared schema.

    Splits given no rows at all are written as nothing (except `train`, which always exists).
    """
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    staged: dict[str, list[Path]] = {}
    schemas: list[pa.Schema] = []
    for split, batches in splits.items():
        parts = []
        for g in _group(batches, max_bytes):
            table = pa.concat_tables(g, promote_options="permissive")
            if table.num_rows == 0 and split != "train":
                continue
            tmp = dest / f".{split}-{len(parts):05d}.parquet.tmp"
            pq.write_table(table, tmp, compression="zstd")
            schemas.append(table.schema)
            parts.append(tmp)
        if parts:
            staged[split] = parts
    if schemas and any(s != schemas[0] for s in schemas):
        unified = pa.unify_schemas(schemas, promote_options="permissive").with_metadata(
            schemas[0].metadata)
        for parts in staged.values():
            for tmp in parts:
                t = pq.read_table(tmp)
                for name in unified.names:
                    if name not in t.schema.names:
                        t = t.append_column(name, pa.nulls(t.num_rows, unified.field(name).type))
                pq.write_table(t.select(unified.names).cast(unified), tmp, compression="zstd")
    _clear(dest)
    out: dict[str, list[Path]] = {}
    for split, parts in staged.items():
        out[split] = []
        for i, tmp in enumerate(parts):
            final = dest / shard_name(split, i, len(parts))
            os.replace(tmp, final)
            out[split].append(final)
    return out


def write_shards(src: str | Path, dest_dir: str | Path, *, split: str = "train",
                 max_bytes: int = DEFAULT_MAX_BYTES, rows: list[dict] | None = None) -> list[Path]:
    """Split `src` (or `rows`) into shards of about `max_bytes` (in-memory size) each.

    Every old shard in the folder (of any split) is removed, so it always holds one consistent set.
    """
    batches = [rows] if rows is not None else read_batches(src)
    return write_splits({split: batches}, dest_dir, max_bytes=max_bytes)[split]


# -- validation split by cluster ----------------------------------------------------------

def split_key(row: dict) -> str:
    """The unit that must not straddle splits: the dedup cluster, else the pair itself."""
    return row.get("cluster_id") or row.get("dup_of") or content_hash(
        row.get("pytorch_code"), row.get("kernel_code"))


def _rank(key: str, seed: str) -> str:
    return hashlib.sha256(f"{seed}\0{key}".encode()).hexdigest()


def split_by_cluster(keys: Iterable[str], fraction: float, *, seed: str = "curate") -> set[str]:
    """The cluster keys that go to validation: about `fraction` of the rows, whole clusters only.

    Clusters are taken in the order of a hash of their key (so the choice is the same on every
    machine and a cluster keeps its split as the dataset grows), skipping any that would overshoot.
    Train always keeps at least one cluster.
    """
    if not 0 <= fraction < 1:
        raise ValueError("the validation fraction must be in [0, 1)")
    counts = Counter(keys)
    total = sum(counts.values())
    if fraction == 0 or len(counts) < 2:
        return set()
    target = fraction * total
    chosen: set[str] = set()
    n = 0
    for key in sorted(counts, key=lambda k: _rank(k, seed)):
        if len(chosen) == len(counts) - 1:
            break
        c = counts[key]
        if n + c <= target or (not chosen and c < total):
            chosen.add(key)
            n += c
        if n >= target:
            break
    return chosen


def resplit_folder(folder: str | Path, fraction: float, *, seed: str = "curate",
                   chosen: set[str] | None = None,
                   max_bytes: int = DEFAULT_MAX_BYTES) -> tuple[dict[str, list[Path]], set[str]]:
    """Rewrite a folder's shards (all splits) as train + validation drawn by cluster.

    Returns the shards and the keys that went to validation (cluster keys and pair hashes).
    Pass those keys as `chosen` when splitting another folder (infill/ after data/) so that the
    rows of one pair or cluster land in the same split in both configs.
    """
    folder = Path(folder)
    old = [p for paths in list_shards(folder).values() for p in paths]
    if not old:
        return {}, set()
    if chosen is None:
        keys = [split_key(r) for p in old for b in read_batches(p) for r in b]
        chosen = split_by_cluster(keys, fraction, seed=seed)
    val_keys = set(chosen)

    def in_val(r: dict) -> bool:
        return split_key(r) in chosen or content_hash(r.get("pytorch_code"),
                                                      r.get("kernel_code")) in chosen

    tmp_dir = folder / ".resplit"
    tmp_dir.mkdir(exist_ok=True)
    moved = []
    for p in old:
        os.replace(p, tmp_dir / p.name)
        moved.append(tmp_dir / p.name)

    def batches(want_val: bool) -> Iterator[list[dict]]:
        for p in moved:
            for b in read_batches(p):
                sel = [r for r in b if in_val(r) == want_val]
                if want_val:
                    val_keys.update(content_hash(r.get("pytorch_code"), r.get("kernel_code"))
                                    for r in sel)
                if sel:
                    yield sel

    ok = False
    try:
        out = write_splits({"train": batches(False), "validation": batches(True)}, folder,
                           max_bytes=max_bytes)
        ok = True
    finally:
        for q in moved:
            if ok:
                q.unlink()
            else:  # put the old shards back
                os.replace(q, folder / q.name)
        tmp_dir.rmdir()
    return out, val_keys
