"""Pipeline files (pipelines/*.yaml): a source, a list of steps, and build-wide settings.

    name: default
    device: auto            # cuda where a GPU is visible, else cpu
    threshold: 2.0
    out: build
    source: {ingest: {paths: ["@examples"]}}
    steps:
      - synth-inductor: {}
      - dedup: {jaccard: 0.8, against: ["@kernelbench"]}
      - verify: {timeout: 120}
      - keep: {}            # threshold comes from the top level

CLI flags override the top-level settings. `device` and `threshold` are handed to every step
whose constructor takes them, unless the step sets its own.
"""

from __future__ import annotations

import copy
import inspect
import math
from pathlib import Path

import yaml

from ..datadirs import data_dir
from ..errors import BadInput
from . import registry

DEFAULT_PIPELINE = "default.yaml"
GLOBAL_KEYS = ("device", "threshold")
DEVICES = ("cuda", "cpu")

# Settings that several steps share, and the values that make sense for them: checked before any
# work, so that `threshold: -1` fails at once and not when the card is plotted.
# name -> (lowest, lowest allowed itself, highest); None: no bound.
RANGES = {
    "threshold": (0, True, None),
    "jaccard": (0, False, 1),
    "workers": (1, True, None),
    "timeout": (0, False, None),
    "trials": (1, True, None),
    "samples": (1, True, None),
    "turns": (1, True, None),
}
INTEGERS = ("workers", "trials", "samples", "turns")


def load_pipeline(path: str | Path | None = None, **overrides) -> dict:
    """The pipeline as a plain dict with overrides applied (what pipeline.yaml records)."""
    p = Path(path) if path else data_dir("pipelines") / DEFAULT_PIPELINE
    if not p.is_file():
        raise BadInput("no such pipeline file", path=str(p), fix="check --pipeline")
    try:
        spec = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise BadInput(f"not valid YAML ({exc})", path=str(p), fix="fix the YAML syntax") from None
    if not isinstance(spec, dict) or "source" not in spec or "steps" not in spec:
        raise BadInput("a pipeline needs 'source' and 'steps'", path=str(p),
                       fix="see pipelines/default.yaml for the layout")
    spec = copy.deepcopy(spec)
    for k, v in overrides.items():
        if v is not None:
            spec[k] = v
    spec.setdefault("device", "auto")
    spec["_file"] = str(p)
    if spec["device"] not in (*DEVICES, "auto"):
        raise BadInput(f"device {spec['device']!r} is not one of auto, {', '.join(DEVICES)}",
                       path=str(p), fix="set device: cuda, cpu or auto")
    if spec.get("threshold") is not None:
        check_setting("threshold", spec["threshold"], "the pipeline", str(p))
    if spec["device"] == "auto":
        spec["device"] = detect_device()
    return spec


def check_setting(name: str, value, where: str, path: str | None = None) -> None:
    """BadInput unless `value` is a finite number in the range that RANGES gives `name`."""
    if name not in RANGES or value is None:
        return
    low, low_ok, high = RANGES[name]
    is_number = isinstance(value, int if name in INTEGERS else (int, float)) \
        and not isinstance(value, bool)
    if not is_number or not math.isfinite(value) or value < low or (value == low and not low_ok) \
            or (high is not None and value > high):
        kind = "a whole number" if name in INTEGERS else "a number"
        span = f"{'>=' if low_ok else '>'} {low}" + (f" and <= {high}" if high is not None else "")
        raise BadInput(f"{where}: {name} = {value!r} is out of range ({kind} {span})",
                       path=path, fix=f"set {name} to {kind} {span}")


def detect_device() -> str:
    try:
        import torch
        return "cuda" if torch.cuda.is_available() else "cpu"
    except Exception:
        return "cpu"


def _one(entry, where: str) -> tuple[str, dict]:
    if isinstance(entry, str):
        return entry, {}
    if isinstance(entry, dict) and len(entry) == 1:
        name, args = next(iter(entry.items()))
        return name, dict(args or {})
    raise BadInput(f"each {where} entry is a name or a one-key mapping, got {entry!r}",
                   fix="write e.g. '- dedup: {jaccard: 0.8}'")


def instantiate(cls, args: dict, spec: dict, name: str):
    params = inspect.signature(cls.__init__).parameters
    for k in GLOBAL_KEYS:
        if k in params and k not in args and k in spec:
            args[k] = spec[k]
    unknown = [k for k in args if k not in params and not any(
        p.kind == p.VAR_KEYWORD for p in params.values())]
    if unknown:
        raise BadInput(f"step {name!r} has no setting {', '.join(unknown)}",
                       path=spec.get("_file"), fix=f"settings of {name}: "
                       + ", ".join(k for k in params if k != "self"))
    for k, v in args.items():
        check_setting(k, v, f"step {name!r}", spec.get("_file"))
    return registry.make(cls, args)


def build_source(spec: dict):
    name, args = _one(spec["source"], "source")
    return instantiate(registry.load(name, registry.SOURCES), args, spec, name)


def build_steps(spec: dict) -> list:
    steps = []
    for entry in spec["steps"] or []:
        name, args = _one(entry, "step")
        steps.append(instantiate(registry.load(name, registry.STEPS), args, spec, name))
    return steps


def dump(spec: dict) -> str:
    return yaml.safe_dump({k: v for k, v in spec.items() if not k.startswith("_")},
                          sort_keys=False)
