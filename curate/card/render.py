"""Render a build's dataset card: README.md (Jinja templates in cards/) and assets/*.png.

The YAML front matter follows the Hub's dataset card conventions (`configs`, `dataset_info`,
`license`, `task_categories`, `tags`, `size_categories`, `pretty_name`) so that
`load_dataset(repo)` and `load_dataset(repo, "infill")` work unchanged. Text between
`<!-- curate:begin NAME -->` and `<!-- curate:end NAME -->` is written by people: rendering again
keeps it.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import jinja2
import yaml

from ..datadirs import data_dir
from ..schema import columns as schema_columns
from . import reasons
from .facts import BACKEND_NAMES, Facts, gather
from .machine import record_machine
from .plots import render_all
from .records import WHY

CARD = "README.md"
TEMPLATE = "README.md.j2"
SECTION_RE = re.compile(r"<!-- curate:begin (?P<name>[\w-]+) -->\n?(?P<body>.*?)"
                        r"<!-- curate:end (?P=name) -->", re.S)
FINGERPRINT_RE = re.compile(r"<!-- curate-card fingerprint=(?P<fp>[0-9a-f]+)")
META_RE = re.compile(r"<!-- curate-card (?P<meta>[^>]*?)\.? Generated")
HASHES = "card.sha256"  # sha256sum lines of the rendered card and plots (`sha256sum -c`)

# Meanings for columns the schema leaves undocumented.
COLUMN_DOCS = {
    "torch_version": "torch version the row was verified and timed with",
    "triton_version": "triton version the row was verified and timed with",
    "cuda_version": "CUDA version the row was verified and timed with",
    "gpu": "device the row was measured on",
}
# Meanings the card states in its own words (the schema's may point at files not published).
CARD_DOCS = {
    "status": "verify's verdict (`verified`, `incorrect`, `deceptive`, ...; see How each pair "
              "was verified)",
    "reasons": "every gate that failed or warned on the row (see the tables of gates and "
               "warnings below)",
}


@dataclass
class Card:
    path: Path
    facts: Facts
    assets: dict[str, str]
    kept_sections: list[str]
    backup: Path | None = None      # a README.md curate did not write, saved before replacing it


def hand_written(text: str) -> dict[str, str]:
    """NAME -> body of every marked section of an existing card."""
    return {m["name"]: m["body"] for m in SECTION_RE.finditer(text)}


def card_fingerprint(text: str) -> str | None:
    m = FINGERPRINT_RE.search(text)
    return m["fp"] if m else None


def card_meta(text: str) -> dict[str, str]:
    """The key=value pairs of a card's curate-card comment (fingerprint, curate, name, repo)."""
    m = META_RE.search(text)
    pairs = (kv.partition("=") for kv in (m["meta"].split() if m else []))
    return {k: unquote(v) for k, _, v in pairs if v}


def is_current(build_dir: str | Path, repo_id: str | None = None) -> bool:
    """Whether <dir>/README.md was rendered from the build as it is now (and for this repo)."""
    from .facts import build_fingerprint
    build = Path(build_dir)
    card = build / CARD
    if not card.is_file():
        return False
    return card_fingerprint(card.read_text()) == build_fingerprint(build, repo_id)


def front_matter(f: Facts) -> dict:
    meta: dict = {"pretty_name": f.pretty_name}
    meta["license"] = f.hub_licenses()
    meta["task_categories"] = ["text-generation"]
    meta["language"] = ["en"]
    backends = sorted({b for b, _ in f.counter("backend") if b != "(none)"})
    kinds = (["gpu-kernels"] if f.gpu_kernels else []) + (["cpu-kernels"] if "cpp" in backends
                                                          else [])
    meta["tags"] = ["code", *kinds, "pytorch", *backends, "curate", "synthetic",
                    "verified-speedup"]
    meta["size_categories"] = [f.size_category()]
    meta["configs"] = []
    meta["dataset_info"] = []
    for c in f.configs:
        cfg = {"config_name": c.name}
        if c.name == "default":
            cfg["default"] = True
        cfg["data_files"] = [{"split": s, "path": f"{c.folder}/{s}-*"} for s in c.splits]
        meta["configs"].append(cfg)
        meta["dataset_info"].append({
            "config_name": c.name,
            "features": c.features,
            "splits": [{"name": s, "num_bytes": v["num_bytes"], "num_examples": v["num_examples"]}
                       for s, v in c.splits.items()],
            "download_size": c.download_size,
            "dataset_size": c.dataset_size,
        })
    return meta


def verify_settings(f: Facts) -> dict:
    """The verify step's settings: its defaults (read from the step class) under the recorded ones."""
    given = f.step_settings("verify")
    if given is None:
        return {}
    settings: dict = {}
    try:
        from ..pipeline import registry
        cls = registry.load("verify", registry.STEPS)
        for name, p in inspect.signature(cls.__init__).parameters.items():
            if name != "self" and p.default is not inspect.Parameter.empty and \
                    isinstance(p.default, (int, float, str, bool, type(None), list, tuple)):
                settings[name] = p.default
    except Exception:  # the verify stage may not exist in this install: state what is recorded
        pass
    settings.update(given)
    for k in ("device", "threshold"):
        if k in settings and k in f.pipeline:
            settings[k] = f.pipeline[k]
    # how many workers ran is the machine's business, not the dataset's
    return {k: v for k, v in settings.items() if v is not None and k not in (
        "workers", "compile_workers", "devices", "cache_dir", "memory_gb")}


