"""Where a manifest's images are read from: `ImageRoot`, a Storage over the root folder of a
manifest's relative paths that reads an absolute path or URL through a storage made for its
folder, and an http(s) URL through the workers' fetcher (or from what --dedup fetched, kept
in a UrlSpool); each image's size at scan (`ImageSizes`); where the scan listed each URL
(`UrlRows`, for failures.jsonl)."""

from __future__ import annotations

import errno
import itertools
import os
import posixpath
import stat
import threading
from array import array
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING

from shardpack.errors import shortened
from shardpack.storage import storage_at  # the package picks the store a path names
from shardpack.storage.base import Blob, Entry, Files, NextFiles, Storage
from shardpack.storage.locations import is_data_url, is_url, joined, normal
from shardpack.storage.readahead import ReadAhead
from shardpack.storage.spelt import LOOKED_FOR, how_spelt, spelt_otherwise
from shardpack.storage.srcfiles import not_regular
from shardpack.storage.urlpolicy import FetchPolicy, is_web_url, refused_scheme

if TYPE_CHECKING:
    import numpy as np

    from shardpack.storage.fetch import Fetcher, Prefetch
    from shardpack.storage.remote import ObjectsAhead
    from shardpack.storage.urlspool import UrlSpool

# What the planner takes an http(s) URL's image to weigh, unfetched: a guess at a web photo's
# size (img2dataset's 10,000 a shard would be ~1 GB of originals); 1,024 make a 128MiB shard.
URL_BYTES = 128 << 10

# Why a URL list's row naming anything but an http(s) URL is refused: a list of strangers'
# URLs must not reach this machine's files or the user's object stores.
NOT_WEB = ("not an http(s) URL in a URL list (a list naming http(s) URLs is fetched over "
           "http(s) only); give its http(s) URL, or list local and object-store images in a "
           "manifest of their own")  # fmt: skip
# Why a URL list's row naming a data: URL is refused: it is an image, not where one is.
INLINE = ("a data: URL, which holds its image inline, but shardpack packs images by their "
          "address; decode it to a file and list the file in a manifest of its own")  # fmt: skip

# This process's next shard, fetching while its last one waits for retries: (the key its
# reading names it by, its Prefetch), started by the last reading's `then`.
_started: tuple[object, Prefetch] | None = None
# Readings of a root share its Fetcher (the --dedup pass reads on threads): the last to end
# closes it, not the first (its close cut the others' requests, failed as "stopped").
_SHARING = threading.Lock()
# How an image's file is read ahead (ImageRoot._kind): an http(s) URL's by a Prefetch, a file on
# this machine's disk's by a ReadAhead, an object in a store's by an ObjectsAhead.
_WEB, _DISK, _STORE = "web", "disk", "store"
_WALKED = 16  # files a shard's walk (_ByKind) takes at a time: its lock's cost shared by them


class ImageUnusable(Exception):
    """The image a manifest row names cannot be read; the message says which and why."""


