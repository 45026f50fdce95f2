"""Reading a file from SRC as hostile input: regular files only, never blocking, never unbounded.

Links inside SRC are the user's own (symlink farms of a dataset are common), so they are
followed, but only to regular files: a FIFO, a device or a socket behind any name is refused
before a byte of it is read.
"""

from __future__ import annotations

import os
import stat

from shardpack.errors import printable

# O_NONBLOCK: opening a FIFO with no writer returns at once instead of hanging; O_NOCTTY: a
# terminal device named like an image never becomes our controlling terminal.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
# Bytes asked of the kernel per read after the first: network filesystems may return less.
_CHUNK = 1 << 20
_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


class RefusedFile(Exception):
    """The file is not one shardpack reads: not a regular file, or larger than the limit."""


class FileTooLarge(RefusedFile):
    """The file holds more bytes than the caller's limit; not a byte of it was read."""

    stamp: tuple[int, int] | None = None  # (size, mtime in ns) of a file the open saw too large


def over_the_limit(limit: int, size: int | None = None) -> str:
    """How a FileTooLarge says why: the bytes it holds where known, and the limit."""
    over = f"over the limit of {limit:,} bytes"
    return over if size is None else f"{size:,} bytes, {over}"


def not_regular(mode: int) -> str | None:
    """Why a file of this st_mode is not read ("not a regular file (a FIFO)"), or None."""
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "of an unknown kind")
    return f"not a regular file ({kind})"


def read_regular(path: str, limit: int, dir_fd: int | None = None) -> bytes:
    """Read a whole regular file of at most `limit` bytes.

    Args:
        path: the file; links are followed, but only to a regular file.
        limit: the most bytes the caller will take; a larger file is refused unread.
        dir_fd: an open folder that a relative `path` names a file in (as os.open takes it).

    Raises:
        RefusedFile: not a regular file, or over the limit (also if it grows past it).
        OSError: it cannot be opened or read.
    """
    return read_regular_stat(path, limit, dir_fd)[0]


def read_regular_stat(
    path: str, limit: int, dir_fd: int | None = None
) -> tuple[bytes, os.stat_result]:
    """read_regular, with the fstat of what was opened, taken before its first byte was read
    (a stamp of the bytes read, without a stat of its own)."""
    try:
        fd = os.open(path, _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        target = _link_target(path, dir_fd)
        if target is None:
            raise
        # said so: "No such file" of a name the user sees listed reads as a riddle
        raise RefusedFile(f"a link to a missing file ({printable(target)}): restore the file or "
                          "remove the link") from None  # fmt: skip
    try:
        st = os.fstat(fd)  # of what was opened: a name swapped after the scan is caught here
        if not stat.S_ISREG(st.st_mode):
            raise RefusedFile(not_regular(st.st_mode))
        if st.st_size > limit:
            refused = FileTooLarge(over_the_limit(limit, st.st_size))
            refused.stamp = (st.st_size, st.st_mtime_ns)  # a grow knows it unchanged, unopened
            raise refused
        # O_NONBLOCK means nothing to a regular file on a local disk; a filesystem that
        # honours it (some network or FUSE ones) says so with EAGAIN, and is read blocking.
        first = st.st_size + 1  # one read for the whole file, as fstat sees it
        try:
            data = os.read(fd, first)
        except BlockingIOError:
            os.set_blocking(fd, True)
            data = os.read(fd, first)
        # A short read of exactly the size fstat saw is the end of the file: no read of 0
        # bytes to confirm it (one syscall of the five a small image cost).
        if len(data) != st.st_size:
            data = _read_on(fd, data, limit, st.st_size)
    finally:
        os.close(fd)
    return data, st


def _read_on(fd: int, first: bytes, limit: int, size: int) -> bytes:
    """The whole file, whose `first` read was not the `size` bytes fstat saw (it grew or shrank
    as it was read, or its filesystem returns less than asked): read on to its end, never past
    `limit`."""
    chunks, total = [first], len(first)
    while chunks[-1] and total <= limit and total != size:
        chunks.append(os.read(fd, min(_CHUNK, limit + 1 - total)))
        total += len(chunks[-1])
    if total > limit:
        raise FileTooLarge(f"grew past the limit of {limit:,} bytes while being read")
    return b"".join(chunks)


def _link_target(path: str, dir_fd: int | None) -> str | None:
    """Where the link `path` points, or None if it is no link."""
    try:
        return os.readlink(path, dir_fd=dir_fd)
    except OSError:
        return None
