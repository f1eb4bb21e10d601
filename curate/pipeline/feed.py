"""A step's input while a streaming build runs: rows arrive one by one, and the end is told."""

from __future__ import annotations

import queue
from typing import Iterable, Iterator

_END = object()


class Feed:
    """Iterating blocks until the next row arrives, and stops after `close()`."""

    def __init__(self):
        self._q: queue.Queue = queue.Queue()

    def put(self, row: dict) -> None:
        self._q.put(row)

    def close(self) -> None:
        self._q.put(_END)

    def _next(self, block: bool = True):
        item = self._q.get(block)
        if item is _END:
            self._q.put(_END)  # every later reader sees the end too
        return item

    def __iter__(self) -> Iterator[dict]:
        while (item := self._next()) is not _END:
            yield item

    def batches(self, most: int) -> Iterator[list[dict]]:
        """The rows there are now, at least one and at most `most` a list, until the end."""
        while (item := self._next()) is not _END:
            batch = [item]
            while len(batch) < most:
                try:
                    item = self._next(block=False)
                except queue.Empty:
                    break
                if item is _END:
                    break
                batch.append(item)
            yield batch


def batches(rows: Iterable[dict], most: int) -> Iterator[list[dict]]:
    """Lists of at most `most` rows: of a Feed, those that have arrived; of a list, in order."""
    if isinstance(rows, Feed):
        yield from rows.batches(most)
        return
    rows = list(rows)
    for i in range(0, len(rows), most):
        yield rows[i:i + most]


def recorded(rows: Iterable[dict], seen: list[dict]) -> Iterator[dict]:
    """`rows`, each also appended to `seen` as it is read: a step that hands its input on as it
    comes still finds the row of an answer's index."""
    for row in rows:
        seen.append(row)
        yield row
