"""The scan's progress: a source tells `listed` how many entries it found; a pack run given a
scan callback (pack(scan_progress=...)) hears the running count, else nothing happens."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

ScanCallback = Callable[[int], None]

# Entries between two calls of the callback: a run of a million entries makes ~250 calls.
EVERY = 4096


class _Tally:
    """The entries listed so far, passed on each time another EVERY have come."""

    def __init__(self, callback: ScanCallback) -> None:
        self.callback = callback
        self.count = 0
        self.due = EVERY

    def add(self, count: int) -> None:
        self.count += count
        if self.count >= self.due:
            self.due = self.count + EVERY
            self.callback(self.count)


_TALLY: ContextVar[_Tally | None] = ContextVar("scan_tally", default=None)


def listed(count: int) -> None:
    """Count `count` more entries found (a folder's, a manifest chunk's rows): once a folder or
    chunk, not per entry. Without a callback, a lookup and nothing more."""
    tally = _TALLY.get()
    if tally is not None:
        tally.add(count)


@contextlib.contextmanager
def reporting(callback: ScanCallback | None) -> Iterator[None]:
    """The scans inside report their entries to `callback` (None: to nothing)."""
    token = _TALLY.set(None if callback is None else _Tally(callback))
    try:
        yield
    finally:
        _TALLY.reset(token)
