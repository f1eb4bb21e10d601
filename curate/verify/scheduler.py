"""Devices and their gates: one `Device` per GPU index (or one for the CPU), each with its own
worker pools, its own exclusive timing gate and its own memory gate; the scheduler puts a row on
the least busy device. A row's workers are pinned to its device (CUDA_VISIBLE_DEVICES), so a
verdict never depends on an implicit device 0, and the unit a device handles is one row in,
one result out."""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field

from ..isolation import WorkerPool

GPU_SHARE = 0.8   # rows enter while their memory estimates fit in this share of the device


class DeviceGate:
    """A readers-writer lock: timed batches hold it alone, every other request that runs on the
    device holds it shared. Writers go first, so a stream of correctness work cannot starve
    timing. Waiting here never counts against a request's time limit.

    A shared holder that has run for longer than the writers' patience (a candidate hanging in
    a call until its timeout) is waited for once, not by every batch after it: writers wait
    only for holders younger than their patience.

    `seconds` says where the device's time went (stats.json): how long it was held alone, how
    long timed batches waited for it and how long shared requests waited behind them."""

    def __init__(self, patience: float = 10.0):
        self.patience = patience
        self._cond = threading.Condition()
        self._readers: dict[int, float] = {}   # token -> when it took the gate
        self._next = 0
        self._writer = False
        self._waiting_writers = 0
        self.seconds = {"exclusive_held": 0.0, "exclusive_wait": 0.0, "shared_wait": 0.0}
        self.counts = {"exclusive": 0, "shared": 0, "shared_waited": 0}

    def report(self) -> dict:
        with self._cond:
            return {**{f"{k}_s": round(v, 3) for k, v in self.seconds.items()}, **self.counts}

    @contextlib.contextmanager
    def shared(self):
        with self._cond:
            t0 = time.monotonic()
            while self._writer or self._waiting_writers:
                self._cond.wait()
            self._next += 1
            token = self._next
            self._readers[token] = now = time.monotonic()
            self.counts["shared"] += 1
            if now - t0 > 1e-3:
                self.counts["shared_waited"] += 1
                self.seconds["shared_wait"] += now - t0
        try:
            yield
        finally:
            with self._cond:
                del self._readers[token]
                self._cond.notify_all()

    def _young_readers(self) -> float | None:
        """Seconds until the youngest shared holder outlives the patience (None: none left)."""
        now = time.monotonic()
        ages = [now - t for t in self._readers.values() if now - t < self.patience]
        return self.patience - min(ages) if ages else None

    @contextlib.contextmanager
    def exclusive(self):
        """Alone on the device, but for shared holders older than the patience (on the CPU
        they are frozen while the batch runs)."""
        with self._cond:
            t0 = time.monotonic()
            self._waiting_writers += 1
            while True:
                left = self._young_readers()
                if not self._writer and left is None:
                    break
                self._cond.wait(max(0.01, min(1.0, left if left is not None else 1.0)))
            self._waiting_writers -= 1
            self._writer = True
            t_held = time.monotonic()
            self.counts["exclusive"] += 1
            self.seconds["exclusive_wait"] += t_held - t0
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self.seconds["exclusive_held"] += time.monotonic() - t_held
                self._cond.notify_all()


class Grant:
    """One row's hold on a memory gate: `held` GB now, `extra` more once it grows (`grow`)."""

    def __init__(self, held: float, extra: float = 0.0):
        self.held, self.extra = held, extra