def _open_root(root: str) -> int | None:
    """The folder of relative image paths, open to stat them from (no path walk per image); None
    when it cannot be opened (each stat then reports why)."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def _image_size(root: str, path: str, root_fd: int | None, look: bool = False) -> int:
    """The size of the image file at path (under root unless absolute); links are followed, but
    only to a regular file. With `look`, a missing one is looked for under another spelling
    (spelt: case, Unicode form), and the reason says where."""
    try:
        st = (
            os.stat(path, dir_fd=root_fd)
            if root_fd is not None
            else os.stat(os.path.join(root, path))
        )
    except OSError as e:
        spelt = spelt_otherwise(root, path) if look and e.errno == errno.ENOENT else None
        how = "" if spelt is None else how_spelt(path, spelt)
        raise ImageUnusable(f"image {os.path.join(root, path)}: {e.strerror}{how}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ImageUnusable(f"image {os.path.join(root, path)}: {not_regular(st.st_mode)}")
    return st.st_size


class ImageRoot(Storage):
    """Where a manifest's images are read from (the reading half of a Storage): a relative
    path under the manifest's root folder (or --root), or an absolute path or URL through a
    storage made for its folder with the same options; an http(s) URL is fetched under the
    FetchPolicy given (storage.fetch). Pickles for the workers."""

    def __init__(
        self,
        base: Storage,
        options: Mapping[str, object] | None = None,
        policy: FetchPolicy | None = None,
    ) -> None:
        self.base = base
        self.options = dict(options or {})
        self.policy = policy or FetchPolicy()
        self.root = base.root
        self._climbs = is_url(base.root)  # "../x" under a URL: resolved in the URL
        self._web = is_web_url(base.root)  # relative paths are URLs too
        self._on_this_disk = base.local_path() is not None  # and so are relative paths' files
        self._elsewhere: dict[str, Storage] = {}  # folder -> its storage
        self._fetcher: Fetcher | None = None  # made where first needed: threads, locks
        self._readings = 0  # readings under way, which share the Fetcher
        self._workers = 1  # the workers' worth of requests they fetch as (reading_together)
        self.rows: UrlRows | None = None  # the scan's: where each URL was listed
        self.spool: UrlSpool | None = None  # keep_fetched's: URLs fetched once
        self._objects: UrlSpool | None = None  # keep_fetched's, objects=True: its stores' too

    def __getstate__(self) -> dict:  # (the rows are the packing process's: no worker's)
        return {**self.__dict__, "_fetcher": None, "_elsewhere": {}, "rows": None,
                "_readings": 0, "_workers": 1}  # fmt: skip

    def rows_of(self, urls: Iterable[str]) -> dict[str, tuple[str, int]]:
        """(manifest file name, line or row) of each of these http(s) URL items the scan
        listed ({} in a process the root was pickled to)."""
        return {} if self.rows is None else self.rows.of(urls)

    def listed_urls(self) -> bool:
        """Whether the scan listed an http(s) URL (False in a process the root was pickled
        to)."""
        return self.rows is not None

    def __repr__(self) -> str:
        return f"ImageRoot({self.base!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImageRoot) and (other.base, other.options) == (
            self.base,
            self.options,
        )

    def __hash__(self) -> int:
        return hash(self.base)

    def web_url(self, name: str) -> str | None:
        """The http(s) URL an image path names (itself, or under an http(s) root), else None."""
        if is_web_url(name):
            return name
        if not self._web:
            return None
        url = joined(self.root, name)
        return url if is_web_url(url) else None

    def lists_urls(self, paths: Iterable[str]) -> bool:
        """Whether rows naming these image paths are a URL list: one of them an http(s) URL."""
        return any(self.web_url(path) is not None for path in paths)

    def fetcher(self) -> Fetcher:
        """This process's Fetcher of image URLs."""
        with _SHARING:
            if self._fetcher is None:
                from shardpack.storage.fetch import Fetcher  # the network stack: workers only

                self._fetcher = Fetcher(self.policy, self._workers)
            return self._fetcher

    @contextmanager
    def reading_together(self, workers: int) -> Iterator[None]:
        """Within, the readings share a Fetcher of `workers` workers' per-host caps (each
        reading's Prefetch has a worker's threads)."""
        with _SHARING:
            self._workers = max(1, workers)
        try:
            yield
        finally:
            with _SHARING:
                self._workers = 1

    def keep_fetched(self, spool: UrlSpool | None, objects: bool = False) -> None:
        """The spool of its http(s) URLs, and with `objects` of the objects its stores read
        (each store asked: a disk keeps nothing)."""
        self.spool, self._objects = spool, spool if objects else None
        for storage in (self.base, *self._elsewhere.values()):
            storage.keep_fetched(self._objects, objects=True)

    def stop_reading(self) -> None:
        """Close the Fetcher the readings under way share: their requests in flight fail at
        once, and each next one too (the last reading to end lets it go)."""
        with _SHARING:
            fetcher = self._fetcher
        if fetcher is not None:
            fetcher.close()

    def _fetched(self, url: str, limit: int, get: Callable[[str, int], bytes]) -> bytes:
        """`url`'s body, at most `limit` bytes: through the spool where one keeps them."""
        return get(url, limit) if self.spool is None else self.spool.fetched(url, limit, get)

    def where(self, name: str) -> tuple[Storage, str]:
        """The storage an image path is read from, and its name there."""
        if self._climbs and (name == ".." or name.startswith("../")):
            name = normal(f"{self.root}/{name}")  # an object store has no "..": climb here
        if is_url(name):
            folder, _, file = name.rpartition("/")
        elif os.path.isabs(name):
            folder, file = os.path.split(name)
        else:
            return self.base, name
        storage = self._elsewhere.get(folder)
        if storage is None:
            storage = self._elsewhere[folder] = storage_at(folder, self.options)
            storage.keep_fetched(self._objects, objects=True)
        return storage, file

    def path(self, name: str = "") -> str:
        if name and (url := self.web_url(name)) is not None:
            return url
        storage, name = self.where(name)
        return storage.path(name)

    def local_path(self, name: str = "") -> str | None:
        if name and self.web_url(name) is not None:
            return None
        storage, name = self.where(name)
        return storage.local_path(name)

    def kind(self, name: str = "") -> str | None:
        storage, name = self.where(name)
        return storage.kind(name)

    def read(self, name: str, limit: int) -> bytes:
        if (url := self.web_url(name)) is not None:
            return self._fetched(url, limit, lambda url, limit: self.fetcher().get(url, limit))
        storage, name = self.where(name)
        return storage.read(name, limit)

    def read_is_request(self, name: str) -> bool:
        if self.web_url(name) is not None:
            return True
        storage, name = self.where(name)
        return storage.read_is_request(name)

    def read_stamped(self, name: str, limit: int) -> tuple[bytes, tuple[int, int] | None]:
        """read(), with the stamp of a file where its store gives one (a URL has none)."""
        if self.web_url(name) is not None:
            return self.read(name, limit), None
        storage, name = self.where(name)
        return storage.read_stamped(name, limit)

    @property
    def stamps_listed(self) -> bool:
        """Whether an image it has read or stamped so far (the manifest's folder, or an object
        store a row names: the scan asked each of its images') takes its stamp from a listing:
        a CSV on this disk naming s3:// images is stamped as a SRC in the bucket is."""
        return self.base.stamps_listed or any(  # (a copy: ObjectsAhead's thread adds to it)
            storage.stamps_listed for storage in list(self._elsewhere.values())
        )

    def stamp(self, name: str) -> tuple[int, int] | None:
        if self.web_url(name) is not None:
            return None
        storage, name = self.where(name)
        return storage.stamp(name)

    def stamps(self, names: Iterable[str]) -> list[tuple[int, int] | None]:
        """stamp() of each, asked of each store in one call (a URL has none)."""
        found: list[tuple[int, int] | None] = []
        asked: dict[int, tuple[Storage, list[int], list[str]]] = {}  # id -> it, where, names
        for name in names:
            found.append(None)
            if self.web_url(name) is None:
                storage, name = self.where(name)
                at = asked.setdefault(id(storage), (storage, [], []))
                at[1].append(len(found) - 1)
                at[2].append(name)
        for storage, where, asked_names in asked.values():
            for i, stamp in zip(where, storage.stamps(asked_names), strict=True):
                found[i] = stamp
        return found

    @contextmanager
    def reading(
        self, files: Files, limit: int, key: object = None, then: NextFiles | None = None
    ) -> Iterator[Storage]:
        """Itself, reading each of `files` through the read-ahead of its kind (_Reading): the
        http(s) URLs many at a time (Prefetch), the files on this machine's disk asked of it
        ahead once the page cache lost them (ReadAhead), as a folder's are, the objects in a
        store fetched many at once (ObjectsAhead), as a folder's in a store are. Once each
        URL's first try has started, `then()` names the next files to read (their key, and
        them) and their URLs' fetching starts, with the same connections; the reading whose
        `key` is theirs takes it over (any other closes it)."""
        global _started
        with _SHARING:
            self._readings += 1
        try:
            taken, _started = _started, None
            if taken is not None:
                self._fetcher = taken[1].fetcher  # its connections, kept
                if taken[0] != key:  # the next files were another reading's after all
                    taken[1].close(fetcher=False)
            prefetch = taken[1] if taken is not None and taken[0] == key else None
            reading = _Reading(self, files, limit, prefetch, then)
            ended = False
            try:
                yield reading
                ended = True
            finally:
                reading.close(ended)
        finally:
            self._ended()

    def _ended(self) -> None:
        """A reading ended: the last of those under way closes the Fetcher (its connections),
        unless the next files' fetching, started, goes on with it."""
        with _SHARING:
            self._readings -= 1
            fetcher = self._fetcher if not self._readings and _started is None else None
            if fetcher is not None:
                self._fetcher = None
        if fetcher is not None:
            fetcher.close()

    def _kind(self, name: str) -> str | None:
        """How the file `name` names is read ahead: _WEB, _DISK or _STORE; None: as it comes (a
        NUL in it: a streamed list's bad row; a path whose store cannot be made: its read
        says why)."""
        if self._on_this_disk and ":" not in name and name[:1] != "/" and "\0" not in name:
            return _DISK  # a relative path (no scheme: no ':'), the disk's as its root is
        if self.web_url(name) is not None:
            return _WEB
        if "\0" in name:
            return None
        try:
            storage, name = self.where(name)
            if storage.local_path(name) is not None:
                return _DISK
            return _STORE if storage.read_is_request(name) else None
        except Exception:  # the read raises it where the worker handles it
            return None

    def _in_store(self, name: str) -> tuple[Storage, str] | None:
        """The storage an image path that names no http(s) URL is read from, and its name
        there (ObjectsAhead's `where`)."""
        return None if "\0" in name or self.web_url(name) is not None else self.where(name)

    def _on_disk(self, name: str) -> str | None:
        """The path of `name`'s file on this machine's disk; None for a URL, an object, or a
        name no file has (a NUL in it: a streamed list's bad row)."""
        return None if "\0" in name else self.local_path(name)

    def _prefetch(self, files: Files, limit: int, *window) -> Prefetch | None:
        """A Prefetch of the http(s) URLs among `files` the spool holds not (None: there are
        none)."""
        held = self.spool.holds if self.spool is not None else lambda url: False
        urls = (url for name, _ in files
                if (url := self.web_url(name)) is not None and not held(url))  # fmt: skip
        first = next(urls, None)
        if first is None:
            return None
        from shardpack.storage.fetch import Prefetch  # the network stack: workers only

        return Prefetch(self.fetcher(), itertools.chain((first,), urls), limit, *window)

    def _start(self, then: NextFiles, ahead: Prefetch) -> None:
        """Start fetching the files `then` names next, in what `ahead` leaves of its window."""
        global _started
        if (following := then()) is not None:
            key, files = following
            started = self._prefetch(files, ahead.limit, ahead.leaves())
            _started = None if started is None else (key, started)

    def open(self, name: str) -> Blob:
        storage, name = self.where(name)
        return storage.open(name)


