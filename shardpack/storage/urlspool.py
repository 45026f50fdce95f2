"""What a run fetched of its image URLs, kept on this machine's disk for the rest of the run:
each body (or the reason its fetch failed) in a file of its own, written as it arrives, so
that a URL the --dedup pass fetched is read by its worker from here, never asked again (a
server may answer otherwise the second time: another image, a 429). So are the objects of a
store (an s3:// SRC, a manifest's s3:// images) a grow reads before its workers (its compare,
its --dedup pass: Storage.keep_fetched's `objects`), under their URLs; a disk's files never
are. The reads before the workers over, `seal` keeps a worker in the run's own process from
keeping what it fetches (read by no one after it). The folder is private to
the run (made with a random name, mode 0700) and removed as the run ends; its files are read as
hostile all the same: no link followed, a regular file only, every read bounded.

A file is `<kind> <url>\\n` and then the body (kind `body`) or the failure's reason (`large`:
over the byte limit, `refused`: any other), under a name of the URL's digest; it appears
under that name only whole (written under a temporary name, then renamed).

A killed run (SIGKILL, a power cut) leaves its spool: the next run removes it as it starts
(`remove_left`, through Storage.clear_scratch), in OUT's folder on a disk, in the system's
temporary folder (shared by every run on this machine) for OUT on an object store. A spool is
its run's while the run holds an flock on its folder, taken as the folder is made and let go
when the run's last process holding it ends, however it ends (the kernel lets it go): a
folder whose flock is free is a dead run's, one whose flock is held a live run's, whatever its
OUT, and no pid is guessed at (a pid is reused, and means nothing to a run in another pid
namespace that shares the folder). The next run takes the free flock before it removes the
folder, so that a run that makes one at that moment waits for it, sees its folder gone, and
makes another. Only folders so named and this user's are removed, never through a link.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from contextlib import suppress

from shardpack.errors import OutputError
from shardpack.layout import FETCHED_PREFIX
from shardpack.storage.atomic import create_temp, open_regular, remove_files
from shardpack.storage.srcfiles import FileTooLarge, RefusedFile, over_the_limit

_BODY, _LARGE, _REFUSED = b"body", b"large", b"refused"
_MOST_REASON = 4096  # bytes of a failure's reason kept (fetch's reasons are a line)
_MAKING = threading.Lock()  # the --dedup pass's threads keep bodies at once: one folder made


class UrlSpool:
    """Fetched URLs' bodies and failures in a folder of `parent` (a folder on this machine's
    disk: Storage.scratch_folder), made by the first `put` or `fail`. Only the process that
    made the spool writes to it (a forked worker reads it alone); `remove` takes it away."""

    def __init__(self, parent: str) -> None:
        self.parent = parent
        self.folder: str | None = None  # made at the first body or failure kept
        self._owner = os.getpid()
        self._held: int | None = None  # the folder, open: its flock says the run is alive

    def __getstate__(self) -> dict:  # a worker's copy reads what the packing process kept
        return {**self.__dict__, "_owner": None, "_held": None}

    def _path(self, url: str) -> str | None:
        if self.folder is None:
            return None
        name = hashlib.blake2b(_encoded(url), digest_size=16).hexdigest()
        return os.path.join(self.folder, name)

    def holds(self, url: str) -> bool:
        """Whether `url`'s body or failure is kept (one stat)."""
        path = self._path(url)
        return path is not None and os.path.lexists(path)

    def put(self, url: str, data: bytes) -> None:
        """Keep `url`'s body."""
        self._keep(url, _BODY, data)

    def fail(self, url: str, error: RefusedFile) -> None:
        """Keep why `url` gave no image: `read` raises it again, as it was."""
        kind = _LARGE if isinstance(error, FileTooLarge) else _REFUSED
        self._keep(url, kind, str(error).encode("utf-8", "replace")[:_MOST_REASON])

    def _keep(self, url: str, kind: bytes, data: bytes) -> None:
        if self._owner != os.getpid():
            return  # a worker's fetch (or one after seal()): read by no one after it
        try:
            with _MAKING:
                if self.folder is None:
                    self.folder, self._held = _made(self.parent)
            fd, tmp = create_temp(self._path(url))
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(b"%s %s\n" % (kind, _encoded(url)))
                    f.write(data)
                os.replace(tmp, self._path(url))
            except BaseException:
                remove_files([tmp])
                raise
        except OSError as e:
            where = self.folder or self.parent
            raise OutputError.writing(f"{where} (images fetched once, kept for the workers)",
                                      e) from None  # fmt: skip

    def fetched(self, url: str, limit: int, get: Callable[[str, int], bytes]) -> bytes:
        """`url`'s body, at most `limit` bytes: as kept (or its failure, raised again), else
        got by `get` and kept (RefusedFile: its failure, kept and raised)."""
        kept = self.read(url, limit)
        if kept is not None:
            return kept
        try:
            data = get(url, limit)
        except RefusedFile as e:  # UrlFailed, FileTooLarge: the worker skips it so, unasked
            self.fail(url, e)
            raise
        self.put(url, data)
        return data

    def seal(self) -> None:
        """The reads before the workers' are over: nothing more is kept, in this process either
        (a worker of its own reads what is kept, and fetches the rest unkept)."""
        self._owner = None

    def read(self, url: str, limit: int) -> bytes | None:
        """`url`'s body as kept, at most `limit` bytes; None where none is kept (nor anything
        readable as one: it is fetched).

        Raises:
            FileTooLarge: the body is over `limit`, or its fetch was refused as over the limit.
            RefusedFile: its fetch failed so (the same reason).
        """
        path = self._path(url)
        if path is None:
            return None
        head = b" %s\n" % _encoded(url)
        try:
            fd = open_regular(path)  # no link followed, a regular file only
        except OSError:
            return None
        try:
            size = os.fstat(fd).st_size
            # the longest head, then the body to its limit (the reasons are less)
            if size > len(_REFUSED) + len(head) + max(limit, _MOST_REASON):
                raise FileTooLarge(over_the_limit(limit))
            data = _read_bounded(fd, size)
        finally:
            os.close(fd)
        kind = data.partition(b" ")[0]
        if kind not in (_BODY, _LARGE, _REFUSED) or not data.startswith(kind + head):
            return None  # not ours as written (another URL of the same digest: none known)
        data = data[len(kind) + len(head) :]
        if kind == _BODY:
            if len(data) > limit:
                raise FileTooLarge(over_the_limit(limit))
            return data
        reason = data[:_MOST_REASON].decode("utf-8", "replace")
        raise (FileTooLarge if kind == _LARGE else RefusedFile)(reason)

    def remove(self) -> None:
        """Remove the folder and all it holds (nothing is kept from here on); its flock goes
        with it."""
        folder, self.folder = self.folder, None
        held, self._held = self._held, None
        try:
            if folder is not None:
                with suppress(FileNotFoundError):
                    shutil.rmtree(folder)
        finally:
            if held is not None:
                os.close(held)