class MemoryGate:
    """A weighted semaphore over device memory (GB): a row waits until its estimate fits beside
    the rows already running, so that large problems do not run out of memory together.

    `slots` (the device's worker pairs) bounds the holders too: a row that got its memory
    always finds its workers free, so no row holds memory while it waits for workers (which
    kept large rows out while the device had room for them).

    A row may enter with what its load needs and grow to its whole estimate after the load
    (`acquire(gb, then=...)`, `grow`): starting workers and loading them (a second or more a
    row, little device memory) then overlap the rows that run, instead of holding their whole
    reservation idle. A row is let in only while the rows that have not grown yet could all
    grow one after another once the others are done (the sum of their loads plus the largest
    growth fits), so growers never wait for each other forever; and only into room that no
    waiting grower needs, so a grower waits for the rows already running, not for newcomers."""

    def __init__(self, capacity_gb: float, slots: int | None = None):
        self.capacity = max(1.0, capacity_gb)
        self.slots = slots
        self.used = 0.0
        self.holders = 0
        self._ungrown: list[Grant] = []
        self._growing_gb = 0.0   # what holders waiting in `grow` wait for, together
        self._cond = threading.Condition()

    def clamp(self, gb: float) -> float:
        return min(self.capacity, max(0.0, gb))

    def resize(self, capacity_gb: float) -> None:
        with self._cond:
            self.capacity = max(1.0, capacity_gb)
            self._cond.notify_all()

    def _admits(self, gb: float, extra: float) -> bool:
        if self.used + gb + self._growing_gb > self.capacity:
            return False   # the room waiting growers need is theirs
        if self.slots is not None and self.holders >= self.slots:
            return False
        pending = [(g.held, g.extra) for g in self._ungrown] + ([(gb, extra)] if extra else [])
        return not pending or (sum(h for h, _ in pending) + max(e for _, e in pending)
                               <= self.capacity)

    def acquire(self, gb: float, then: float | None = None) -> Grant:
        """Wait until `gb` fits, then hold it; `then` (more than `gb`): the whole estimate the
        holder grows to later."""
        extra = max(0.0, min(self.capacity, then) - gb) if then is not None else 0.0
        with self._cond:
            # by holders, not by `used > 0`: sums of floats given back in another order leave
            # a residue, and a row that needs the whole device would wait for it forever
            while self.holders and not self._admits(gb, extra):
                self._cond.wait()
            self.used += gb
            self.holders += 1
            grant = Grant(gb, extra)
            if extra:
                self._ungrown.append(grant)
            return grant

    def grow(self, grant: Grant) -> None:
        """Wait until the holder's growth fits, then hold it too (no-op once grown)."""
        if not grant.extra:
            return
        with self._cond:
            self._growing_gb += grant.extra
            try:
                while self.used + grant.extra > self.capacity:
                    self._cond.wait()
            finally:
                self._growing_gb -= grant.extra
            self.used += grant.extra
            grant.held, grant.extra = grant.held + grant.extra, 0.0
            self._ungrown.remove(grant)
            self._cond.notify_all()

    def release(self, grant: Grant | float) -> None:
        gb = grant if isinstance(grant, float | int) else grant.held
        with self._cond:
            if grant in self._ungrown:   # it ended before it grew
                self._ungrown.remove(grant)
            self.holders -= 1
            self.used = max(0.0, self.used - gb) if self.holders else 0.0
            self._cond.notify_all()

    def regrow(self, grant: Grant, gb: float) -> bool:
        """A holder that has grown asks for `gb` more (its second pass, on the same workers).
        It waits for it as a row that has not grown yet does, and only where that cannot
        deadlock: every holder still to grow, this one too, could grow one after another once
        the others are done. False where it may not wait (nothing is taken): the caller gives
        its reservation back and queues afresh."""
        with self._cond:
            if grant.extra or grant in self._ungrown:
                return False
            if self.used + gb + self._growing_gb > self.capacity:
                pending = [(g.held, g.extra) for g in self._ungrown] + [(grant.held, gb)]
                if sum(h for h, _ in pending) + max(e for _, e in pending) > self.capacity:
                    return False
            grant.extra = gb
            self._ungrown.append(grant)
        self.grow(grant)
        return True

    def give_back(self, grant: Grant, gb: float) -> None:
        """A holder gives back `gb` of what it holds and keeps the rest."""
        with self._cond:
            gb = min(gb, grant.held)
            grant.held -= gb
            self.used = max(0.0, self.used - gb)
            self._cond.notify_all()

    @contextlib.contextmanager
    def reserve(self, gb: float, then: float | None = None):
        grant = self.acquire(gb, then)
        try:
            yield grant
        finally:
            self.release(grant)


@dataclass
class Device:
    """One GPU (`index`) or the CPU (`index` None), with what schedules work on it."""

    index: int | None
    gate: DeviceGate = field(default_factory=DeviceGate)
    memory: MemoryGate = field(default_factory=lambda: MemoryGate(64.0))
    pools: dict[str, WorkerPool] = field(default_factory=dict)
    rows: int = 0          # rows placed here and not yet done
    done: int = 0

    @property
    def name(self) -> str:
        return "cpu" if self.index is None else f"cuda:{self.index}"

    def env(self) -> dict[str, str]:
        """What pins a worker to this device (set before it initializes CUDA)."""
        return {} if self.index is None else {"CUDA_VISIBLE_DEVICES": str(self.index)}


class Scheduler:
    """Puts each row on the device with the fewest rows in flight."""

    def __init__(self, devices: list[Device]):
        if not devices:
            raise ValueError("a scheduler needs at least one device")
        self.devices = devices
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def place(self):
        with self._lock:
            dev = min(self.devices, key=lambda d: (d.rows, d.done))
            dev.rows += 1
        try:
            yield dev
        finally:
            with self._lock:
                dev.rows -= 1
                dev.done += 1

    def close(self) -> None:
        for d in self.devices:
            for p in d.pools.values():
                p.close()
            d.pools = {}
