"""Finding candidate pairs: LSH banding over signatures, in memory or in Redis.

The banding is datasketch's MinHashLSH: `b` bands of `r` signature values, a pair is a candidate
when one band is equal in both. For the rows of one table the buckets are found with numpy (a
sort per band; MinHashLSH's dict storage costs ~40 us an insert and ~20 us a query, 6 s for
100,000 rows, which is 40% of the time budget). The persistent index that later builds
deduplicate against is a real `MinHashLSH` on datasketch's Redis storage, with the signatures
beside it so that candidates can be checked.

(b, r) come from datasketch's own optimizer with a false-negative weight of 0.95: every
candidate is checked afterwards (estimated, then exact Jaccard similarity near the threshold),
so a missed pair costs recall while an extra candidate costs microseconds.
"""

from __future__ import annotations

import json
from urllib.parse import urlparse

import numpy as np

from ..errors import BadInput
from .minhash import SketchConfig

FALSE_NEGATIVE_WEIGHT = 0.95
_M = np.uint64(0x9E3779B97F4A7C15)


def lsh_params(threshold: float, num_perm: int) -> tuple[int, int]:
    """(bands, rows per band) for `threshold`, from datasketch's optimizer, biased to recall."""
    from datasketch.lsh import _optimal_param
    return _optimal_param(threshold, num_perm, 1 - FALSE_NEGATIVE_WEIGHT, FALSE_NEGATIVE_WEIGHT)


def band_keys(sigs: np.ndarray, b: int, r: int) -> np.ndarray:
    """(n, b) uint64 bucket keys: a hash of each band's r values."""
    keys = np.zeros((len(sigs), b), np.uint64)
    wide = sigs.astype(np.uint64)
    for i in range(b):
        h = np.zeros(len(sigs), np.uint64)
        for j in range(i * r, (i + 1) * r):
            h = (h ^ wide[:, j]) * _M  # wraps mod 2**64
            h ^= h >> np.uint64(29)
        keys[:, i] = h
    return keys


def candidate_pairs(sigs: np.ndarray, b: int, r: int, *, max_bucket: int = 64) -> np.ndarray:
    """Pairs (i, j), i < j, of rows that share a bucket in some band; (m, 2) int64, unique.

    A bucket of more than `max_bucket` rows gives each row a pair with the bucket's first and
    with its predecessor instead of all pairs (union-find joins them just the same)."""
    n = len(sigs)
    if n < 2:
        return np.empty((0, 2), np.int64)
    keys = band_keys(sigs, b, r)
    found = []
    for i in range(b):
        order = np.argsort(keys[:, i], kind="stable")
        k = keys[order, i]
        same = k[1:] == k[:-1]
        if not same.any():
            continue
        # runs of equal keys: [start, end) in `order`
        edges = np.flatnonzero(np.diff(np.concatenate([[False], same, [False]]).astype(np.int8)))
        starts, ends = edges[0::2], edges[1::2] + 1
        sizes = ends - starts
        two = sizes == 2
        if two.any():
            found.append(np.stack([order[starts[two]], order[starts[two] + 1]], axis=1))
        for s, e in zip(starts[~two].tolist(), ends[~two].tolist()):
            members = np.sort(order[s:e])
            if e - s <= max_bucket:
                a, c = np.triu_indices(len(members), 1)
                found.append(np.stack([members[a], members[c]], axis=1))
            else:
                found.append(np.stack([np.full(len(members) - 1, members[0]), members[1:]], 1))
                found.append(np.stack([members[:-1], members[1:]], axis=1))
    if not found:
        return np.empty((0, 2), np.int64)
    pairs = np.concatenate(found).astype(np.int64)
    pairs.sort(axis=1)
    return np.unique(pairs, axis=0)


def cross_pairs(sigs: np.ndarray, other: np.ndarray, b: int, r: int) -> np.ndarray:
    """Pairs (i, j) of a row i of `sigs` and a row j of `other` that share a bucket."""
    if len(sigs) == 0 or len(other) == 0:
        return np.empty((0, 2), np.int64)
    mine, theirs = band_keys(sigs, b, r), band_keys(other, b, r)
    found = []
    for i in range(b):
        buckets: dict[int, list[int]] = {}
        for j, key in enumerate(theirs[:, i].tolist()):
            buckets.setdefault(key, []).append(j)
        hit = np.flatnonzero(np.isin(mine[:, i], theirs[:, i]))
        for row in hit.tolist():
            for j in buckets[int(mine[row, i])]:
                found.append((row, j))
    if not found:
        return np.empty((0, 2), np.int64)
    return np.unique(np.array(found, np.int64), axis=0)


