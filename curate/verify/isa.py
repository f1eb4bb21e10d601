"""The instruction-set extensions a C++ candidate is built for, against the CPU that verifies it.

inductor's C++ output is written for the CPU it was generated on: its loops step by that
CPU's vector width and its build flags name the extensions (`-mavx512f`, `-mavx2`, `-mfma`). On a
CPU without them the kernels die of SIGILL, which would read as `crashed` (the candidate's
fault) when the pair is simply not runnable here: such a row is `unsupported`, with the
extensions it needs named, before anything runs."""

from __future__ import annotations

import functools
import re

from .machine import cpuinfo

# the build flags that name an extension (`-march=native` names none: it is the builder's own)
_FLAG = re.compile(r"""['"]-m(avx[0-9a-z_.-]*|fma[0-9]*|f16c|amx[0-9a-z_-]*|sse[0-9a-z_.]*)['"]""")


def _norm(name: str) -> str:
    """/proc/cpuinfo spells `avx512_vnni` and `amx_tile` where the compiler spells `avx512vnni`
    and `amx-tile`."""
    return re.sub(r"[-_.]", "", name.lower())


def required(code: str) -> list[str]:
    """The extensions a candidate's build flags name, as the compiler spells them."""
    return sorted(set(_FLAG.findall(code or "")))


@functools.cache
def cpu_flags() -> frozenset[str] | None:
    """This CPU's extensions (normalized), or None where the system does not say (not Linux)."""
    flags = cpuinfo().get("flags")
    return None if flags is None else frozenset(_norm(f) for f in flags.split())


def missing(code: str, flags: frozenset[str] | None = None) -> list[str]:
    """The extensions the candidate needs that the CPU (`flags`, default this one) lacks; none
    when the CPU's extensions are unknown (the row runs, as before)."""
    flags = cpu_flags() if flags is None else flags
    if flags is None:
        return []
    return [x for x in required(code) if _norm(x) not in flags]
