"""Freezing workers that are not being timed, and per-process accounting of the time they spent
frozen (a frozen worker's time limit does not run).

A pair's timed calls must see a quiet machine: another row's compile, its candidate's leftover
threads or a hostile neighbour spinning on the CPU or the GPU would slow whichever side is being
timed. `Freezer.quiet(keep)` stops (SIGSTOP) the process group of every live worker except
`keep` for the duration of a timed batch and continues them afterwards.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from typing import Iterable, Iterator


class Freezer:
    def __init__(self):
        self.board = None                      # board.Board: workers of other processes too
        self._lock = threading.Lock()
        self._live: set[int] = set()          # process groups of live workers
        self._frozen_s: dict[int, float] = {}  # pgid -> seconds spent frozen (finished freezes)
        self._since: dict[int, float] = {}     # pgid -> when its current freeze began
        self.freezes = 0

    def use_board(self, board) -> None:
        """Publish this freezer's workers on `board`, and stop the workers other processes
        published there too (board.py: a Ray build's synth actor and verify actor)."""
        with self._lock:
            self.board = board
            for g in self._live:
                board.publish(g)

    def add(self, pgid: int) -> None:
        with self._lock:
            self._live.add(pgid)
            if self.board is not None:
                self.board.publish(pgid)

    def discard(self, pgid: int) -> None:
        with self._lock:
            if self.board is not None:
                self.board.withdraw(pgid)
            self._live.discard(pgid)
            self._frozen_s.pop(pgid, None)
            if self._since.pop(pgid, None) is not None:
                _signal(pgid, signal.SIGCONT)

    def frozen_s(self, pgid: int) -> float:
        """Seconds `pgid` has spent frozen so far (a time limit adds them back)."""
        with self._lock:
            s = self._frozen_s.get(pgid, 0.0)
            if pgid in self._since:
                s += time.monotonic() - self._since[pgid]
            board = self.board
        return s + (board.frozen_s(pgid) if board is not None else 0.0)

    @contextlib.contextmanager
    def quiet(self, keep: Iterable[int]) -> Iterator[int]:
        """Stop every live worker but `keep` until the block ends; yields how many were stopped."""
        keep = set(keep)
        with self._lock:
            now = time.monotonic()
            stopped = [g for g in self._live if g not in keep and g not in self._since]
            for g in stopped:
                if _signal(g, signal.SIGSTOP):
                    self._since[g] = now
            self.freezes += 1
            board = self.board
            others = board.others(exclude=set(self._live) | keep) if board is not None else []
        try:
            with board.hold(others) if others else contextlib.nullcontext(0) as n:
                yield len(stopped) + n
        finally:
            with self._lock:
                now = time.monotonic()
                for g in stopped:
                    began = self._since.pop(g, None)
                    if began is not None:
                        self._frozen_s[g] = self._frozen_s.get(g, 0.0) + now - began
                        _signal(g, signal.SIGCONT)


# Workers of other stages in this process that run untrusted code on the same machine, such
# as a streaming build's synth workers compiling and running references (on the GPU too): a
# timed batch stops them as well, or their compiles and launches would slow whichever side is
# being timed. Their time limits add back the time they spent frozen, as every worker's do.
BACKGROUND = Freezer()


def _signal(pgid: int, sig: int) -> bool:
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def children(pid: int) -> list[int]:
    """The child processes of `pid` (of every one of its threads), from /proc."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                kids.extend(int(k) for k in fh.read().split())
        except (OSError, ValueError):
            continue
    return kids


def cpu_seconds(pid: int, _depth: int = 0) -> float | None:
    """CPU time of process `pid`, all its threads and its descendants, from the scheduler's
    nanosecond counters; read from outside, so the process cannot hide work that runs while it
    should be idle."""
    total = 0.0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                total += int(fh.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue
    if _depth < 4:
        for kid in children(pid):
            total += cpu_seconds(kid, _depth + 1) or 0.0
    return total
