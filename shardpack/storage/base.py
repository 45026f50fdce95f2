"""What a store is: the `Storage` interface every store implements, and the small types it
reads and writes through (Entry, Blob, HashingBlob, Sink, JournalWriter)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, NamedTuple

from shardpack.storage.atomic import HASH_CHUNK
from shardpack.storage.urlspool import remove_left

if TYPE_CHECKING:
    from shardpack.storage.urlspool import UrlSpool

# What a reading reads (each file's name, and the size its listing gave), and what it may ask
# for the files its process reads next: their key, and them (None: none)
Files = Iterable[tuple[str, int]]
NextFiles = Callable[[], tuple[object, Files] | None]

# Bytes a copy reads at once: a few requests a shard on a store, little memory.
COPY_CHUNK = 8 << 20

# The extra that brings each scheme's filesystem package (what to tell a user to install).
EXTRAS = {"s3": "s3", "s3a": "s3", "gs": "gcs", "gcs": "gcs"}


def truth(value: object) -> bool | None:
    """The boolean a filesystem option's text says, in any case (true, False, TRUE); else None."""
    return {"true": True, "false": False}.get(value.lower()) if isinstance(value, str) else None


class Entry(NamedTuple):
    """One name in a folder listing."""

    name: str  # relative to the folder listed
    is_dir: bool
    size: int  # bytes; 0 for a folder


class Folder(NamedTuple):
    """One folder met by Storage.walk_folders."""

    name: str  # relative to the folder walked, "" for itself
    files: list[str]  # its files (links to a regular file and dangling links too), sorted
    sizes: dict[str, int]  # the sizes the listing gave (on a disk only links'): ask size()
    folders: list[str]  # its folders to walk, sorted: remove a name to leave it unwalked
    others: list[tuple[str, str]]  # (name, why it is not read): FIFOs, devices, sockets
    error: OSError | None = None  # why it could not be listed (all lists empty)
    same_as: str | None = None  # a link to this folder, met before as `same_as`: not walked


