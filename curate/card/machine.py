"""The machine a build ran on, and how its C++ kernels were compiled: what the card says about
where the figures come from."""

from __future__ import annotations

import ast
import hashlib
import json
import os
import platform
import re
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq

from ..hub.shards import list_shards
from ..verify.machine import cpu_model

MACHINE = "machine.json"


def host() -> dict:
    """This machine's processor (model name, cores usable by the build), OS and architecture."""
    name = cpu_model()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count()
    return {"processor": name or platform.processor() or platform.machine() or None,
            "cores": cores, "arch": platform.machine(), "system": platform.system()}


def record_machine(build: Path) -> dict:
    """machine.json: the processor of the machine that ran the build.

    `curate build` renders the card right after it writes stats.json, on the build machine; the
    first render of a new stats.json records this host, later renders keep what was recorded
    (a build made before machine.json existed gets the machine of its first render)."""
    stats = build / "stats.json"
    if not stats.is_file():  # not a build (yet): nothing to bind a machine to
        return {}
    digest = hashlib.sha256(stats.read_bytes()).hexdigest()
    path = build / MACHINE
    try:
        old = json.loads(path.read_text()) if path.is_file() else {}
    except json.JSONDecodeError:
        old = {}   # our own file, cut short: recorded again
    if old and old.get("stats_sha256") == digest:
        return old
    data = {**host(), "stats_sha256": digest}
    path.write_text(json.dumps(data, indent=2) + "\n")
    return data


_BUILD_RE = re.compile(r"^_BUILD = (\{.*\})$", re.M)
# Flags that make the compiler target the processor it runs on (or a given one)
_MACHINE_FLAGS = re.compile(r"^-m(arch|tune|cpu)=|^-m(avx|sse|fma|f16c|amx|neon|sve)")


def cpp_build(build: Path) -> dict | None:
    """How the kept C++ kernels are compiled: the `_BUILD` dict curate writes into each
    `backend=cpp` program (compiler, defines, flags), merged over the rows."""
    flags: list[str] = []
    defines: list[str] = []
    compilers: Counter = Counter()
    rows = 0
    for p in [p for ps in list_shards(build / "data").values() for p in ps]:
        if not {"backend", "kernel_code"} <= set(pq.read_schema(p).names):
            continue
        t = pq.read_table(p, columns=["backend", "kernel_code"]).to_pydict()
        for backend, code in zip(t["backend"], t["kernel_code"]):
            m = _BUILD_RE.search(code or "") if backend == "cpp" else None
            if m is None:
                continue
            try:
                b = ast.literal_eval(m.group(1))
            except (ValueError, SyntaxError):
                continue
            rows += 1
            compilers[str(b.get("compiler"))] += 1
            flags += [f for f in b.get("flags") or [] if f not in flags]
            defines += [d for d in b.get("defines") or [] if d not in defines]
    if not rows:
        return None
    return {"rows": rows, "compilers": [c for c, _ in compilers.most_common()], "flags": flags,
            "defines": defines, "machine_flags": [f for f in flags if _MACHINE_FLAGS.search(f)],
            "isa": [d for d in defines if d.startswith("CPU_CAPABILITY")]}
