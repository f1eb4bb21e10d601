"""Deduplication and decontamination of a table of pairs (the library behind `curate dedup`).

1. Every distinct program is tokenized and signed once (minhash.py), over CPU cores.
2. Decontamination: a row whose reference (`pytorch_code`) is an exact or near duplicate of an
   evaluation problem is dropped with `contaminated:<problem>` (the most similar problem). The
   comparison abstracts the program's own names (tokens.abstract_tokens) whatever `cfg` says:
   a renamed copy of a problem is still a copy of it.
3. Exact duplicates (equal token streams) and near duplicates (candidate pairs from LSH banding,
   checked by estimated Jaccard similarity, and by exact Jaccard similarity of the shingle sets
   where the estimate is within `exact_band` of the threshold) are joined by union-find.
4. With a persistent index, a cluster that meets a row indexed by an earlier run is represented
   by that row: all its members here are dropped (`duplicate:indexed`). A row whose own id is in
   the index is the same row indexed before (a rebuild), not a duplicate of it.
5. Each cluster keeps one representative: the verified row with the highest speedup where rows
   have been verified, else the first row in table order. The others are dropped with
   `duplicate:exact` or `duplicate:near`, `dup_of` = the representative's id and
   `cluster_id` = the representative's id (which every member of the cluster carries).
6. Kept rows are added to the persistent index.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..record import content_hash
from .evalsets import EvalSet
from .index import RedisIndex, candidate_pairs, cross_pairs, estimate, lsh_params
from .minhash import Signer, SketchConfig, jaccard, unique_codes

log = logging.getLogger("curate")

ON = ("pytorch", "kernel", "both")


@dataclass
class Decision:
    keep: bool
    reasons: list[str] = field(default_factory=list)
    cluster_id: str | None = None
    dup_of: str | None = None


@dataclass
class DedupResult:
    decisions: list[Decision]
    stats: dict


class UnionFind:
    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        p = self.parent
        root = x
        while p[root] != root:
            root = p[root]
        while p[x] != root:
            p[x], x = root, p[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            if ra < rb:
                self.parent[rb] = ra
            else:
                self.parent[ra] = rb


def rank_key(row: dict, position: int) -> tuple:
    """Smaller is better: verified first, then the highest speedup, then table order."""
    verified = row.get("status") == "verified"
    speed = row.get("speedup")
    return (not verified, -(speed if verified and speed is not None else float("-inf")),
            position)


class _Programs:
    """Signatures, exact keys and (on demand) shingle sets of the programs of a table."""

    def __init__(self, codes: list[str | None], cfg: SketchConfig, signer: Signer):
        self.cfg = cfg
        self.signer = signer
        self.uniq, self.where = unique_codes(codes)
        sk = signer.sketch(self.uniq, cfg)
        self.sigs, self.exact, self.ntokens = sk.sigs, sk.exact, sk.ntokens
        self._shingles: dict[int, np.ndarray] = {}

    def load_shingles(self, us) -> None:
        """Compute the shingle sets of these distinct programs (over the workers)."""
        todo = sorted({int(u) for u in us} - self._shingles.keys())
        for u, s in zip(todo, self.signer.shingle_sets([self.uniq[u] for u in todo], self.cfg)):
            self._shingles[u] = s

    def shingles(self, u: int) -> np.ndarray:
        if u not in self._shingles:
            self.load_shingles([u])
        return self._shingles[u]


def dedup(rows: list[dict], *, jaccard_threshold: float = 0.8, on: str = "both",
          cfg: SketchConfig = SketchConfig(), evalsets: list[EvalSet] = (),
          index: RedisIndex | None = None, workers: int | None = None,
          exact_band: float = 0.1, near: bool = True) -> DedupResult:
    """Decide keep/drop for every row (see the module docstring). `near=False`: decontaminate
    only (steps 1-2), every other row kept as a cluster of its own."""
    if on not in ON:
        raise ValueError(f"on must be one of {ON}, got {on!r}")
    with Signer(workers) as signer:
        return _dedup(rows, jaccard_threshold, on, cfg, evalsets, index, signer, exact_band,
                      near)


def _dedup(rows, jaccard_threshold, on, cfg, evalsets, index, signer, exact_band, near=True):
    t0 = time.monotonic()
    n = len(rows)
    ids = [row.get("id") or content_hash(row.get("pytorch_code"), row.get("kernel_code"))
           for row in rows]
    b, r = lsh_params(jaccard_threshold, cfg.num_perm)
    stats: dict = {"rows": n, "jaccard": jaccard_threshold, "on": on, "bands": b,
                   "rows_per_band": r, **{f"sketch_{k}": v for k, v in cfg.to_json().items()}}
    decisions = [Decision(keep=True) for _ in range(n)]

    # 1. sign every distinct program once
    py_codes = [row.get("pytorch_code") for row in rows]
    k_codes = [row.get("kernel_code") for row in rows] if on != "pytorch" else []
    progs = _Programs(py_codes + k_codes, cfg, signer)
    py_u = np.array(progs.where[:n], np.int64)
    k_u = np.array(progs.where[n:], np.int64) if k_codes else None
    stats["programs_signed"] = len(progs.uniq)
    stats["seconds_signing"] = round(time.monotonic() - t0, 3)

    # 2. decontamination against the evaluation sets (on the reference program, with the
    #    program's own names abstracted so that renamed copies of a problem are caught)
    contaminated: dict[int, str] = {}
    if any(ev.found for ev in evalsets):
        dcfg = replace(cfg, abstract=True)
        dprogs = progs if cfg.abstract else _Programs(py_codes, dcfg, signer)
        dpy_u = py_u if cfg.abstract else np.array(dprogs.where, np.int64)
        contaminated = _decontaminate(dprogs, dpy_u, evalsets, jaccard_threshold, dcfg, b, r,
                                      exact_band, stats)
    else:
        stats["evalset_problems"] = 0
    for i, label in contaminated.items():
        decisions[i] = Decision(keep=False, reasons=[f"contaminated:{label}"])
    if not near:
        return _contamination_only(decisions, ids, contaminated, stats, t0)

    # 3. row signatures and exact keys for the chosen column(s)
    has_k = np.array([bool(c) for c in k_codes]) if k_codes else None
    if on == "pytorch":
        sigs = progs.sigs[py_u]
        exact = [progs.exact[u] for u in py_u.tolist()]
    elif on == "kernel":
        sigs = progs.sigs[k_u]
        exact = [progs.exact[u] for u in k_u.tolist()]
    else:
        sigs = progs.sigs[py_u].copy()
        sigs[has_k] = np.minimum(sigs[has_k], progs.sigs[k_u[has_k]])
        exact = [progs.exact[p] + progs.exact[k] for p, k in zip(py_u.tolist(), k_u.tolist())]
    active = [i for i in range(n) if exact[i] and i not in contaminated]

    uf = UnionFind(n)
    first: dict[bytes, int] = {}
    distinct: list[int] = []  # first row of each exact group
    for i in active:
        j = first.setdefault(exact[i], i)
        if j == i:
            distinct.append(i)
        else:
            uf.union(j, i)
    stats["exact_duplicates"] = len(active) - len(distinct)

    # 4. near duplicates among the distinct rows
    dist = np.array(distinct, np.int64)
    pairs = candidate_pairs(sigs[dist], b, r) if len(dist) > 1 else np.empty((0, 2), np.int64)
    est = estimate(sigs[dist[pairs[:, 0]]], sigs[dist[pairs[:, 1]]]) if len(pairs) else \
        np.empty(0)
    sure = est >= jaccard_threshold + exact_band
    unsure = np.flatnonzero((est >= jaccard_threshold - exact_band) & ~sure)
    for a, c in pairs[sure].tolist():
        uf.union(int(dist[a]), int(dist[c]))
    confirmed = 0
    need = [int(dist[x]) for x in np.unique(pairs[unsure])] if len(unsure) else []
    progs.load_shingles([py_u[i] for i in need] if on != "kernel" else [])
    if on != "pytorch":
        progs.load_shingles([k_u[i] for i in need if has_k[i]])
    for p in unsure.tolist():
        a, c = int(dist[pairs[p, 0]]), int(dist[pairs[p, 1]])
        if _exact_similarity(progs, a, c, on, py_u, k_u, has_k) >= jaccard_threshold:
            uf.union(a, c)
            confirmed += 1
    stats.update(candidate_pairs=int(len(pairs)), near_pairs=int(sure.sum()) + confirmed,
                 checked_exactly=int(len(unsure)))

    # 5. the persistent index: rows indexed by earlier runs
    prior: dict[int, str] = {}  # root -> indexed key
    if index is not None:
        prior = _query_index(index, sigs, dist, ids, uf, jaccard_threshold, stats)

    # 6. representatives
    members: dict[int, list[int]] = {}
    for i in active:
        members.setdefault(uf.find(i), []).append(i)
    clusters = 0
    for root, group in members.items():
        if root in prior:
            key = prior[root]
            for i in group:
                decisions[i] = Decision(False, ["duplicate:indexed"], cluster_id=key, dup_of=key)
            continue
        rep = min(group, key=lambda i: rank_key(rows[i], i))
        rep_id = ids[rep]
        if len(group) > 1:
            clusters += 1
        for i in group:
            if i == rep:
                decisions[i] = Decision(True, cluster_id=rep_id)
            else:
                kind = "exact" if exact[i] == exact[rep] else "near"
                decisions[i] = Decision(False, [f"duplicate:{kind}"], cluster_id=rep_id,
                                        dup_of=rep_id)
    for i in range(n):  # rows with nothing to compare (no code in the chosen column)
        if decisions[i].keep and decisions[i].cluster_id is None:
            decisions[i].cluster_id = ids[i]
    stats["clusters"] = clusters
    stats["dropped_duplicates"] = sum(1 for d in decisions if d.dup_of)
    stats["dropped_contaminated"] = len(contaminated)

    # 7. index what is kept
    if index is not None:
        kept = [i for i in active if decisions[i].keep]
        stats["index_added"] = index.insert([ids[i] for i in kept], sigs[kept])
        stats["index_size"] = len(index)
    stats["seconds"] = round(time.monotonic() - t0, 3)
    return DedupResult(decisions, stats)


def _contamination_only(decisions: list[Decision], ids: list[str], contaminated: dict,
                        stats: dict, t0: float) -> DedupResult:
    for i, d in enumerate(decisions):
        if d.keep:
            d.cluster_id = ids[i]
    stats.update(clusters=0, dropped_duplicates=0, dropped_contaminated=len(contaminated),
                 seconds=round(time.monotonic() - t0, 3))
    return DedupResult(decisions, stats)


def _exact_similarity(progs: _Programs, a: int, c: int, on: str, py_u, k_u, has_k) -> float:
    def shingles(i: int) -> np.ndarray:
        if on == "pytorch":
            return progs.shingles(int(py_u[i]))
        if on == "kernel":
            return progs.shingles(int(k_u[i]))
        s = progs.shingles(int(py_u[i]))
        return np.union1d(s, progs.shingles(int(k_u[i]))) if has_k[i] else s
    return jaccard(shingles(a), shingles(c))


def _decontaminate(progs: _Programs, py_u: np.ndarray, evalsets, threshold: float,
                   cfg: SketchConfig, b: int, r: int, exact_band: float,
                   stats: dict) -> dict[int, str]:
    """Rows whose reference is an exact or near duplicate of an evaluation problem -> label."""
    labels = [lab for ev in evalsets if ev.found for lab in ev.labels]
    codes = [c for ev in evalsets if ev.found for c in ev.codes]
    stats["evalset_problems"] = len(labels)
    if not codes:
        return {}
    ev = _Programs(codes, cfg, Signer(1))
    ev_sigs = ev.sigs[ev.where]
    ev_exact = {}
    for j, u in enumerate(ev.where):
        if ev.exact[u]:
            ev_exact.setdefault(ev.exact[u], j)
    # distinct reference programs of the table
    uniq = np.unique(py_u)
    best: dict[int, tuple[float, int]] = {}  # distinct program -> (similarity, problem)
    for u in uniq.tolist():
        j = ev_exact.get(progs.exact[u]) if progs.exact[u] else None
        if j is not None:
            best[u] = (1.0, j)
    has = np.array([progs.ntokens[u] > 0 for u in uniq.tolist()], bool)
    cand_u = uniq[has]
    pairs = cross_pairs(progs.sigs[cand_u], ev_sigs, b, r)
    if len(pairs):
        est = estimate(progs.sigs[cand_u[pairs[:, 0]]], ev_sigs[pairs[:, 1]])
        for (a, j), e in zip(pairs.tolist(), est.tolist()):
            u = int(cand_u[a])
            if e < threshold - exact_band:
                continue
            if e < threshold + exact_band:
                e = jaccard(progs.shingles(u), ev.shingles(ev.where[j]))
                if e < threshold:
                    continue
            if e > best.get(u, (-1.0, -1))[0]:
                best[u] = (e, j)
    hits = {u: labels[j] for u, (e, j) in best.items()}
    out = {i: hits[u] for i, u in enumerate(py_u.tolist()) if u in hits}
    stats["evalset_problems_hit"] = len({j for _, j in best.values()})
    return out


def _query_index(index: RedisIndex, sigs: np.ndarray, dist: np.ndarray, row_ids: list[str],
                 uf: UnionFind, threshold: float, stats: dict) -> dict[int, str]:
    """Roots of clusters that meet a row indexed before -> the indexed key (most similar)."""
    ids = set(row_ids)
    found = index.query(sigs[dist])
    keys = sorted({k for ks in found for k in ks if k not in ids})
    theirs = index.signatures(keys)
    prior: dict[int, tuple[float, str]] = {}
    for pos, ks in enumerate(found):
        i = int(dist[pos])
        for k in ks:
            if k in ids or k not in theirs:
                continue
            e = float((sigs[i] == theirs[k]).mean())
            if e >= threshold:
                root = uf.find(i)
                if e > prior.get(root, (-1.0, ""))[0]:
                    prior[root] = (e, k)
    stats["index_matches"] = len(prior)
    return {root: k for root, (e, k) in prior.items()}
