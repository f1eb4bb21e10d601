"""A task's time limit as the parent keeps it: seconds the worker spent frozen are given back,
and so, up to a grace, are seconds during which one of its descendants was a compiler.

The worker cannot speak for itself here (a candidate would claim it was compiling): the parent
reads the worker's process tree from /proc. A process can name itself after a compiler, so the
grace is a bound a caller chooses (CUDA and C++ builds), never unlimited, and untrusted Python
that hangs is bounded by the task's own timeout.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable

from .freeze import children

COMPILERS = frozenset({"cc1plus", "cc1", "g++", "gcc", "c++", "cc", "clang", "clang++", "ld",
                       "ld.gold", "ld.bfd", "ld.lld", "collect2", "as", "ninja", "nvcc", "cicc",
                       "ptxas", "fatbinary", "nvlink", "cudafe++"})
SAMPLE_S = 0.25
_VERSION = re.compile(r"-\d+(\.\d+)*$")  # g++-12, clang-17
_MAX_DEPTH = 12


def is_compiler(name: str) -> bool:
    """`name` (a comm or an executable's base name) is a compiler, a linker or a build tool:
    x86_64-linux-gnu-g++-12 counts as g++."""
    name = _VERSION.sub("", name.strip())
    return name in COMPILERS or any(name.endswith("-" + c) for c in COMPILERS)


def _names(pid: int) -> list[str]:
    names = []
    try:
        with open(f"/proc/{pid}/comm") as fh:
            names.append(fh.read().strip())
    except OSError:
        pass
    try:
        names.append(os.path.basename(os.readlink(f"/proc/{pid}/exe")))
    except OSError:
        pass
    return names


def compiling(pid: int) -> bool:
    """Whether a descendant of `pid` (not `pid` itself: the worker runs the untrusted code) is
    a compiler now."""
    todo = [(kid, 1) for kid in children(pid)]
    while todo:
        p, depth = todo.pop()
        if any(is_compiler(n) for n in _names(p)):
            return True
        if depth < _MAX_DEPTH:
            todo.extend((kid, depth + 1) for kid in children(p))
    return False


class Deadline:
    """`timeout` seconds of a worker's own time from now: frozen seconds (`frozen()`, a running
    total) do not count, nor, up to `grace` in all, seconds in which `observe()` found a
    compiler among the worker's descendants."""

    def __init__(self, timeout: float, frozen: Callable[[], float] = lambda: 0.0,
                 grace: float = 0.0, observe: Callable[[], bool] = lambda: False,
                 clock: Callable[[], float] = time.monotonic):
        self.timeout, self.grace = timeout, max(0.0, grace)
        self._frozen, self._observe, self._clock = frozen, observe, clock
        self._t0 = clock()
        self._frozen0 = frozen()
        self._last = self._t0
        self._last_frozen = 0.0
        self._seen = False
        self.compiler_s = 0.0

    def elapsed(self) -> float:
        """Wall seconds since the limit began (frozen and compiler seconds included)."""
        return self._clock() - self._t0

    def frozen_s(self) -> float:
        return self._frozen() - self._frozen0

    def expired(self) -> bool:
        """Samples the worker's descendants (every SAMPLE_S at most) while there is grace left,
        then tells whether the limit has passed."""
        now = self._clock()
        frozen = self.frozen_s()
        if self.compiler_s < self.grace and now - self._last >= SAMPLE_S:
            # a frozen compiler does not compile: those seconds are given back once already
            ran = max(0.0, (now - self._last) - (frozen - self._last_frozen))
            seen = ran > 0 and self._observe()
            if seen:
                # seen at both ends: the whole interval (a slow parent loses nothing); seen
                # first now: one sample's worth, the compiler may have just begun
                credit = ran if self._seen else min(ran, SAMPLE_S)
                self.compiler_s = min(self.grace, self.compiler_s + credit)
            self._last, self._last_frozen, self._seen = now, frozen, seen
        return now - self._t0 - frozen - self.compiler_s > self.timeout