def close_started() -> None:
    """Close the next files' Prefetch, if one was started, and its connections (a worker
    ending)."""
    global _started
    taken, _started = _started, None
    if taken is not None:
        taken[1].close()


class UrlRows:
    """Where a manifest listed each http(s) URL item: its file and line (or Parquet row), for
    failures.jsonl. Kept as sorted 64-bit hashes of the URLs beside their lines, 20 bytes a
    URL where a dict takes ~100; two URLs of one hash name no row."""

    def __init__(self) -> None:
        self.names: list[str] = []  # each manifest file's name
        self._hashes, self._lines, self._files = array("q"), array("q"), array("i")
        self._sorted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def file(self, path: str) -> None:
        """The next manifest file's rows follow."""
        self.names.append(posixpath.basename(path))

    def add(self, file: int, url: str, line: int) -> None:
        self._hashes.append(hash(url))
        self._lines.append(line)
        self._files.append(file)

    def done(self) -> UrlRows | None:
        """Sorted for look-ups (None: no URL was listed)."""
        import numpy as np  # here: not for pack --help

        if not self._hashes:
            return None
        hashes = np.frombuffer(self._hashes, dtype=np.int64)
        order = np.argsort(hashes, kind="stable")
        self._sorted = (hashes[order], np.frombuffer(self._lines, dtype=np.int64)[order],
                        np.frombuffer(self._files, dtype=np.int32)[order])  # fmt: skip
        self._hashes, self._lines, self._files = array("q"), array("q"), array("i")
        return self

    def of(self, urls: Iterable[str]) -> dict[str, tuple[str, int]]:
        """(file name, line) of each URL listed once under its hash."""
        import numpy as np  # here: not for pack --help

        if self._sorted is None:
            return {}
        hashes, lines, files = self._sorted
        urls = list(urls)
        wanted = np.array([hash(url) for url in urls], dtype=np.int64)
        first = np.searchsorted(hashes, wanted, "left")
        last = np.searchsorted(hashes, wanted, "right")
        return {url: (self.names[files[i]], int(lines[i]))
                for url, i, j in zip(urls, first.tolist(), last.tolist(), strict=True)
                if j - i == 1}  # fmt: skip


