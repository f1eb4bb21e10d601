"""The `dedup` pipeline step: near-duplicate clusters and decontamination (see core.py)."""

from __future__ import annotations

import logging
from typing import Any, Sequence

from ..errors import BadInput
from ..pipeline.step import Outcome, Resources, Step
from . import evalsets
from .core import ON, dedup
from .minhash import SketchConfig, default_workers

log = logging.getLogger("curate")


class Dedup(Step):
    """Drops near duplicates (one row kept per cluster) and copies of evaluation problems.

    Its answers depend on the whole table, so the runner hands it every row at once."""

    name = "dedup"
    batch_size = None

    def __init__(self, jaccard: float = 0.8, against: Sequence[str] = (), on: str = "both",
                 index: str | None = None, abstract: bool = False, num_perm: int = 128,
                 shingle: int = 5, tokenizer: str = "fast", workers: int | None = None,
                 near: bool = True):
        if not 0.0 < float(jaccard) <= 1.0:
            raise BadInput(f"jaccard must be in (0, 1], got {jaccard}", fix="e.g. --jaccard 0.8")
        if on not in ON:
            raise BadInput(f"unknown --on {on!r}", fix=f"use one of {', '.join(ON)}")
        if tokenizer not in ("fast", "tree-sitter"):
            raise BadInput(f"unknown tokenizer {tokenizer!r}", fix="use fast or tree-sitter")
        if isinstance(against, str):
            against = [against]
        self.jaccard = float(jaccard)
        self.near = bool(near)
        self.against = [str(a) for a in against or ()]
        self.on = on
        self.index_url = index
        if index:
            from .index import parse_index_url
            parse_index_url(index)  # bad addresses fail before any work
        self.sketch = SketchConfig(num_perm=int(num_perm), shingle=int(shingle),
                                   abstract=bool(abstract), tokenizer=tokenizer)
        self.workers = workers or default_workers()
        self.resources = Resources(cpus=self.workers)
        self._paths = {spec: evalsets.resolve(spec) for spec in self.against}
        self._evalsets: list[evalsets.EvalSet] = []
        self.report: dict[str, Any] = {}

    def config(self) -> dict:
        near = {} if self.near else {"near": False}  # the old key where nothing changed
        return {"jaccard": self.jaccard, "on": self.on, "index": self.index_url, **near,
                "sketch": self.sketch.to_json(),
                "against": {spec: evalsets.files_stamp(p) for spec, p in self._paths.items()}}

    def split(self) -> tuple["Dedup", "Dedup"]:
        """Two steps that stream (pipeline/plan.py): the references, decontaminated (and near
        duplicates among them dropped, unless `on: kernel`), right after the source; the
        candidates, near duplicates among them, after verify, where a cluster's representative
        is its verified, fastest row (core.rank_key)."""
        from ..pipeline.registry import make
        args = self.recipe[2] if self.recipe is not None else {
            "jaccard": self.jaccard, "against": self.against, "on": self.on}
        refs = {**args, "on": "pytorch", "index": None, "near": self.on != "kernel"}
        cands = {**args, "against": []}
        return make(Dedup, refs, name="dedup-refs"), make(Dedup, cands, decontaminates=False)

    decontaminates = True  # False: the candidates' half of a split (references done before)

    def setup(self) -> None:
        self._evalsets = [evalsets.load(spec, p) for spec, p in self._paths.items()
                          if p is not None]
        missing = [spec for spec, p in self._paths.items() if p is None]
        for spec in missing:
            hint = (" (set CURATE_KERNELBENCH to a KernelBench folder)"
                    if spec == "@kernelbench" else "")
            log.warning("!!! dedup: evaluation set %s was not found%s: NO DECONTAMINATION "
                        "against it was done; the dataset card will say so", spec, hint)
        if not self.decontaminates:
            self.report = {"decontamination": "done on the references (dedup-refs)"}
            return
        self.report = {
            "decontaminated": bool(self._evalsets),
            "decontaminated_against": {ev.spec: str(ev.path) for ev in self._evalsets},
            "evalset_problems": sum(len(ev.codes) for ev in self._evalsets),
            "evalsets_missing": missing,
        }
        if not self.against:
            self.report["note"] = "no evaluation sets named: no decontamination"

    def stats(self) -> dict:
        """What the build records about this step beyond row counts (stats.json)."""
        return dict(self.report)

    def process(self, rows: list[dict]) -> list[Outcome]:
        index = None
        if self.index_url:
            from .index import RedisIndex, lsh_params
            index = RedisIndex(self.index_url, self.sketch,
                               *lsh_params(self.jaccard, self.sketch.num_perm))
        result = dedup(rows, jaccard_threshold=self.jaccard, on=self.on, cfg=self.sketch,
                       evalsets=self._evalsets, index=index, workers=self.workers,
                       near=self.near)
        self.report.update(result.stats)
        log.info("dedup: %d rows, %d clusters, %d duplicates and %d contaminated rows dropped "
                 "(%.1fs)", len(rows), result.stats["clusters"],
                 result.stats["dropped_duplicates"], result.stats["dropped_contaminated"],
                 result.stats["seconds"])
        out = []
        for row, d in zip(rows, result.decisions):
            row["cluster_id"] = d.cluster_id
            row["dup_of"] = d.dup_of
            out.append(Outcome.keep(row) if d.keep else Outcome.drop(row, *d.reasons))
        return out
