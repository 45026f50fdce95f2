"""Ctrl-C and SIGTERM held off across a step they must not cut into, then acted on."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

STOPS = (signal.SIGINT, signal.SIGTERM)


@contextmanager
def stops_held() -> Iterator[None]:
    """Hold Ctrl-C and SIGTERM off for the block, then stop as they asked. For a step that loses
    them: a fork (arriving as a worker forks, one hit it before it ignores them, or this process
    inside an at-fork handler, which swallows the exception: the run went on), or a library's
    import that swallows the exception (OpenCV's loader: `except: pass`). Blocked, a forked
    worker inherits them pending and discards them; here they are noted (another thread of
    this process may take one: Python runs its handler on the main thread) and raised again
    after; on another thread than the main one (the Python API's caller's), only blocked."""
    arrived: list[int] = []
    handlers = []
    if threading.current_thread() is threading.main_thread():
        handlers = [signal.signal(stop, lambda number, _: arrived.append(number))
                    for stop in STOPS]  # fmt: skip
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOPS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for stop, handler in zip(STOPS, handlers, strict=False):  # none: not the main thread
            signal.signal(stop, handler)
        if arrived:
            signal.raise_signal(arrived[0])
