"""What the parent can tell about the machine without touching a device or running row code:
the CPU, the NVIDIA driver, the compilers on PATH, the build flags a candidate declares (read
from its source as data), and the versions of curate and of its gates."""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from .. import pyast

HERE = Path(__file__).resolve().parent
# each side's gates: the files whose code decides that side's findings
GATE_SOURCES = {"parent": ["gates/*.py", "findings.py"],
                "judge": ["worker/judge.py", "worker/compare.py", "worker/precision.py",
                          "worker/gates/degeneracy.py", "timing.py", "verdict.py"],
                "worker": ["worker/gates/*.py", "worker/hooks.py"]}


@functools.lru_cache(maxsize=1)
def gate_versions() -> dict[str, str]:
    """Per side, a short hash of the code of its gates: two rows with the same versions were
    judged by the same rules."""
    out = {}
    for side, patterns in GATE_SOURCES.items():
        h = hashlib.sha256()
        for pat in patterns:
            for p in sorted(HERE.glob(pat)):
                h.update(p.name.encode() + b"\0" + p.read_bytes())
        out[side] = h.hexdigest()[:12]
    return out


@functools.lru_cache(maxsize=1)
def cpuinfo() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (`model name`, `flags`), read once; empty
    where the system does not say (not Linux)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break   # the first processor's block ends here; the others repeat it
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_model() -> str | None:
    """The processor's name: x86 says `model name`, ARM kernels one of the others."""
    fields = cpuinfo()
    return next((fields[k] for k in ("model name", "Model", "Hardware", "cpu model")
                 if fields.get(k)), None)


@functools.lru_cache(maxsize=1)
def cpu() -> dict:
    return {"cpu": cpu_model() or platform.processor() or None, "cores": os.cpu_count()}


@functools.lru_cache(maxsize=1)
def nvidia_driver() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return _first_line(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None


@functools.lru_cache(maxsize=4)
def compilers(device: str) -> dict:
    out = {"python": sys.version.split()[0], "cxx": _first_line([_cxx(), "--version"])}
    if device == "cuda" and shutil.which("nvcc"):
        lines = (_run(["nvcc", "--version"]) or "").strip().splitlines()
        out["nvcc"] = lines[-1] if lines else None
    return out


def _cxx() -> str:
    return os.environ.get("CXX") or "g++"


def _run(cmd: list[str]) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def _first_line(cmd: list[str]) -> str | None:
    text = (_run(cmd) or "").strip()
    return text.splitlines()[0] if text else None


FLAG_KEYWORDS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags")


def declared_flags(code: str | None) -> dict:
    """The build flags a candidate's source declares: `load_inline(extra_cflags=[...])`, or the
    `_BUILD = {...}` of curate's inductor C++ programs. Literals only (nothing is evaluated)."""
    try:
        tree = pyast.parse(code or "")
    except SyntaxError:
        return {}
    out: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            for kw in node.keywords:
                if kw.arg in FLAG_KEYWORDS:
                    value = _literal(kw.value)
                    if isinstance(value, list):
                        out.setdefault(kw.arg, []).extend(str(v) for v in value)
        elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_BUILD" for t in node.targets):
            build = _literal(node.value)
            if isinstance(build, dict):
                out.update({k: build[k] for k in ("compiler", "flags", "defines") if k in build})
    return out


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None
