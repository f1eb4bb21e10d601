"""Write a table as size-bounded parquet shards named the Hub's way (train-00000-of-00004)."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ..schema import conform
from ..tableio import read_batches

DEFAULT_MAX_BYTES = 500 * 1024 * 1024


def shard_name(split: str, i: int, n: int) -> str:
    return f"{split}-{i:05d}-of-{n:05d}.parquet"


def write_shards(src: str | Path, dest_dir: str | Path, *, split: str = "train",
                 max_bytes: int = DEFAULT_MAX_BYTES, rows: list[dict] | None = None) -> list[Path]:
    """Split `src` (or `rows`) into shards of about `max_bytes` (in-memory size) each.

    Old shards of the same split are removed first, so the folder always holds one consistent set.
    """
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob(f"{split}-*-of-*.parquet"):
        old.unlink()
    groups: list[list[pa.Table]] = [[]]
    size = 0
    batches = [rows] if rows is not None else read_batches(src)
    for batch in batches:
        if not batch:
            continue
        t = conform(batch)
        if size and size + t.nbytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += t.nbytes
    groups = [g for g in groups if g] or [[conform([])]]
    paths = []
    for i, g in enumerate(groups):
        path = dest / shard_name(split, i, len(groups))
        table = pa.concat_tables(g, promote_options="permissive")
        tmp = path.with_name("." + path.name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, path)
        paths.append(path)
    return paths
