"""Files that appear under their final name only when complete, and OUT treated as hostile.

Every file pack writes starts as a hidden temporary file `.NAME.<random>.partial` (a worker's
progress count: `.NAME.<random>.progress`), created with O_EXCL and O_NOFOLLOW, so a link or
file planted in OUT under a name we might use is never written through. Removal touches only
regular files (lstat): unlinking never follows a link, and a folder or FIFO is not ours.
"""

from __future__ import annotations

import errno
import json
import os
import re
import stat
from collections.abc import Iterable
from contextlib import suppress

HASH_CHUNK = 1 << 20  # bytes read at a time to hash a file
_TOKEN_BYTES = 8  # 16 hex digits: a name no one can plant in advance
# The one definition of our temporary names: `.NAME.<token>.partial|progress`.
TEMP_NAME = re.compile(r"^\.(?P<final>.+)\.[0-9a-f]{16}\.(?P<kind>partial|progress)$")
# Lone surrogates no file name decodes to (Python's surrogateescape gives U+DC80 to U+DCFF):
# a JSON source's "\ud800". No text, so no reader could write them out again (index.py's
# _NO_NAME refuses them in an index.json).
NOT_A_NAME = re.compile("[\ud800-\udc7f\udd00-\udfff]")
# Opening a file someone else may have put there: no link followed, no wait on a FIFO.
_HOSTILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def create_temp(path: str, kind: str = "partial") -> tuple[int, str]:
    """Create a new hidden temporary file beside `path` for writing; return (fd, its path).

    The name holds a random token and is created with O_EXCL, so nothing planted is reused.
    """
    head, tail = os.path.split(path)
    tmp = os.path.join(head, f".{tail}.{os.urandom(_TOKEN_BYTES).hex()}.{kind}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.open(tmp, flags, 0o644), tmp


def open_regular(path: str, flags: int = os.O_RDONLY) -> int:
    """Open a file that must be a regular file, without following a link or blocking.

    Raises:
        OSError: it is missing, a link (ELOOP) or not a regular file (EINVAL).
    """
    fd = os.open(path, flags | _HOSTILE)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(22, "not a regular file", path)  # errno.EINVAL
    os.set_blocking(fd, True)  # O_NONBLOCK was for the open only
    return fd


def is_regular(path: str) -> bool:
    """Whether `path` itself (not what a link points to) is a regular file."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def remove_files(paths: Iterable[str]) -> None:
    """Remove each path that is a regular file; links, folders and FIFOs are not ours."""
    for path in paths:
        if is_regular(path):
            with suppress(FileNotFoundError):
                os.remove(path)


def temp_files(
    folder: str, finals: Iterable[str], kinds: tuple[str, ...] = ("partial", "progress")
) -> dict[str, list[str]]:
    """Our temporary files in `folder` for the given final names: {final name: [paths]}.

    Only regular files under TEMP_NAME count: what a caller may read or remove.
    """
    wanted = set(finals)
    found: dict[str, list[str]] = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        match = TEMP_NAME.match(name)
        path = os.path.join(folder, name)
        if match and match["final"] in wanted and match["kind"] in kinds and is_regular(path):
            found.setdefault(match["final"], []).append(path)
    return found


def remove_temp_files(folder: str, finals: Iterable[str], before: float | None = None) -> list[str]:
    """Remove what temp_files finds (a killed run's leftovers), or with `before` (a time.time())
    only those unmodified since, as a write under way modifies its file; return their final
    names. One renamed or removed by another process since the listing is passed over."""
    found = temp_files(folder, finals)
    if before is not None:
        found = {final: old for final, paths in found.items()
                 if (old := [p for p in paths if _modified_before(p, before)])}  # fmt: skip
    remove_files(p for paths in found.values() for p in paths)
    return sorted(found)


def _modified_before(path: str, before: float) -> bool:
    """Whether the file at `path` was last modified before `before`; gone: no."""
    try:
        return os.lstat(path).st_mtime < before
    except FileNotFoundError:  # its writer renamed it since the listing (readers share a cache)
        return False


def replace_with(path: str, data: bytes, new: bool = False) -> int:
    """Write `data` under a new temporary name, fsync it, rename it to `path`, and return the
    file still open for writing (a journal appends to it without opening `path` again).

    On any failure the temporary file is removed and `path` is left as it was. A link at
    `path` is replaced, never written through. With `new`, anything at `path` (a link too)
    is left as it is and FileExistsError raised.
    """
    fd, tmp = create_temp(path)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        if new:
            _place_new(tmp, path)
        else:
            os.replace(tmp, path)
    except BaseException as e:
        os.close(fd)
        remove_files([tmp])
        if isinstance(e, OSError) and e.filename is None:  # a write's or fsync's: name the file
            raise OSError(e.errno, e.strerror, path) from None
        raise
    return fd


# What link() says on a filesystem that has no hard links.
_NO_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS}


def _place_new(tmp: str, path: str) -> None:
    """Give the file at `tmp` the name `path` only where nothing is. link() refuses a name that
    exists (a link too), with no window between a check and the write; a filesystem without
    hard links (FAT, some network ones) gets the check, then the rename."""
    try:
        os.link(tmp, path)
    except OSError as e:
        if e.errno not in _NO_LINKS:
            raise
        if os.path.lexists(path):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path) from None
        os.replace(tmp, path)
        return
    os.remove(tmp)


def write_atomic(path: str, data: bytes, new: bool = False) -> None:
    """replace_with, closing the file: `path` appears only complete."""
    os.close(replace_with(path, data, new))


def json_bytes(document: object) -> bytes:
    """A JSON document as readable UTF-8, the way every JSON file shardpack writes reads.

    A file name that is not UTF-8 (kept by Python as lone surrogates) is written as a JSON
    \\u escape, which reads back to the same name; a lone surrogate that is no file name's, as
    U+FFFD.
    """
    text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return NOT_A_NAME.sub("\ufffd", text).encode("utf-8", "backslashreplace")


def hash_fd(fd: int, digest) -> int:
    """Feed the whole file open at `fd` to `digest`, 1 MiB at a time; return its size."""
    size = 0
    while chunk := os.pread(fd, HASH_CHUNK, size):
        digest.update(chunk)
        size += len(chunk)
    return size