def _made(parent: str) -> tuple[str, int]:
    """A new spool folder in `parent` (a random name, mode 0700), open and flocked: its path
    and descriptor."""
    while True:
        folder = tempfile.mkdtemp(prefix=FETCHED_PREFIX, dir=parent)
        fd = _open_folder(folder)
        # blocks while a starting run that took the flock first removes the folder (remove_left)
        fcntl.flock(fd, fcntl.LOCK_EX)
        with suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.lstat(folder)):
                return folder, fd
        os.close(fd)  # removed before it was flocked: another is made


def _open_folder(path: str) -> int:
    return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)


def remove_left(folder: str) -> None:
    """Remove the spools dead runs left in `folder` (see above): the folders of this user named
    FETCHED_PREFIX and more whose flock is free, never through a link (the folder opened with
    O_NOFOLLOW, rmtree's own check within); a live run's (its flock held), another user's, and
    anything else so named (a file, a link) stay. Best effort: one that cannot be removed stays
    too (for the next run to try)."""
    try:
        with os.scandir(folder) as entries:
            left = [entry.path for entry in entries if entry.name.startswith(FETCHED_PREFIX)
                    and entry.is_dir(follow_symlinks=False)]  # fmt: skip
    except OSError:
        return
    for path in left:
        try:
            fd = _open_folder(path)
        except OSError:
            continue
        try:
            if os.fstat(fd).st_uid != os.getuid():
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live run's
            shutil.rmtree(path, ignore_errors=True)
        finally:
            os.close(fd)


def _encoded(url: str) -> bytes:
    return url.encode("utf-8", "surrogatepass")


def _read_bounded(fd: int, size: int) -> bytes:
    """The `size` bytes fstat saw of the file open at `fd`, never more (it may have grown)."""
    chunks, total = [], 0
    while total < size and (chunk := os.read(fd, size - total)):
        chunks.append(chunk)
        total += len(chunk)
    return b"".join(chunks)