def tolerances() -> list[tuple[str, float, float, float]]:
    """(dtype, atol, rtol, relative-norm bound) of the verify stage, where it is installed."""
    try:
        from ..verify.worker.compare import TOLERANCES
    except Exception:
        return []
    return [(str(d).removeprefix("torch."), *t) for d, t in TOLERANCES.items()]


def _x(v, spec: str = ".2f") -> str:
    return "-" if v is None else f"{v:{spec}}x"


def _md(v) -> str:
    """A value safe inside a markdown table cell."""
    return str(v).replace("|", "\\|").replace("\n", " ")


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(data_dir("cards"))),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True)
    env.filters["x"] = _x
    env.filters["md"] = _md
    env.filters["pct"] = lambda v: f"{v:.0%}" if v is not None else "-"
    env.filters["num"] = lambda v: f"{v:,}" if isinstance(v, int) else str(v)
    env.filters["sci"] = lambda v: "-" if v is None else f"{v:.2e}"
    return env


def render_card(build_dir: str | Path = "build", *, repo_id: str | None = None,
                pretty_name: str | None = None, out: str | Path | None = None) -> Card:
    """Write `<out or build_dir>/README.md`, its `assets/*.png` and `card.sha256`; keep
    hand-written sections, and the name and repo given at an earlier render."""
    build = Path(build_dir)
    dest = Path(out) if out else build
    old_path = dest / CARD
    old_text = old_path.read_text() if old_path.is_file() else ""
    meta = card_meta(old_text)
    pretty_name = pretty_name or meta.get("name")  # a name or repo given once sticks
    repo_id = repo_id or meta.get("repo")
    if out is None:
        record_machine(build)
    f = gather(build, repo_id=repo_id, pretty_name=pretty_name)
    dest.mkdir(parents=True, exist_ok=True)
    assets = render_all(f, dest / "assets")
    backup = None
    if old_text and card_fingerprint(old_text) is None:  # not a card curate wrote: keep a copy
        backup = old_path.with_name(CARD + ".bak")
        backup.write_text(old_text)
    text, kept = _keep_sections(_text(f, assets, repo_id, pretty_name), hand_written(old_text))
    tmp = old_path.with_name(f".{CARD}.tmp")
    tmp.write_text(text)
    os.replace(tmp, old_path)
    write_hashes(dest, assets)
    return Card(old_path, f, assets, kept, backup)


def _text(f: Facts, assets: dict[str, str], repo_id: str | None, name_given: str | None) -> str:
    docs = {**COLUMN_DOCS, **{c["name"]: c["doc"] for c in schema_columns() if c.get("doc")},
            **CARD_DOCS}
    return _env().get_template(TEMPLATE).render(
        f=f, front=yaml.safe_dump(front_matter(f), sort_keys=False, allow_unicode=True,
                                  width=1000),
        assets=assets, repo=repo_id or "ORG/NAME", repo_given=repo_id, docs=docs,
        backend_names=BACKEND_NAMES,
        gates=reasons.of(reasons.FAIL), warnings=reasons.of(reasons.WARN),
        meaning=reasons.meaning, name_given=name_given, verify=verify_settings(f),
        why_not=lambda w: WHY.get(w, w), rf=f.records,
        tols=tolerances(), sp=f.speedup_summary(), dec=f.decontamination)


def _keep_sections(text: str, old: dict[str, str]) -> tuple[str, list[str]]:
    kept = []

    def keep(m: re.Match) -> str:
        name = m["name"]
        if name in old:
            kept.append(name)
            return f"<!-- curate:begin {name} -->\n{old[name]}<!-- curate:end {name} -->"
        return m.group(0)

    return SECTION_RE.sub(keep, text), kept


def card_files(dest: Path, assets: dict[str, str] | None = None) -> list[str]:
    """The card's files relative to `dest`: README.md and its plots."""
    names = sorted(assets.values()) if assets is not None else sorted(
        p.relative_to(dest).as_posix() for p in (dest / "assets").glob("*.png"))
    return [CARD, *names]


def file_hashes(dest: Path, names: list[str]) -> dict[str, str]:
    return {n: hashlib.sha256((dest / n).read_bytes()).hexdigest() for n in names
            if (dest / n).is_file()}


def write_hashes(dest: Path, assets: dict[str, str]) -> None:
    """card.sha256 beside the card: what was rendered, to tell later whether it changed."""
    lines = [f"{h}  {n}\n" for n, h in file_hashes(dest, card_files(dest, assets)).items()]
    (dest / HASHES).write_text("".join(lines))


def rendered_hashes(dest: Path) -> dict[str, str] | None:
    """name -> sha256 as recorded at the last render; None where no record exists."""
    path = Path(dest) / HASHES
    if not path.is_file():
        return None
    return {n: h for h, _, n in (ln.partition("  ") for ln in path.read_text().splitlines())
            if n}