class _ByKind:
    """A shard's files walked once, lazily, and handed out by kind (`kind_of`'s, of `kinds`;
    another is read as it comes): each kind's read-ahead takes its own files in their order,
    on any thread, and a file the walk met for another is kept for that one until taken (a
    shard's files at most, where one kind's read-ahead runs far ahead of another's). `met` is
    the kinds the walk has met, in the order it met them."""

    def __init__(
        self, files: Files, kind_of: Callable[[str], str | None], kinds: tuple[str, ...]
    ) -> None:
        self._files: Iterator[tuple[str, int]] | None = iter(files)
        self._kind_of = kind_of
        # each kind's files walked, not yet taken (a deque's append and popleft are atomic:
        # the lock is the walk's alone)
        self._kept: dict[str, deque[tuple[str, int]]] = {kind: deque() for kind in kinds}
        self.met: list[str] = []
        self._lock = threading.Lock()

    def meet(self, kind: str | None = None) -> None:
        """Walk on until the walk has met `kind` (None: any kind handed out), or to the end."""
        with self._lock:
            while (kind not in self.met if kind else not self.met) and self._walk():
                pass

    def of(self, kind: str) -> Iterator[tuple[str, int]]:
        """The files of `kind`, in order."""
        kept = self._kept[kind]
        while True:
            if not kept:
                with self._lock:
                    while not kept and self._walk():
                        pass
                if not kept:
                    return
            yield kept.popleft()

    def _walk(self) -> bool:
        """Under the lock: the next files (_WALKED at most) kept for their kinds; False at the
        end, none left."""
        if self._files is None:
            return False
        walked = 0
        try:
            for file in itertools.islice(self._files, _WALKED):
                walked += 1
                kind = self._kind_of(file[0])
                if kind in self._kept:  # (one of no kind handed out is read as it comes)
                    if kind not in self.met:
                        self.met.append(kind)
                    self._kept[kind].append(file)
        except Exception:  # naming a file failed: the worker's reads say why
            walked = 0
        if walked < _WALKED:
            self._files = None  # the end
        return walked > 0


