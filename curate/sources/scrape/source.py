"""The `scrape` source: repositories -> nn.Module classes -> runnable KernelBench programs.

Per repository: check it out (or read the folder), find its nn.Module classes, build each one's
closure (parent side, parse only), then deduce arguments and run the keep-gates in sandboxed
workers (deduce.py). Every class answers with a row: kept with its program, or dropped with a
`scrape:<reason>` and the last error. Answers go to the runner's ledger as they finish, keyed
by the closure and the settings, so a run cut short resumes where it stopped.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Iterable, Iterator

from ...errors import BadInput
from ...pipeline.step import Outcome, Source
from ...record import content_hash, new_record
from .deduce import Deducer, DeduceSettings, Job, Verdict
from .emit import header
from .license import detect_license
from .repos import Checkout, RepoSpec, materialize, parse_list

log = logging.getLogger("curate")

MAX_CLOSURE_BYTES = 256 * 1024
BATCH = 16


def named_folder(name: str) -> Path:
    """`@torch-nn`: torch's own nn.Module sources, wherever torch is installed."""
    if name == "torch-nn":
        import torch
        return Path(torch.__file__).resolve().parent / "nn" / "modules"
    raise BadInput(f"unknown named path @{name}", fix="use @torch-nn or a path")


def resolve_location(loc: str) -> str:
    return str(named_folder(loc[1:])) if loc.startswith("@") else loc


class ScrapeSource(Source):
    name = "scrape"

    def __init__(self, paths: Iterable[str] = (), from_list: str | None = None,
                 jobs: int | None = None, limit: int | None = None, timeout: float = 60.0,
                 graph_breaks: bool = False, sandbox: str = "auto",
                 cache_dir: str | None = None, sample: int | None = None):
        self.specs = [RepoSpec(resolve_location(str(p))) for p in paths]
        if from_list:
            self.specs += [RepoSpec(resolve_location(s.location), s.commit, s.stars)
                           for s in parse_list(from_list)]
        if not self.specs:
            raise BadInput("nothing to scrape", fix="name a folder or git URL, or --from-list")
        for s in self.specs:
            if "://" not in s.location and not s.location.startswith("git@") \
                    and not Path(s.location).expanduser().exists():
                raise BadInput("no such file or folder", path=s.location,
                               fix="name an existing folder, a .py file or a git URL")
        if limit is not None and limit < 1:
            raise BadInput(f"limit {limit} is below 1", fix="give --limit 1 or more")
        self.limit = limit
        self.sample = sample  # a seeded random sample of each repository's classes instead
        self.settings = DeduceSettings(timeout=float(timeout), graph_breaks=graph_breaks)
        self.jobs, self.sandbox = jobs, sandbox
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        self.cache_dir = Path(cache_dir or os.path.join(base, "curate", "scrape-clones"))
        self.ledger = None
        self.report: dict = {}

    def config(self) -> dict:
        return {"repos": [[s.location if "://" in s.location else str(Path(s.location).resolve()),
                           s.commit, s.stars] for s in self.specs],
                "limit": self.limit, "sample": self.sample, "settings": self.settings.__dict__}

    def attach_ledger(self, ledger) -> None:
        """The runner's ledger: finished classes are recorded there and read back on resume."""
        self.ledger = ledger

    def _step(self) -> str:
        from ...pipeline.runner import cache_key
        return f"scrape@{cache_key(self.settings.__dict__)}"

    def read(self) -> Iterable[list[Outcome]]:
        deducer = Deducer(self.settings, self.jobs, self.sandbox)
        try:
            for spec in self.specs:
                yield from self._repo(spec, deducer)
        finally:
            deducer.close()

    def _repo(self, spec: RepoSpec, deducer: Deducer) -> Iterator[list[Outcome]]:
        from .closure import build_closure
        from .modules import Repository, find_module_classes
        try:
            co = materialize(spec, self.cache_dir)
        except RuntimeError as exc:
            row = new_record(source="scrape", repo=spec.location, commit=spec.commit,
                             stars=spec.stars, error=str(exc)[-2000:])
            yield [Outcome.drop(row, "scrape:clone_failed")]
            return
        repo = Repository.scan(co.root)
        lic, lic_why = detect_license(co.root)
        refs = find_module_classes(repo)
        self.report[co.url or str(co.root)] = {"files": repo.files_scanned, "classes": len(refs)}
        log.info("scrape: %s: %d files, %d nn.Module classes", co.url or co.root,
                 repo.files_scanned, len(refs))
        if self.sample and self.sample < len(refs):
            import random
            refs = sorted(random.Random(0).sample(refs, self.sample),
                          key=lambda r: (r.module, r.name))
        if self.limit:
            refs = refs[:self.limit]
        for i in range(0, len(refs), BATCH):
            rows, jobs, out = [], [], []
            for ref in refs[i:i + BATCH]:
                row, job, early = self._prepare(repo, co, ref, lic, lic_why, build_closure)
                if early is not None:
                    out.append(early)
                else:
                    rows.append(row)
                    jobs.append(job)
            out += self._deduce(rows, jobs, deducer)
            if out:
                yield out

    def _prepare(self, repo, co: Checkout, ref, lic, lic_why, build_closure):
        """(row, job, None) to deduce, or (None, None, Outcome) decided without running."""
        mod = repo.modules[ref.module]
        try:
            rel = mod.path.resolve().relative_to(co.base.resolve()).as_posix()
        except ValueError:
            rel = mod.path.name
        row = new_record(source="scrape", entry_point=ref.name, repo=co.url or str(co.root),
                         path=rel, commit=co.commit, license=lic, stars=co.spec.stars)
        if lic_why:
            row["reasons"] = [lic_why]
        try:
            cl = build_closure(repo, ref)
        except (RecursionError, KeyError, StopIteration, ValueError) as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
            return None, None, Outcome.drop(row, "scrape:closure_error")
        row["pytorch_code"] = cl.source
        row["id"] = content_hash(cl.source, ref.name)
        if len(cl.source) > MAX_CLOSURE_BYTES:
            row["error"] = f"closure of {len(cl.source)} bytes"
            return None, None, Outcome.drop(row, "scrape:too_large")
        head = header(row["repo"], rel, co.commit, ref.name)
        return row, Job(cl.source, cl.class_name, head, cl.missing), None

    def _deduce(self, rows: list[dict], jobs: list[Job], deducer: Deducer) -> list[Outcome]:
        step = self._step()
        keys = [content_hash(j.closure, j.class_name) for j in jobs]
        cached = self.ledger.lookup(step, keys) if self.ledger is not None else {}
        out = [cached[k] for k in keys if k in cached]
        todo = [i for i, k in enumerate(keys) if k not in cached]
        for j, verdict in deducer.run([jobs[i] for i in todo]):
            i = todo[j]
            outcome = self._outcome(rows[i], verdict, deducer.sandbox)
            if self.ledger is not None:
                self.ledger.record(step, keys[i], outcome, verdict.seconds)
            out.append(outcome)
        return out

    @staticmethod
    def _outcome(row: dict, v: Verdict, sandbox: str) -> Outcome:
        row = dict(row, sandbox=sandbox)
        if v.program is None:
            row["error"] = (v.error or "")[-2000:] or None
            return Outcome.drop(row, f"scrape:{v.reason}")
        row["pytorch_code"] = v.program
        row["id"] = content_hash(v.program)
        return Outcome.keep(row)
