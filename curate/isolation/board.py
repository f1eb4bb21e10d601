"""Background workers published on the node, so that a timed batch in another process stops
them too.

A Freezer sees only the workers of its own process. Under the Ray executor a build's synth
workers live in one actor's process and verify's timed batches in another, on the same node: the
synth workers' compiles and reference runs would go on beside every timed call. Each process that
owns background workers lists their process groups in a folder of the node that only this user
can write (one per build); a timed batch in any process stops them for its duration and adds the
seconds they spent stopped to a tally beside each entry, which the owner's time limits give back.

Two processes may stop the same group at once (two verify actors on one node): each holds a
shared lock on the entry while it keeps the group stopped, and only the last to let go, the one
that then gets the lock exclusively, continues it. Each adds its own seconds to the tally, so
overlapping holds count twice: a time limit given too much back, never too little.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import stat
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

from .freeze import _signal

ENV = "CURATE_BACKGROUND_BOARD"   # the board's name, set by the executor for its workers


def board_dir(name: str) -> Path:
    """The node-local folder of the board `name` (per user: other users' boards are not ours)."""
    return Path(tempfile.gettempdir()) / f"curate-board-{os.getuid()}-{name}"


def new_name() -> str:
    """A build's board name: the driver's host and pid, so that its node can tell a dead
    build's board (killed drivers leave theirs) from another host's live one."""
    return f"{socket.gethostname()}.{os.getpid()}.{time.time_ns()}"


def sweep_dead() -> list[Path]:
    """Remove the boards of this host's builds whose driver is gone; returns what went.

    A board only names process groups to stop: a dead build's is litter, never state."""
    prefix, host, gone = f"curate-board-{os.getuid()}-", socket.gethostname(), []
    for folder in Path(tempfile.gettempdir()).glob(prefix + "*"):
        parts = folder.name[len(prefix):].rsplit(".", 2)
        if len(parts) != 3 or parts[0] != host or not parts[1].isdigit():
            continue   # another host's build, or a name this version does not write
        if start_time(int(parts[1])) is None:
            shutil.rmtree(folder, ignore_errors=True)
            gone.append(folder)
    return gone


def start_time(pid: int) -> str | None:
    """When `pid` started (clock ticks since boot): a pid reused by another process differs."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


class Board:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = self.root.stat()
        if st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) & 0o077:
            # whoever else can write here could make us stop any of our process groups
            raise PermissionError(f"{self.root} must be this user's and private (mode 0700)")
        self._tally: dict[int, tuple[int, float]] = {}  # pgid -> (bytes read, seconds)
        self._lock = threading.Lock()

    def publish(self, pgid: int) -> None:
        began = start_time(pgid)
        if began is None:
            return
        tmp = self.root / f".{pgid}.{os.getpid()}"
        tmp.write_text(f"{os.getpid()} {began}\n")
        tmp.replace(self.root / str(pgid))

    def withdraw(self, pgid: int) -> None:
        for name in (str(pgid), f"{pgid}.frozen", f"{pgid}.lock"):
            with contextlib.suppress(FileNotFoundError):
                (self.root / name).unlink()
        with self._lock:
            self._tally.pop(pgid, None)

    def others(self, exclude: Iterable[int] = ()) -> list[int]:
        """Process groups published by other processes that still run (stale entries go)."""
        exclude, found = set(exclude), []
        for entry in self.root.iterdir():
            if not entry.name.isdigit() or int(entry.name) in exclude:
                continue
            try:
                owner, began = entry.read_text().split()
            except (OSError, ValueError):
                continue
            pgid = int(entry.name)
            if start_time(pgid) != began or start_time(int(owner)) is None:
                self.withdraw(pgid)
            elif int(owner) != os.getpid():
                found.append(pgid)
        return found

    @contextlib.contextmanager
    def hold(self, pgids: Iterable[int]) -> Iterator[int]:
        """Keep `pgids` stopped until the block ends; yields how many were stopped."""
        held: list[tuple[int, int]] = []
        t0 = time.monotonic()
        try:
            for pgid in pgids:
                fd = os.open(self.root / f"{pgid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(fd, fcntl.LOCK_SH)
                held.append((pgid, fd))
                _signal(pgid, signal.SIGSTOP)
            yield len(held)
        finally:
            spent = time.monotonic() - t0 if held else 0.0
            for pgid, fd in held:
                self._add_frozen(pgid, spent)
                fcntl.flock(fd, fcntl.LOCK_UN)
                try:   # the last holder continues the group
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    _signal(pgid, signal.SIGCONT)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                except BlockingIOError:
                    pass
                os.close(fd)

    def _add_frozen(self, pgid: int, seconds: float) -> None:
        fd = os.open(self.root / f"{pgid}.frozen", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, f"{seconds:.6f}\n".encode())
        finally:
            os.close(fd)

    def frozen_s(self, pgid: int) -> float:
        """Seconds other processes have kept `pgid` stopped (read incrementally)."""
        with self._lock:
            done, total = self._tally.get(pgid, (0, 0.0))
            try:
                with open(self.root / f"{pgid}.frozen", "rb") as fh:
                    fh.seek(done)
                    chunk = fh.read()
            except FileNotFoundError:
                return total
            whole = chunk[:chunk.rfind(b"\n") + 1]  # a line being written is read next time
            total += sum(float(x) for x in whole.split())
            self._tally[pgid] = (done + len(whole), total)
            return total