class _Reading:
    """An ImageRoot reading a shard's files, each through the read-ahead of its kind, made as
    the walk of the files (_ByKind) first meets that kind: the http(s) URLs through a Prefetch
    (`prefetch`: one started for these files already), the files on this machine's disk through
    a ReadAhead, told as the worker starts on each, the objects in a store through an
    ObjectsAhead. A manifest naming local files, objects and URLs (a folder of lists, one of
    each) reads each as a manifest of that kind alone does."""

    def __init__(
        self,
        images: ImageRoot,
        files: Files,
        limit: int,
        prefetch: Prefetch | None,
        then: NextFiles | None,
    ) -> None:
        self.images, self.limit, self._then = images, limit, then
        self.prefetch: Prefetch | None = None
        self._disk: ReadAhead | None = None
        self._objects: ObjectsAhead | None = None
        kinds = (_DISK, _STORE) if prefetch is not None else (_WEB, _DISK, _STORE)
        self._files = _ByKind(files, images._kind, kinds)
        self._made = 0  # of the kinds met, those whose read-ahead is made
        self._ready = {_WEB} if prefetch is not None else set()  # those kinds
        try:
            if prefetch is not None:
                self._adopt(prefetch)
            self._files.meet()
            self._make()
        except BaseException:  # Ctrl-C while the first requests start: they end now too
            self.close(False)
            raise

    def _make(self) -> None:
        """The read-ahead of each kind the walk met since the last call."""
        while self._made < len(met := self._files.met):
            kind = met[self._made]
            self._made += 1
            self._ready.add(kind)
            files = self._files.of(kind)
            if kind == _WEB:
                prefetch = self.images._prefetch(files, self.limit)
                if prefetch is not None:
                    self._adopt(prefetch)
            elif kind == _DISK:
                self._disk = ReadAhead(files, self.images._on_disk, self.limit)
            else:
                from shardpack.storage.remote import ObjectsAhead  # (a store's: imported)

                self._objects = ObjectsAhead(self.images, files, self.limit, self.images._in_store)

    def _adopt(self, prefetch: Prefetch) -> None:
        self.prefetch = prefetch
        then = self._then
        prefetch.adopt(None if then is None else lambda: self.images._start(then, prefetch))

    def read(self, name: str, limit: int) -> bytes:
        kind = self._reading(name)
        if kind == _WEB and self.prefetch is not None:
            url = self.images.web_url(name)
            return self.images._fetched(url, limit, self.prefetch.read)
        if kind == _STORE and self._objects is not None:
            return self._objects.read(name, limit)
        return self.images.read(name, limit)

    def read_stamped(self, name: str, limit: int) -> tuple[bytes, tuple[int, int] | None]:
        kind = self._reading(name)
        if kind == _WEB and self.prefetch is not None:
            return self.read(name, limit), None  # through the Prefetch (a URL has no stamp)
        if kind == _STORE and self._objects is not None:
            return self._objects.read_stamped(name, limit)
        return self.images.read_stamped(name, limit)

    def _reading(self, name: str) -> str | None:
        """The kind of the file the worker starts on now, its read-ahead made if the walk had
        not met its kind yet (a ReadAhead is told the worker starts on one of its own)."""
        if self._made < len(self._files.met):  # met by another read-ahead's walk
            self._make()
        kind = self.images._kind(name)
        if kind is not None and kind not in self._ready:  # its read-ahead starts with it
            self._files.meet(kind)
            self._make()
        if kind == _DISK and self._disk is not None:
            self._disk.read()
        return kind

    def close(self, ended: bool) -> None:
        """Stop every read-ahead; unless the reading `ended` (an error, Ctrl-C), the next files'
        fetching too."""
        try:
            if self.prefetch is not None:
                self.prefetch.close(fetcher=False)  # (waits out a `then` running: none after)
            if not ended:
                close_started()
        finally:
            for ahead in (self._disk, self._objects):
                if ahead is not None:
                    ahead.close()

    def __getattr__(self, attribute: str):
        return getattr(self.images, attribute)