class Blob:
    """A file or object open for reading at any offset, every read bounded by the caller."""

    name: str  # the full path or URL, for messages
    size: int

    def pread(self, size: int, offset: int) -> bytes:
        """Up to `size` bytes from `offset` (fewer only at the end)."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Blob:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class HashingBlob(Blob):
    """A Blob that feeds `digest` every byte of the file in order as reads reach it, so that a
    reader going front to back hashes the file in the same pass (bytes it skips, such as tar
    padding, are read for the hash); finish() hashes whatever reading left."""

    def __init__(self, blob: Blob, digest) -> None:
        self.blob, self.digest, self.hashed = blob, digest, 0
        self.name, self.size = blob.name, blob.size

    def pread(self, size: int, offset: int) -> bytes:
        while self.hashed < offset and self._feed(
            self.blob.pread(min(offset - self.hashed, HASH_CHUNK), self.hashed)
        ):
            pass
        data = self.blob.pread(size, offset)
        if offset <= self.hashed < offset + len(data):
            self._feed(memoryview(data)[self.hashed - offset :])
        return data

    def _feed(self, data) -> int:
        self.digest.update(data)
        self.hashed += len(data)
        return len(data)

    def finish(self) -> None:
        """Hash the rest of the file."""
        while self.pread(HASH_CHUNK, self.hashed):
            pass

    def close(self) -> None:
        self.blob.close()


class Handover(NamedTuple):
    """A sink's file written and closed, not yet durable nor final: Sink.hand_over's."""

    temp: str  # the hidden temporary file written
    final: str  # the name it takes


class Sink:
    """A new file or object being written; it appears under its final name only on commit().

    `fd` is set where the bytes go to a local file a library may write itself (by path:
    /proc/self/fd/N); such a sink uploads that file at commit. `name` is what messages name
    while it is written.
    """

    name: str
    fd: int = -1

    def write(self, data: bytes) -> int:
        raise NotImplementedError

    def write_parts(self, parts: list[bytes]) -> None:
        """Write these byte strings one after another (a disk's sink: one syscall, no copy)."""
        for part in parts:
            self.write(part)

    def commit(self) -> None:
        """Make the bytes durable and final under the name asked for."""
        raise NotImplementedError

    def hand_over(self) -> Handover | None:
        """Finish what only this process can, and return what another process of this machine
        commits with Storage.complete (a disk's file: its fsync and rename, which the packing
        process does while the worker that wrote it goes on); None: committed here."""
        self.commit()
        return None

    def discard(self) -> None:
        """Drop what was written: nothing appears under the final name. Safe to repeat."""
        raise NotImplementedError


class JournalWriter:
    """Completion records, one line each; see Storage.journal."""

    name: str  # the journal's path or URL, for messages

    def add(self, line: bytes) -> None:
        raise NotImplementedError

    def begin(self) -> None:
        """Replace the old journal with the head now, before the first line."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Storage:
    """A folder or URL prefix that shardpack reads from or writes into."""

    root: str  # as messages show it: an absolute path, or a URL
    in_process: bool = False  # only this process sees it (memory://): no worker may write it
    # Whether a folder's listing gives its files' sizes (one request a folder); else size()
    lists_sizes: bool = True
    how_to_share: str  # the fix to tell a user when Dask workers do not see it as we do
    # Whether stamp() comes from a folder's listing and a read takes none (an object store):
    # a pack takes the stamps of what its workers read from listings, before the reads
    stamps_listed: bool = False

    # -- names -----------------------------------------------------------------------------
    def path(self, name: str = "") -> str:
        """The full path or URL of `name`, for messages and for readers that take paths."""
        raise NotImplementedError

    def child(self, name: str) -> Storage:
        """The same storage rooted at `name` (a subfolder)."""
        raise NotImplementedError

    def local_path(self, name: str = "") -> str | None:
        """The path of `name` on this machine's disk, for code that opens or lists it itself
        (os.scandir, TensorFlow); None where it has none (an object store)."""
        return None

    def tf_path(self, name: str = "") -> str | None:
        """The path TensorFlow's own file system opens for `name` (it reads the file itself,
        off the GIL); None where it cannot, and the caller streams the bytes instead."""
        return None

    def holds(self, other: Storage) -> bool:
        """Whether `other` is rooted at this root or below it: on a disk their real paths are
        compared (no link hides it); a URL by its prefix."""
        mine, theirs = self.local_path(), other.local_path()
        if mine is not None and theirs is not None:
            here, there = os.path.realpath(mine), os.path.realpath(theirs)
        elif mine is None and theirs is None:
            here, there = self.root, other.root
        else:
            return False  # a disk holds no URL's objects, nor a URL a disk's files
        return (there + "/").startswith(here.rstrip("/") + "/")

    # -- reading ---------------------------------------------------------------------------
    def kind(self, name: str = "") -> str | None:
        """'file', 'dir', or None when nothing is there (links followed on a local disk)."""
        raise NotImplementedError

    def listdir(self, name: str = "") -> list[Entry]:
        """The entries of a folder, sorted by name, as they are: a link is neither a folder nor
        a file to follow (is_dir False, size 0)."""
        raise NotImplementedError

    def entry_names(self, name: str = "") -> Iterator[tuple[str, bool]]:
        """(name, is a folder) of each entry of a folder, in the store's own order, as
        listdir tells them, without its order, sizes and Entry each: on a disk a size is a stat
        a file, and a source recognising SRC lists folders it never reads (an image dataset's
        class folders; half the cost of listing one)."""
        return ((e.name, e.is_dir) for e in self.listdir(name))

    def walk(self, name: str = "") -> Iterator[Entry]:
        """Every file below a folder, names relative to it, in sorted order."""
        raise NotImplementedError

    def walk_folders(self, name: str = "") -> Iterator[Folder]:
        """Every folder below `name`, itself first, each once and its subfolders in name order
        after it (depth first), for a source to walk SRC: links are followed to folders and
        regular files, never twice to one folder (a second way to a folder is met as a Folder
        with `same_as` only, so that no link loops; the folders of one listing are claimed
        before any is walked, and before the links among them, so a link never takes a real
        folder's place). Nothing is read or opened but folders; a file's size comes where the
        listing gives it."""
        raise NotImplementedError

    def listing_once(self) -> AbstractContextManager[None]:
        """A block in which this store (and each child() of it made in the block) lists each
        folder once for entry_names and walk_folders, for a scan: the sources recognising SRC
        list folders its walk lists again (the Hub layout's look into each class folder). A
        walk's top is kept until the block ends (the recognisers ask it again and again); a
        folder below it goes as the walk passes it, the last to ask: the tree's names are not
        held. A store that keeps no listing (the default) lists them anew each time."""
        return nullcontext()

    def parent(self) -> Storage | None:
        """The storage rooted at the folder above this root; None at the top (a disk's /, a
        bucket)."""
        return None

    def size(self, name: str) -> int:
        """The bytes of one file of SRC, asked of the file itself (0 where it does not say)."""
        raise NotImplementedError

    def sizes(self, names: Iterable[str]) -> list[int | None]:
        """size() of each of these files, in order; None for one that cannot be asked (gone
        since it was listed)."""
        found: list[int | None] = []
        for name in names:
            try:
                found.append(self.size(name))
            except OSError:
                found.append(None)
        return found

    def link_target(self, name: str = "") -> str | None:
        """Where `name` leads, where it is a symbolic link (every link on the way followed);
        None where it is none (an object store has none)."""
        return None

    def lexists(self, name: str = "") -> bool:
        """Whether anything is at `name`: on a disk a link counts unfollowed (kind() follows
        it), so that reading it refuses it by name rather than as a missing file."""
        return self.kind(name) is not None

    def stamp(self, name: str) -> tuple[int, int] | None:
        """(size, mtime in ns) of a regular file of SRC (links followed, as reads follow them),
        asked without reading it; None where the store cannot say so cheaply (an object
        store: see stamps()) or it is no regular file."""
        return None

    def stamps(self, names: Iterable[str]) -> list[tuple[int, int] | None]:
        """stamp() of each of these files, in order; an object store's from the listing of
        each of their folders, listed once a call (a request a thousand objects, where one
        object's stamp would be a request: its stamp() has none), where the listing gives a
        modification time (S3's LastModified, an mtime)."""
        return [self.stamp(name) for name in names]

    def identity(self, name: str) -> tuple[int, ...] | None:
        """What tells this file from any other and from itself rewritten (a disk's device,
        inode, size and mtime; the link itself, not followed), for a cache of what was read
        from it; None where the store has no such cheap answer."""
        return None

    def read(self, name: str, limit: int) -> bytes:
        """A whole file of SRC of at most `limit` bytes (srcfiles.FileTooLarge past it,
        unread). On a local disk, links are followed, but only to a regular file."""
        raise NotImplementedError

    def read_is_request(self, name: str) -> bool:
        """Whether reading file `name` is a request to a server (an object of a store, an
        http(s) URL), where a disk's read is cheap and exact: a grow keeps the record OUT holds
        of such an item that it takes as unchanged, not read again (packing/kept.py)."""
        return False

    def read_stamped(self, name: str, limit: int) -> tuple[bytes, tuple[int, int] | None]:
        """read(), with the file's stamp as the read itself saw it before its first byte
        (stamp()'s (size, mtime in ns), from the opened file: no second look); None where the
        store has none."""
        return self.read(name, limit), None

    @contextmanager
    def reading(
        self, files: Files, limit: int, key: object = None, then: NextFiles | None = None
    ) -> Iterator[Storage]:
        """This storage, to read `files` (name, and the size its listing gave; each at most
        `limit` bytes) in this order. Where each request waits on the network (an object
        store), the next files are fetched ahead, several at once, while the caller works on
        the current one; one listed over `limit` is refused (FileTooLarge) unfetched. A store
        whose reads wait for retries (a URL list's) may call `then()` near the end for the
        next files of this process (a key, and them) and start fetching them: a reading with
        that `key` takes them over. Others ignore both."""
        yield self

    def reading_together(self, workers: int) -> AbstractContextManager[None]:
        """Within, the readings of up to `workers` threads at once (the --dedup pass) fetch as
        that many workers together: as many requests in flight, to one host as many as their
        per-host caps add up to, not more; a store with no such cap (a disk, an object store)
        ignores it."""
        return nullcontext()

    def keep_fetched(self, spool: UrlSpool | None, objects: bool = False) -> None:
        """From now on, keep in `spool` what this storage fetches over the network (an image
        URL's body, or why it gave none) and read what `spool` holds from it, never asking the
        network again (None: no more); with `objects`, an object store's objects too (a grow's
        compare: it hands the workers the stamps it listed before reading them, ShardSpec.listed,
        so that none noted is newer than the bytes kept). A disk's files, cheap and exact to
        read again, are never kept: a store that fetches nothing ignores it."""
        return None

    def stop_reading(self) -> None:
        """Cut the reads under way on other threads (a stopped run: Ctrl-C, SIGTERM): each
        fails at once, not when a stalled server's timeout ends; a store whose reads end by
        themselves (a disk, an object store) does nothing."""
        return None

    def open(self, name: str) -> Blob:
        """A file of OUT to read at offsets, streamed: nothing is fetched before it is asked
        for. No link is followed and nothing but a regular file is opened (OSError)."""
        raise NotImplementedError

    def sha256(self, name: str, size: int | None = None) -> str | None:
        """The sha256 of a file's bytes, streamed through open(); None, without reading a
        byte, when `size` is given and the file's size differs."""
        digest = hashlib.sha256()
        with HashingBlob(self.open(name), digest) as blob:
            if size is not None and blob.size != size:
                return None
            blob.finish()
        return digest.hexdigest()

    # -- writing ---------------------------------------------------------------------------
    def make_root(self) -> bool:
        """Create the root folder if missing; return whether it was created."""
        raise NotImplementedError

    def create(self, name: str, by_path: bool = False) -> Sink:
        """A Sink for a new file `name`; `by_path`: a library will write it through sink.fd."""
        raise NotImplementedError

    def complete(self, handed: Handover) -> None:
        """Commit a sink another process handed over (Sink.hand_over): durable, then final.

        Raises:
            OSError: it cannot be.
        """
        raise NotImplementedError

    def put(self, name: str, data: bytes) -> None:
        """Write a whole small file; it appears (or replaces the old one) only complete."""
        raise NotImplementedError

    def put_parts(self, name: str, parts: Iterable[bytes]) -> None:
        """put() of a file made a part at a time: a store that can take them as they come (a
        disk) never holds the whole; here, they are joined."""
        self.put(name, b"".join(parts))

    def make_folder(self, name: str) -> Storage:
        """The folder `name` made if missing (a store has none to make), as a Storage rooted
        there; a link or a file in its place is refused (OutputError), never written through."""
        return self.child(name)

    def link_or_copy(self, name: str, to: str) -> None:
        """`name`'s bytes under `to` as well, replacing a file there: a hard link where the
        store takes one, else a copy streamed through a Sink (final only when whole)."""
        sink = self.create(to)
        try:
            with self.open(name) as blob:
                offset = 0
                while chunk := blob.pread(COPY_CHUNK, offset):
                    sink.write(chunk)
                    offset += len(chunk)
            sink.commit()
        except BaseException:
            sink.discard()
            raise

    def remove(self, names: Iterable[str]) -> None:
        """Remove these files where they are plain files; missing ones are fine."""
        raise NotImplementedError

    def remove_partial(self, finals: Iterable[str]) -> list[str]:
        """Remove what a killed run left while writing these names (temporary files, open
        multipart uploads); return the final names that had some."""
        raise NotImplementedError

    def lock(self, created: bool = False) -> AbstractContextManager[None]:
        """Hold the root for one run; a second run is refused with an OutputError. `created`:
        the root was made by this run, and goes again if the run fails leaving it empty."""
        raise NotImplementedError

    def read_journal(self, cap: int, most: int) -> Iterable[bytes]:
        """The completion records an earlier run left, header first, as lines: up to `cap`
        bytes in all and `most` records after the header; none if there is no journal."""
        raise NotImplementedError

    def journal(self, head: list[bytes]) -> JournalWriter:
        """Start a new journal, replacing the old one only when the first line is added:
        `head` (the header, then records kept from before) is written with it."""
        raise NotImplementedError

    def remove_journal(self) -> None:
        """Remove the journal (a run that packed nothing leaves no plan to resume)."""
        raise NotImplementedError

    def scratch_folder(self) -> str:
        """A folder on this machine's disk for what a run of OUT keeps for itself until it ends
        (spilled facts, URLs fetched once): OUT's own on a disk, else the system's temporary
        folder."""
        return tempfile.gettempdir()

    def clear_scratch(self) -> None:
        """As a run starts: remove what dead runs kept for themselves in scratch_folder (the
        URLs --dedup fetched, urlspool.remove_left), never a live run's: OUT's own on a disk,
        every dead run's on this machine in the system's temporary folder."""
        remove_left(self.scratch_folder())

    def progress_folder(self) -> str | None:
        """A local folder where workers may leave progress files the parent can read, or
        None where there is none (the bar then moves a shard at a time)."""
        return None