def estimate(sigs_a: np.ndarray, sigs_b: np.ndarray, chunk: int = 65536) -> np.ndarray:
    """Estimated Jaccard similarity of row-aligned signatures: the share of equal values."""
    out = np.empty(len(sigs_a), np.float64)
    for s in range(0, len(sigs_a), chunk):
        out[s:s + chunk] = (sigs_a[s:s + chunk] == sigs_b[s:s + chunk]).mean(axis=1)
    return out


# --- the persistent index (Redis) ------------------------------------------------------------

def parse_index_url(url: str) -> dict:
    """`redis://HOST:PORT/NAME` -> host, port, name (the key prefix of this index)."""
    u = urlparse(url)
    name = u.path.strip("/")
    if u.scheme != "redis" or not u.hostname or not name:
        raise BadInput(f"not an index address: {url!r}",
                       fix="write redis://HOST:PORT/NAME, e.g. redis://localhost:6379/cuke")
    return {"host": u.hostname, "port": u.port or 6379, "name": name,
            "password": u.password}


class RedisIndex:
    """A MinHashLSH on datasketch's Redis storage, plus the signatures of its keys.

    Keys are row ids. The settings that decide signatures and buckets are stored beside the
    index; opening it with other settings is an error rather than silent garbage."""

    def __init__(self, url: str, cfg: SketchConfig, b: int, r: int):
        try:
            import redis
            from datasketch import MinHashLSH
        except ImportError as exc:  # pragma: no cover - redis is a dependency of the extra
            raise BadInput(f"the Redis index needs the redis package ({exc})",
                           fix="pip install 'curate[redis]'") from None
        where = parse_index_url(url)
        self.url, self.cfg, self.b, self.r = url, cfg, b, r
        conn = {"host": where["host"], "port": where["port"]}
        if where["password"]:
            conn["password"] = where["password"]
        self.client = redis.Redis(**conn)
        name = where["name"].encode()
        self._sigs_key = name + b"_curate_sigs"
        meta_key = name + b"_curate_meta"
        meta = {"sketch": cfg.to_json(), "bands": b, "rows": r, "scheme": "affine32"}
        try:
            have = self.client.get(meta_key)
            if have is None:
                self.client.set(meta_key, json.dumps(meta, sort_keys=True))
            elif json.loads(have) != meta:
                raise BadInput(f"the index {url} was built with other settings: {have.decode()}",
                               fix="use the same --jaccard/--on/--abstract settings, or another "
                                   "index name")
        except redis.exceptions.ConnectionError as exc:
            raise BadInput(f"cannot reach the index at {url} ({exc})",
                           fix="start redis-server there, or leave out --index") from None
        self.lsh = MinHashLSH(num_perm=cfg.num_perm, params=(b, r), prepickle=False,
                              storage_config={"type": "redis", "basename": name,
                                              "redis": conn})

    def query(self, sigs: np.ndarray, batch: int = 2000) -> list[set[str]]:
        """Keys in the index that share a bucket with each signature (one pipeline per band and
        batch rather than a round trip per band and row)."""
        out: list[set[str]] = [set() for _ in range(len(sigs))]
        for s in range(0, len(sigs), batch):
            part = sigs[s:s + batch]
            for band, (lo, hi) in enumerate(self.lsh.hashranges):
                hs = [self.lsh._H(row[lo:hi]) for row in part]
                for i, found in enumerate(self.lsh.hashtables[band].getmany(*hs)):
                    if found:
                        out[s + i].update(k.decode() for k in found)
        return out

    def signatures(self, keys: list[str]) -> dict[str, np.ndarray]:
        if not keys:
            return {}
        vals = self.client.hmget(self._sigs_key, [k.encode() for k in keys])
        return {k: np.frombuffer(v, dtype="<u4").astype(np.uint32)
                for k, v in zip(keys, vals) if v is not None}

    def insert(self, keys: list[str], sigs: np.ndarray) -> int:
        """Add keys not yet indexed; returns how many were added."""
        from datasketch import LeanMinHash
        if not keys:
            return 0
        have = self.client.hmget(self._sigs_key, [k.encode() for k in keys])
        new = [i for i, h in enumerate(have) if h is None]
        if not new:
            return 0
        with self.lsh.insertion_session(buffer_size=10000) as session:
            for i in new:
                lean = LeanMinHash(seed=self.cfg.seed, hashvalues=sigs[i], scheme="affine32")
                session.insert(keys[i].encode(), lean, check_duplication=False)
        pipe = self.client.pipeline(transaction=False)
        for i in new:
            pipe.hset(self._sigs_key, keys[i].encode(), sigs[i].astype("<u4").tobytes())
        pipe.execute()
        return len(new)

    def __len__(self) -> int:
        return int(self.client.hlen(self._sigs_key))