class ImageSizes:
    """Each image's size at scan: a file on a disk stat'ed (links followed, but only to a
    regular file); an object's from the listing of its folder (a request a folder, not one an
    image); with `urls_only` (a URL list), any path but an http(s) URL refused (NOT_WEB)."""

    def __init__(self, images: ImageRoot, urls_only: bool = False) -> None:
        self.images, self.urls_only = images, urls_only
        root = images.base.local_path()
        self.root_fd = _open_root(root) if root is not None else None
        self.listings: dict[tuple[str, str], dict[str, Entry] | str] = {}
        self.looked = 0  # missing images looked for under another spelling

    def of(self, path: str) -> int:
        if self.images.web_url(path) is not None:
            return URL_BYTES  # no request a row: the worker's read bounds it
        if (why := refused_scheme(path) or self._not_web(path)) is not None:
            raise ImageUnusable(f"image {shortened(path)}: {why}" if is_data_url(path)
                                else f"image {path}: {why}")  # fmt: skip
        storage, name = self.images.where(path)
        if (root := storage.local_path()) is not None:
            fd = self.root_fd if storage is self.images.base else None
            try:
                return _image_size(root, name, fd, look=self.looked < LOOKED_FOR)
            except ImageUnusable:
                self.looked += 1
                raise
        if not storage.lists_sizes:
            try:
                return storage.size(name)
            except OSError as e:
                raise ImageUnusable(f"image {storage.path(name)}: {e.strerror or e}") from None
        folder, _, file = name.rpartition("/")
        listing = self.listings.get((storage.root, folder))
        if listing is None:
            try:
                listing = {entry.name: entry for entry in storage.listdir(folder)}
            except FileNotFoundError:
                listing = {}
            except OSError as e:
                listing = f"cannot list its folder ({e})"
            self.listings[storage.root, folder] = listing
        entry = listing if isinstance(listing, str) else listing.get(file)
        if entry is None or isinstance(entry, str):
            raise ImageUnusable(
                f"image {storage.path(name)}: {entry or 'No such file or directory'}"
            )
        if entry.is_dir:
            raise ImageUnusable(f"image {storage.path(name)}: {not_regular(stat.S_IFDIR)}")
        return entry.size

    def _not_web(self, path: str) -> str | None:
        """Why a URL list refuses a row naming `path`, no http(s) URL (INLINE, NOT_WEB)."""
        if not self.urls_only:
            return None
        return INLINE if is_data_url(path) else NOT_WEB

    def close(self) -> None:
        if self.root_fd is not None:
            os.close(self.root_fd)


def missing_root(root: str) -> str | None:
    """Why a local folder of a manifest's images is none ("no such folder", "is not a folder");
    None for a folder, or a URL (an object store's folder is a prefix: it need not exist)."""
    if is_url(root) or os.path.isdir(root):
        return None
    return "is not a folder" if os.path.exists(root) else "no such folder"
