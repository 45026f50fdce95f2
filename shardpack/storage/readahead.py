"""Reading a shard's files from a local disk ahead of the worker, once the disk is what it waits on.

A worker reads its files one at a time: where they are in the page cache each read is a copy
(~10 us a photo), but where they are not (a dataset larger than memory, a first pack after a
reboot) each waits on the disk in turn, one request in flight, and the core idles. A thread
beside the worker walks the same files ahead of it and, once it finds one the page cache does
not hold, asks the kernel for the next ones (posix_fadvise WILLNEED: the reads go to the disk
together and land in the page cache; the worker's own read then copies them). While the files
are cached it only looks, at fewer and fewer of them (SAMPLE), and asks nothing.

It only advises: the worker reads every file itself, with every check of srcfiles, so nothing
here decides what is read, and a file that vanished, grew or is no regular file is left alone.
Files are opened as srcfiles opens them (O_NONBLOCK, O_NOCTTY: a FIFO or a terminal named like
an image does nothing to the thread) and closed at once; at most AHEAD files or AHEAD_BYTES
bytes past the worker's are asked for.
"""

from __future__ import annotations

import collections
import itertools
import os
import stat
import threading
from collections.abc import Callable, Iterator

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
AHEAD = 64  # files asked for past the one the worker reads: the disk's queue, kept full
AHEAD_BYTES = 32 << 20  # and at most these bytes of them (a shard of large images)
# While the files are cached, the first is looked at, then the SAMPLE-th after it, then files
# twice as far apart each time, up to MOST_APART: a shard of 1,500 takes 9 looks.
SAMPLE = 16
MOST_APART = 256
_NEVER = 1 << 62  # a read count no worker reaches


def _cached(fd: int) -> bool:
    """Whether the page cache holds the file's first byte (a read that may not wait says)."""
    try:
        os.preadv(fd, [bytearray(1)], 0, os.RWF_NOWAIT)
    except BlockingIOError:
        return False
    except OSError:  # a filesystem that cannot say: taken as cached (nothing is asked)
        return True
    return True


class ReadAhead:
    """Advise the kernel of `files` ((name, listed size: the window's measure), in the order
    the worker reads them) ahead of the worker, which calls `read()` as it starts on each;
    `close()` ends the thread. `path(name)` is where a name is opened (None: it names no
    file on this disk, and is left alone); a file over `limit` bytes is not asked for (the
    worker refuses it unread)."""

    def __init__(self, files: Iterator[tuple[str, int]], path: Callable[[str], str | None],
                 limit: int) -> None:  # fmt: skip
        self._path, self._limit = path, limit
        self.reads = 0  # files the worker started on
        self.cold = False  # a file looked at was not in the page cache: every one is asked for
        self._wake_at = 0  # the worker's read count that wakes the thread
        self._wake = threading.Event()
        self._stopped = False
        files = iter(files)
        first = next(files, None)  # none (a source reading pieces of its own): no thread
        self._files = itertools.chain((first,), files)
        self._thread = threading.Thread(target=self._run, name="read-ahead", daemon=True)
        if first is not None:
            self._thread.start()
        else:
            self._wake_at = _NEVER

    def read(self) -> None:
        """The worker starts on its next file."""
        self.reads += 1
        if self.reads >= self._wake_at:
            self._wake.set()

    def close(self) -> None:
        self._stopped = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        try:
            self._ahead()
        finally:  # the worker's read() no longer wakes anything
            self._wake_at = _NEVER

    def _ahead(self) -> None:
        taken: collections.deque[tuple[int, int]] = collections.deque()  # (index, size) unread
        taken_bytes = 0
        # While the files are cached, the next file looked at, and the files to the one after:
        # doubled at each look that found its file cached (the thread wakes for each look)
        look, step = 0, SAMPLE
        for index, (name, size) in enumerate(self._files):
            while True:  # wait while the window past the worker's file is full
                if self._stopped:
                    return
                while taken and taken[0][0] < self.reads:
                    taken_bytes -= taken.popleft()[1]
                if index - self.reads < AHEAD and (taken_bytes < AHEAD_BYTES or not self.cold):
                    break
                if self.cold:  # until the worker starts on the next file
                    self._wait(self.reads + 1)
                else:  # until the next look is within the window
                    self._wait(max(look, index) - AHEAD + 1)
            taken.append((index, size))
            taken_bytes += size
            if self.cold or index >= look:
                if not self._advise(name):
                    look = index + 1  # none was looked at: the next file is
                elif not self.cold:
                    look, step = index + step, min(2 * step, MOST_APART)

    def _wait(self, reads: int) -> None:
        """Until the worker started on `reads` files (or close())."""
        self._wake.clear()
        self._wake_at = reads
        if self.reads < reads and not self._stopped:
            self._wake.wait()

    def _advise(self, name: str) -> bool:
        """Ask for the file while the files are not cached, or look whether it is; whether it
        was a regular file of at most the limit, looked at."""
        if (path := self._path(name)) is None:
            return False
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError:
            return False  # the worker's own read says why
        try:
            st = os.fstat(fd)  # its size as it is: a large tree's listing gives estimates
            if not stat.S_ISREG(st.st_mode) or not 0 < st.st_size <= self._limit:
                return False
            if self.cold or not _cached(fd):
                self.cold = True
                os.posix_fadvise(fd, 0, min(st.st_size, AHEAD_BYTES), os.POSIX_FADV_WILLNEED)
        except OSError:
            return False
        finally:
            os.close(fd)
        return True
