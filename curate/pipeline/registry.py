"""Step names used in pipeline files -> the classes that implement them (imported lazily)."""

from __future__ import annotations

import importlib

from ..errors import BadInput, NotAvailable

STEPS = {
    "synth-inductor": "curate.synth.inductor:InductorSynth",
    "synth-llm": "curate.synth.llm:LLMSynth",
    "dedup": "curate.dedup.step:Dedup",
    "verify": "curate.verify.step:Verify",
    "select": "curate.select.step:Select",
    "keep": "curate.pipeline.keep:KeepVerified",
    "split-infill": "curate.infill.step:SplitInfill",
}
SOURCES = {
    "ingest": "curate.sources.ingest:IngestSource",
    "scrape": "curate.sources.scrape:ScrapeSource",
}


def load(spec: str, table: dict[str, str]):
    """`name` from the table, or `package.module:Class` for steps of your own."""
    target = table.get(spec, spec)
    if ":" not in target:
        raise BadInput(f"unknown step {spec!r}", fix=f"use one of {', '.join(table)} "
                       "or a 'package.module:Class' path")
    mod, _, attr = target.partition(":")
    try:
        module = importlib.import_module(mod)
    except ModuleNotFoundError as exc:
        if spec in table and exc.name and exc.name.startswith("curate"):
            raise NotAvailable(f"the {spec!r} stage does not exist in this version of curate "
                               "yet") from None
        raise
    try:
        return getattr(module, attr)
    except AttributeError:
        raise BadInput(f"{mod} has no {attr}", fix="check the step path") from None


def make(cls, args: dict, **attrs):
    """`cls(**args)` with `attrs` set on it, remembering how it was made (`recipe`), so that an
    executor can make the same step again in another process (a Ray actor) without pickling a
    live one."""
    obj = cls(**args)
    for k, v in attrs.items():
        setattr(obj, k, v)
    obj.recipe = (cls.__module__, cls.__qualname__, dict(args), attrs)
    return obj


def remake(recipe: tuple):
    """The step that `make` made, made again from its recipe."""
    mod, name, args, attrs = recipe
    return make(getattr(importlib.import_module(mod), name), args, **attrs)
