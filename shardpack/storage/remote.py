"""An fsspec URL as Storage: an object store keeps the local disk's guarantees its own way.

- A shard is streamed to the store while it is written, as an upload the store completes only
  at the end (S3 multipart, GCS resumable): nothing is under the final name before commit, and
  a failed shard aborts its upload. Filesystems without such uploads get an unnamed local
  spool file uploaded whole at commit; so does a file a library writes by path (ArrayRecord).
- The lock is an object created only if absent (S3 If-None-Match: *), and a dead run's taken
  over only if unchanged (S3 If-Match: its ETag). Where a filesystem has no conditional
  create or replace, fsspec checks then writes: two runs started (or taking a dead run's lock
  over) at the same instant could both pass (docs/scaling.md says so).
- The journal is one small object per finished shard, under OUT/.shardpack.journal.d/.
- A killed worker cannot abort its upload: the parent, and every later run, aborts the open
  multipart uploads under OUT for the names it writes (remove_partial).
"""

from __future__ import annotations

import collections
import datetime
import errno
import json
import math
import os
import queue
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager, suppress
from typing import TYPE_CHECKING

from shardpack.errors import OutputError, StorageError, install_hint
from shardpack.layout import JOURNAL_FOLDER, JOURNAL_HEAD, LOCK_NAME
from shardpack.storage.base import (
    EXTRAS,
    Blob,
    Entry,
    Files,
    Folder,
    JournalWriter,
    NextFiles,
    Sink,
    Storage,
    truth,
)
from shardpack.storage.failures import is_store_failure, said
from shardpack.storage.srcfiles import FileTooLarge, RefusedFile, over_the_limit

if TYPE_CHECKING:
    from shardpack.storage.urlspool import UrlSpool

_RECORD = re.compile(r"[0-9]{8,}\.json")  # a finished shard's record: _ObjectJournal's names
# Journal records read at most: one a shard, far more than any plan has; past them the shards
# are rewritten, as past a torn line. Counted from the listing, before anything is fetched.
_MOST_RECORDS = 100_000
# Schemes whose files are uploads the store completes only at commit (fsspec's
# AbstractBufferedFile over S3 multipart and GCS resumable uploads): streamed while written.
_STREAMING = frozenset({"s3", "s3a", "gs", "gcs"})
_PART = 8 << 20  # bytes per uploaded part: S3's minimum is 5 MiB
_CHUNK = 1 << 20  # bytes handed to the upload thread at a time
_QUEUED = 16  # chunks in flight to the upload thread: the most a worker runs ahead of it
_READ_BLOCK = 4 << 20  # a reader's read-ahead: records stream, a shard is never fetched whole
_LOCK_CAP = 4096
_DELETE_BATCH = 1000  # keys a DeleteObjects request takes at most (S3's limit)
# Source objects a worker fetches at once (concurrent range requests: s3fs's client holds 10
# connections unless max_pool_connections says more), as a sliding window: a request starts as
# soon as one ends, for the next object in the reads' order, while at most _AHEAD_OBJECTS are
# fetched or in flight past the one read, of at most _AHEAD_BYTES by their listed sizes (a slow
# object at the head holds up the reads, not the fetching of those behind it); a larger object
# is read as it comes (bandwidth, not the round trip, bounds it).
# `python -m benchmarks.storage --manifest 1000 --latency 0.02` (benchmarks/README.md).
_AHEAD = 16
_AHEAD_OBJECTS = 4 * _AHEAD
_AHEAD_BYTES = 32 << 20
_HTTP = frozenset({"http", "https"})
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
# Seconds an image server may take to accept a connection, and between two reads of an answer;
# --storage-option connect_timeout=S / read_timeout=S change them.
_HTTP_TIMEOUTS = {"connect_timeout": 10.0, "read_timeout": 30.0}


# Switches fsspec takes of every filesystem through **kwargs: its instance cache (_Cached) and
# its listings cache (DirCache).
_FSSPEC_SWITCHES = frozenset({"skip_instance_cache", "use_listings_cache"})
# Switches a filesystem hands on to its client through **kwargs, by the filesystem's package:
# s3fs builds aiobotocore's AioSession of what its signature does not name.
_PASSED_ON = {"s3fs": frozenset({"include_builtin_handlers"})}
# Switches that also take a name, by the filesystem's package: gcsfs bills requester_pays=PROJECT.
_OR_A_NAME = {"gcsfs": {"requester_pays": ("the project to bill", "PROJECT")}}


def _switches(fs_class: type) -> frozenset[str]:
    """The options of a filesystem class that are true or false: each parameter whose default
    is a bool in its __init__ and in each one its **kwargs go up to (gcsfs's GCSFileSystem
    names only its own; requester_pays, version_aware... are its parent's), fsspec's and its
    client's."""
    import inspect

    names = set(_FSSPEC_SWITCHES | _PASSED_ON.get(_package(fs_class), set()))
    for cls in fs_class.__mro__:
        if "__init__" not in cls.__dict__:
            continue
        try:
            takes = inspect.signature(cls.__dict__["__init__"]).parameters.values()
        except (TypeError, ValueError):  # a builtin's: names no option
            continue
        names.update(p.name for p in takes if type(p.default) is bool)
        if not any(p.kind is p.VAR_KEYWORD for p in takes):
            break  # the options end here: nothing is handed further up
    return frozenset(names)


def _package(fs_class: type) -> str:
    """The package a filesystem class comes from (s3fs, gcsfs...)."""
    return fs_class.__module__.partition(".")[0]


def _typed_switches(url: str, scheme: str, options: dict) -> dict:
    """The options with each switch of the scheme's filesystem as a bool: true or false in any
    case becomes one (the string 'false' is true to the filesystem), anything else is refused:
    `anon=maybe` stayed the string 'maybe', which s3fs takes as true. Others are left as given."""
    from fsspec import get_filesystem_class

    try:
        fs_class = get_filesystem_class(scheme)
    except ValueError:  # a scheme fsspec does not know: url_to_fs says so
        return options
    switches, named = _switches(fs_class), _OR_A_NAME.get(_package(fs_class), {})
    typed = dict(options)
    for key, value in options.items():
        if key not in switches or isinstance(value, bool):
            continue
        if (said := truth(value)) is not None:
            typed[key] = said
        elif not (key in named and isinstance(value, str) and value):
            raise StorageError(_no_switch(url, key, value, named.get(key)))
    return typed


def _no_switch(url: str, key: str, value: object, name: tuple[str, str] | None) -> str:
    """The line refusing `value` for the switch `key`, which may also take a name."""
    given = value if isinstance(value, str) else json.dumps(value, default=repr)  # as typed
    takes, give = "true or false", f"pass {key}=true or {key}=false"
    if name:  # (what it names, its placeholder)
        takes = f"true, false or {name[0]}"
        give = f"pass {key}=true, {key}=false or {key}={name[1]}"
    return f"{url}: --storage-option {key}={given}: {key} is {takes}; {give}"


class RemoteStorage(Storage):
    how_to_share = "give every worker the same credentials and endpoint"

    def __init__(self, fs, root: str, scheme: str, base: str) -> None:
        self.fs = fs  # fsspec filesystems pickle with their options
        self.scheme = scheme
        self.in_process = scheme == "memory"
        self.lists_sizes = scheme not in _HTTP  # a web server lists no folders
        self.root = root.rstrip("/")
        self._base = base.rstrip("/")  # the root as the filesystem names it (no scheme)
        self._journal_listed: list[str] | None = None  # read_journal's listing, for removal
        self.spool: UrlSpool | None = None  # keep_fetched's: objects a grow's compare read

    @classmethod
    def at(cls, url: str, scheme: str, options: dict) -> RemoteStorage:
        """The storage at `url`, through fsspec's filesystem for its scheme."""
        try:  # fsspec itself comes with each extra: a runtime-only install has none
            from fsspec.core import url_to_fs

            options = _typed_switches(url, scheme, options)
            fs, base = url_to_fs(url, **(_http_options(options) if scheme in _HTTP else options))
        except ImportError:
            extra = EXTRAS.get(scheme)
            what = install_hint(extra) if extra else (
                f"install fsspec and its filesystem package for {scheme}://")  # fmt: skip
            raise StorageError(f"{url}: {scheme}:// needs a filesystem package: {what}") from None
        except ValueError as e:  # "Protocol not known"
            raise StorageError(f"{url}: {e}; give a local path, or a URL of a filesystem fsspec "
                               "knows (s3://, gs://, az://, memory://, ...)") from None  # fmt: skip
        except TypeError as e:  # an option the filesystem does not take
            what = f"a --storage-option is not one {scheme}:// takes ({e})"
            raise StorageError(f"{url}: {what}") from None
        return cls(fs, url, scheme, base)

    @property
    def stamps_listed(self) -> bool:
        return self.lists_sizes

    def __repr__(self) -> str:
        return f"RemoteStorage({self.root!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemoteStorage) and (other.fs, other.root) == (self.fs, self.root)

    def __hash__(self) -> int:
        return hash(self.root)

    def _key(self, name: str) -> str:
        parts = [p for p in name.split("/") if p]
        if any(p in (".", "..") for p in parts):
            raise ValueError(f"{name!r}: not a name inside {self.root}")
        return "/".join([self._base, *parts]) if parts else self._base

    def path(self, name: str = "") -> str:
        return f"{self.root}/{name}" if name else self.root

    def child(self, name: str) -> RemoteStorage:
        return RemoteStorage(self.fs, self.path(name), self.scheme, self._key(name))

    # -- reading ---------------------------------------------------------------------------
    def kind(self, name: str = "") -> str | None:
        try:
            with _naming(self.path(name)):
                info = self.fs.info(self._key(name))
        except (FileNotFoundError, NotADirectoryError):
            return None
        return "dir" if info["type"] == "directory" else "file"

    def listdir(self, name: str = "") -> list[Entry]:
        key = self._key(name)
        with _naming(self.path(name)):
            listed = self.fs.ls(key, detail=True, refresh=True)
        entries = [_entry(info, key) for info in listed]
        return sorted((e for e in entries if e.name), key=lambda e: e.name)

    def walk(self, name: str = "") -> Iterator[Entry]:
        key = self._key(name)
        with _naming(self.path(name)):
            found = self.fs.find(key, detail=True, withdirs=False, refresh=True)
        for path in sorted(found):
            entry = _entry(found[path], key)
            if entry.name:
                yield entry

    def walk_folders(self, name: str = "") -> Iterator[Folder]:
        try:  # the folder itself by one listing: a caller may want no more of it
            listed = self.listdir(name)
        except OSError as e:
            yield Folder("", [], {}, [], [], e)
            return
        files = {e.name: e.size for e in listed if not e.is_dir}
        top = Folder("", sorted(files), files, [e.name for e in listed if e.is_dir], [])
        yield top
        if not top.folders:
            return
        key = self._key(name)
        with _naming(self.path(name)):  # what is below it by one recursive listing, paginated
            found = self.fs.find(key, detail=True, withdirs=False, refresh=True)
        tree: dict[str, tuple[dict[str, int], set[str]]] = {}  # folder -> its files, folders
        for info in found.values():
            entry = _entry(info, key)
            folder, _, file = entry.name.rpartition("/")
            if folder:  # the top's own files were listed above
                tree.setdefault(folder, ({}, set()))[0][file] = entry.size
            while folder:  # each folder in its parent's folders (an object store has no
                parent, _, last = folder.rpartition("/")  # empty ones, nor links: no loop)
                folders = tree.setdefault(parent, ({}, set()))[1]
                if last in folders:
                    break
                folders.add(last)
                folder = parent
        pending = list(reversed(top.folders))
        while pending:
            rel = pending.pop()
            files, folders = tree.get(rel, ({}, set()))
            folder = Folder(rel, sorted(files), files, sorted(folders), [])
            yield folder  # the caller may prune folder.folders now
            pending.extend(f"{rel}/{sub}" for sub in reversed(folder.folders))

    def parent(self) -> RemoteStorage | None:
        if "/" not in self._base.strip("/"):
            return None  # a bucket, or the top of the filesystem
        above = self.root.rpartition("/")[0]
        return RemoteStorage(self.fs, above, self.scheme, self._base.rpartition("/")[0])

    def size(self, name: str) -> int:
        with _naming(self.path(name)):
            try:
                info = self.fs.info(self._key(name))  # HTTP: a HEAD, or a GET read no further
            except FileNotFoundError as e:  # fsspec's HTTP says so of any failure: say which
                if e.__cause__ is None:
                    raise
                raise FileNotFoundError(2, said(e.__cause__, 200), self.path(name)) from None
        if info["type"] == "directory":
            raise IsADirectoryError(21, "Is a directory", self.path(name))
        return int(info.get("size") or 0)

    def stamps(self, names: Iterable[str]) -> list[tuple[int, int] | None]:
        # each object's (size, last modified) from its folder's listing, each folder listed
        # once a call (a request a thousand objects, not one an object), fresh each call, and
        # one folder's held at a time; one object's alone (stamp()) would be a request: none
        names = list(names)
        found: list[tuple[int, int] | None] = [None] * len(names)
        if not self.stamps_listed:
            return found
        folder, listed = None, {}
        for i in sorted(range(len(names)), key=lambda i: names[i].rpartition("/")[0]):
            head, _, file = names[i].rpartition("/")
            if not _inexact(names[i]):
                if head != folder:
                    folder, listed = head, self._listed_stamps(head)
                found[i] = listed.get(file)
        return found

    def _listed_stamps(self, folder: str) -> dict[str, tuple[int, int]]:
        """name -> (size, mtime in ns) of each object of a folder its listing stamps."""
        try:
            key = self._key(folder)
            with _naming(self.path(folder)):
                listed = self.fs.ls(key, detail=True, refresh=True)
        except (OSError, ValueError):  # gone, or no folder: the read says why
            return {}
        return dict(filter(None, map(_listed_stamp, listed)))

    def read_is_request(self, name: str) -> bool:
        return True

    def keep_fetched(self, spool: UrlSpool | None, objects: bool = False) -> None:
        self.spool = spool if objects else None

    def read(self, name: str, limit: int) -> bytes:
        if self.spool is None:
            return self._read(name, limit)
        return self.spool.fetched(self.path(name), limit, lambda _, limit: self._read(name, limit))

    def _read(self, name: str, limit: int) -> bytes:
        """read(), from the store itself."""
        if self.scheme in _HTTP:  # a URL's "?" is its own; a server may ignore Range
            with _naming(self.path(name)):
                data = _streamed(self.fs, self._key(name), limit + 1)
        elif _inexact(name):
            raise RefusedFile("an object key that cannot be read as itself (it holds '//' or "
                              "'?'); rename the object")  # fmt: skip
        else:
            with _naming(self.path(name)):
                data = self.fs.cat_file(self._key(name), start=0, end=limit + 1)
        if len(data) > limit:
            raise FileTooLarge(over_the_limit(limit))
        return data

    @contextmanager
    def reading(
        self, files: Files, limit: int, key: object = None, then: NextFiles | None = None
    ) -> Iterator[Storage]:
        if self.scheme in _HTTP:  # fsspec's ranges over HTTP read a whole body: read() streams
            yield self
            return
        with closing(ObjectsAhead(self, files, limit, lambda name: (self, name))) as ahead:
            yield ahead

    def open(self, name: str) -> Blob:
        with _naming(self.path(name)):
            return _ObjectBlob(self.fs, self._key(name), self.path(name))

    # -- writing ---------------------------------------------------------------------------
    def make_root(self) -> bool:
        if self.kind() == "file":
            raise OutputError(f"{self.root}: is an object, not a prefix; pass a folder URL")
        return False  # an object store has no folders to make

    def create(self, name: str, by_path: bool = False) -> Sink:
        if by_path or self.scheme not in _STREAMING:
            return _SpoolSink(self.fs, self._key(name), self.path(name))
        return _UploadSink(self.fs, self._key(name), self.path(name))

    def put(self, name: str, data: bytes) -> None:
        with _naming(self.path(name)):
            self.fs.pipe_file(self._key(name), data)

    def remove(self, names: Iterable[str]) -> None:
        names = list(names)
        keys = [self._key(name) for name in names]
        if hasattr(self.fs, "call_s3") and not any(c in k for k in keys for c in "*?["):
            for start in range(0, len(keys), _DELETE_BATCH):
                self._bulk_delete(names[start : start + _DELETE_BATCH])
            return
        for key in keys:
            with suppress(FileNotFoundError):
                self.fs.rm_file(key)

    def _bulk_delete(self, names: list[str]) -> None:
        """S3's bulk delete of `names` (gone ones are no error). It answers 200 with the keys it
        refused (a policy without s3:DeleteObject) in `Errors`, which s3fs's rm drops: raised
        here, naming the first, so that no run goes on as if they were gone."""
        bucket = self._base.partition("/")[0]
        keys = {self._key(name).partition("/")[2]: name for name in names}
        for name in names:
            self.fs.invalidate_cache(self._key(name))
        answer = self.fs.call_s3("delete_objects", Bucket=bucket, Delete={
            "Objects": [{"Key": key} for key in keys], "Quiet": True})  # fmt: skip
        # a key the store would not delete but that is not there (a policy refuses any key) is
        # gone: the first refused that is there, if any, stops the run
        refused = answer.get("Errors") or []
        there = (e for e in refused if self._there(f"{bucket}/{e.get('Key')}"))
        first = next(there, None)
        if first is not None:
            more = f" ({len(refused):,} keys refused)" if len(refused) > 1 else ""
            code = errno.EACCES if first.get("Code") == "AccessDenied" else errno.EIO
            name = keys.get(first.get("Key"), first.get("Key"))
            # OSError picks its subclass by the code: PermissionError for EACCES
            raise OSError(
                code, f"{first.get('Message') or first.get('Code')}{more}", self.path(name)
            )

    def _there(self, key: str) -> bool:
        """Whether an object is at `key`, asked now (a HEAD); one the store will not tell of is."""
        try:
            self.fs.info(key, refresh=True)
        except FileNotFoundError:
            return False
        except OSError:
            return True
        return True

    def remove_partial(self, finals: Iterable[str]) -> list[str]:
        if not hasattr(self.fs, "call_s3"):
            return []  # only S3 keeps uploads a killed process left open
        bucket, _, prefix = self._base.partition("/")
        wanted = {f"{prefix}/{f}".lstrip("/") for f in finals}
        aborted = []
        for upload in self._uploads(bucket, f"{prefix}/".lstrip("/")):
            if upload.get("Key") in wanted:
                with suppress(FileNotFoundError):  # completed or aborted since the listing
                    self.fs.abort_mpu(bucket, upload["Key"], upload["UploadId"])
                aborted.append(upload["Key"].rsplit("/", 1)[-1])
        return sorted(set(aborted))

    def _uploads(self, bucket: str, prefix: str) -> Iterator[dict]:
        """The multipart uploads open under `prefix`, every page of them (1,000 a page)."""
        marks: dict[str, str] = {}
        while True:
            page = self.fs.call_s3("list_multipart_uploads", Bucket=bucket, Prefix=prefix, **marks)
            yield from page.get("Uploads", [])
            if not page.get("IsTruncated"):
                return
            marks = {"KeyMarker": page["NextKeyMarker"],
                     "UploadIdMarker": page["NextUploadIdMarker"]}  # fmt: skip

    def lock(self, created: bool = False):
        return _locked(self)

    def read_journal(self, cap: int, most: int) -> Iterable[bytes]:
        folder = self._key(JOURNAL_FOLDER)
        try:
            with _naming(self.path(JOURNAL_FOLDER)):
                listed = self.fs.ls(folder, detail=True, refresh=True)
        except FileNotFoundError:
            self._journal_listed = []
            return []
        # the one listing of a run: replacing the journal removes these without listing again
        self._journal_listed = [info["name"].rsplit("/", 1)[-1] for info in listed]
        # From the listing alone: only names this journal writes, neither a folder marker (a
        # zero-byte "folder/" object) nor an empty object (a range request on it fails).
        sizes = {info["name"].rsplit("/", 1)[-1]: int(info.get("size") or 0)
                 for info in listed if info["type"] != "directory"}  # fmt: skip
        records = sorted(n for n in sizes if _RECORD.fullmatch(n) and sizes[n] > 0)
        if sizes.get(JOURNAL_HEAD, 0) <= 0:
            return []
        wanted, total = [], 0
        for name in [JOURNAL_HEAD, *records[: min(most, _MOST_RECORDS)]]:
            if total >= cap:
                break
            wanted.append((name, min(sizes[name], cap - total)))
            total += wanted[-1][1]
        return self._fetch_journal(wanted)

    def _fetch_journal(self, wanted: list[tuple[str, int]]) -> list[bytes]:
        """The first `size` bytes of each journal object named, fetched _AHEAD at a time; one
        removed since the listing is left out; any other failure is refused by name."""
        lines = []
        for at in range(0, len(wanted), _AHEAD):
            batch = wanted[at : at + _AHEAD]
            keys = [self._key(f"{JOURNAL_FOLDER}/{name}") for name, _ in batch]
            got = self.fs.cat_ranges(keys, [0] * len(batch), [size for _, size in batch],
                                     on_error="return")  # fmt: skip
            for (name, _), data in zip(batch, got, strict=True):
                if isinstance(data, FileNotFoundError):
                    continue
                if isinstance(data, BaseException):
                    path, why = self.path(f"{JOURNAL_FOLDER}/{name}"), said(data, 200)
                    raise OutputError(f"{path}: cannot read this journal object ({why}); remove "
                                      "it (the shards it records are then rewritten)")  # fmt: skip
                lines.append(data)
        return lines

    def journal(self, head: list[bytes]) -> JournalWriter:
        return _ObjectJournal(self, head)

    def remove_journal(self) -> None:
        old, self._journal_listed = self._journal_listed, None
        if old is None:  # no read_journal this run (or its records written since)
            with suppress(FileNotFoundError):
                listed = self.fs.ls(self._key(JOURNAL_FOLDER), detail=False, refresh=True)
                old = [n.rsplit("/", 1)[-1] for n in listed]
        self.remove(f"{JOURNAL_FOLDER}/{name}" for name in old or ())


@contextmanager
def _naming(path: str) -> Iterator[None]:
    """An OSError from the filesystem names `path` (s3fs's name none: "bucket does not exist")."""
    try:
        yield
    except OSError as e:
        if e.filename:
            raise
        raise _named(e, path) from e


def _named(e: OSError, path: str) -> OSError:
    """`e`, or where it names no file, the same naming `path`."""
    if e.filename:
        return e
    try:  # its own class where it takes (errno, strerror, filename), as OSError's do
        return type(e)(e.errno, e.strerror or str(e), path)
    except TypeError:  # aiohttp's ClientConnectorError takes other arguments
        return OSError(e.errno, e.strerror or str(e), path)


def _http_options(options: dict) -> dict:
    """HTTP(S) filesystem options with the connect and read timeouts as aiohttp takes them."""
    import aiohttp

    given = {**_HTTP_TIMEOUTS, **options}
    given.pop("total_timeout", None)  # an image URL's (storage.urlpolicy), not fsspec's
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=float(given.pop("connect_timeout")),
                                    sock_read=float(given.pop("read_timeout")))  # fmt: skip
    return {**given, "client_kwargs": {"timeout": timeout, **given.get("client_kwargs", {})}}


def _streamed(fs, key: str, most: int) -> bytes:
    """At most `most` bytes of an HTTP(S) URL, streamed: a body past them is never read."""
    parts, got = [], 0
    with fs.open(key, "rb", block_size=0) as f:
        while got < most and (chunk := f.read(most - got)):
            parts.append(chunk)
            got += len(chunk)
    return b"".join(parts)


def _inexact(name: str) -> bool:
    """Whether the filesystem would read a listed name as another object's: one with an empty
    part (`cat//a.jpg` is read as `cat/a.jpg`) or a `?` (s3fs cuts `a.jpg?versionId=2` there)."""
    return "?" in name or (name != "" and "" in name.split("/"))


def _listed_stamp(info: dict) -> tuple[str, tuple[int, int]] | None:
    """(name in its folder, (size, mtime in ns)) of an object as a listing gives it; None for a
    folder, or where the listing gives no size or modification time (S3's LastModified, an
    mtime) in range: a store's values are data."""
    size, when = info.get("size"), info.get("LastModified", info.get("mtime"))
    if info.get("type") == "directory" or type(size) is not int or not 0 <= size < 1 << 62:
        return None
    if isinstance(when, datetime.datetime) and when.tzinfo is not None:
        ns = (when - _EPOCH) // datetime.timedelta(microseconds=1) * 1000
    elif type(when) in (int, float) and math.isfinite(when) and 0 < when < 1 << 33:
        ns = round(when * 1e9)
    else:
        return None
    name = info.get("name")
    if not 0 < ns < 1 << 62 or type(name) is not str:
        return None
    return name.rstrip("/").rsplit("/", 1)[-1], (size, ns)


def _entry(info: dict, base: str) -> Entry:
    name = info["name"].rstrip("/")
    relative = name[len(base) :].lstrip("/") if name.startswith(base) else ""
    is_dir = info["type"] == "directory"
    return Entry(relative, is_dir, 0 if is_dir else int(info.get("size") or 0))


class ObjectsAhead:
    """A reader (a RemoteStorage, or a manifest's ImageRoot) whose read() of the objects among
    the files given, in their order, comes from requests started ahead of it, _AHEAD in flight
    at once on a pool of threads (each bounded by `limit`), a new one as soon as one ends, up to
    _AHEAD_OBJECTS and _AHEAD_BYTES past the one read: per-request latency, not bandwidth, is
    what limits one worker reading small objects. `where(name)` is the storage a file is read
    from and its name there (None: not an object, read by the reader as it comes). An object
    listed over `limit` is refused unfetched; one listed over _AHEAD_BYTES, one the reader's
    spool holds, and a name out of order are read as they come, as the reader reads them. The
    files are walked on the reader's thread, as it reads."""

    def __init__(
        self,
        reader: Storage,
        files: Iterable[tuple[str, int]],
        limit: int,
        where: Callable[[str], tuple[Storage, str] | None],
    ) -> None:
        self.reader, self.limit, self._where = reader, limit, where
        self._files = iter(files)
        # (name, its listed bytes counted, its bytes or the exception its request raised), in
        # the reads' order
        self._ahead: collections.deque[tuple[str, int, Future]] = collections.deque()
        self._held = 0  # listed bytes of those ahead
        self._pool = ThreadPoolExecutor(_AHEAD, "shardpack-objects")
        self._fill()

    def _object(self, name: str) -> tuple[RemoteStorage, str] | None:
        """The store and name of an object to fetch ahead, or None: a file elsewhere, a name
        the store would read as another (read() refuses it) or one its spool holds."""
        try:
            storage, name = self._where(name) or (None, name)
        except (OSError, ValueError, StorageError):  # read() says why
            return None
        if not isinstance(storage, RemoteStorage) or storage.scheme in _HTTP or _inexact(name):
            return None
        if storage.spool is not None and storage.spool.holds(storage.path(name)):
            return None
        return storage, name

    def _fill(self) -> None:
        """Start the requests of the next objects, while the window has room."""
        while (files := self._files) is not None and len(self._ahead) < _AHEAD_OBJECTS \
                and self._held < _AHEAD_BYTES:  # fmt: skip
            try:
                name, size = next(files)
            except StopIteration:
                self._files = None
                return
            except Exception:  # naming a file failed: the reads from here on go to the storage
                self._files = None  # itself, which raises the same error where it is handled
                return
            if _AHEAD_BYTES < size <= self.limit or (found := self._object(name)) is None:
                continue
            storage, key = found
            if size > self.limit:  # refused unfetched
                future: Future = Future()
                future.set_exception(FileTooLarge(over_the_limit(self.limit, size)))
                size = 0
            else:
                future = self._pool.submit(self._get, storage.fs, storage._key(key))
            self._ahead.append((name, size, future))
            self._held += size

    def _get(self, fs, key: str) -> bytes:
        """An object's bytes up to the limit + 1, on a thread of the pool."""
        return fs.cat_file(key, start=0, end=self.limit + 1)

    def read(self, name: str, limit: int) -> bytes:
        found = self._object(name)
        if found is None:
            return self.reader.read(name, limit)
        storage, key = found
        if storage.spool is None:
            return self._read(name, limit, storage, key)
        return storage.spool.fetched(
            storage.path(key), limit, lambda _, limit: self._read(name, limit, storage, key)
        )

    def _read(self, name: str, limit: int, storage: RemoteStorage, key: str) -> bytes:
        """read() of an object, from its request started ahead (or the store itself)."""
        if limit > self.limit or all(ahead != name for ahead, _, _ in self._ahead):
            return storage._read(key, limit)
        while True:  # the objects passed over are dropped, their requests cancelled if queued
            ahead, size, future = self._ahead.popleft()
            self._held -= size
            if ahead == name:
                break
            future.cancel()
        error = future.exception()  # (waits for it; a Ctrl-C there starts nothing more)
        self._fill()
        if isinstance(error, RefusedFile):
            raise error
        if error is not None:  # named as the store's own read names it
            named = _named(error if isinstance(error, OSError) else OSError(str(error)),
                           storage.path(key))  # fmt: skip
            raise named from (None if named is error else error)
        data = future.result()
        if len(data) > limit:
            raise FileTooLarge(over_the_limit(limit))
        return data

    def read_stamped(self, name: str, limit: int) -> tuple[bytes, tuple[int, int] | None]:
        if self._object(name) is None:
            return self.reader.read_stamped(name, limit)
        return self.read(name, limit), None  # as the store's: the listing's (ShardSpec.listed)

    def close(self) -> None:
        """Stop: the requests not started are dropped, those in flight waited out (no request
        is sent after)."""
        self._files = None
        ahead, self._ahead = self._ahead, collections.deque()
        for _, _, future in ahead:
            future.cancel()
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __getattr__(self, attribute: str):
        return getattr(self.reader, attribute)


class _ObjectBlob(Blob):
    """An object read through fsspec's read-ahead cache: range requests as records are asked."""

    def __init__(self, fs, key: str, name: str) -> None:
        self.name = name
        self.file = fs.open(key, "rb", block_size=_READ_BLOCK, cache_type="readahead")
        self.size = self.file.size

    def pread(self, size: int, offset: int) -> bytes:
        self.file.seek(offset)
        return self.file.read(size)

    def close(self) -> None:
        self.file.close()


class _UploadSink(Sink):
    """A shard streamed to the store by a thread while the worker goes on packing.

    The store's upload (S3 multipart) completes only at commit; discard aborts it. The thread
    keeps network waits off the worker: a full part uploads while the next records are built.
    """

    def __init__(self, fs, key: str, name: str) -> None:
        self.name = name
        self._file = fs.open(key, "wb", block_size=_PART)
        self._queue: queue.Queue[bytes | None] = queue.Queue(_QUEUED)
        self._pending = bytearray()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._upload, name="shardpack-upload", daemon=True)
        self._thread.start()

    def _upload(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._file.write(chunk)
                except BaseException as e:  # reported to the worker at its next write
                    self._error = e

    def _raise(self) -> None:
        if self._error is not None:
            raise OSError(f"uploading {self.name} failed ({self._error})")

    def write(self, data: bytes) -> int:
        self._raise()
        self._pending += data
        if len(self._pending) >= _CHUNK:
            self._queue.put(bytes(self._pending))
            self._pending.clear()
        return len(data)

    def _drain(self) -> None:
        if self._thread.is_alive():
            if self._pending:
                self._queue.put(bytes(self._pending))
                self._pending.clear()
            self._queue.put(None)
            self._thread.join()

    def commit(self) -> None:
        try:
            self._drain()
            self._raise()
            self._file.close()  # completes the upload: the object appears, whole
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        self._pending.clear()
        self._error = self._error or OSError("discarded")
        self._drain()
        if not self._file.closed:
            with suppress(Exception):
                self._file.discard()  # aborts the multipart upload
            self._file.closed = True  # never completed later by close() or the collector


class _SpoolSink(Sink):
    """A local file without a name (O_TMPFILE), uploaded whole at commit: however the process
    ends, nothing is left behind. A library writes it by path through /proc/self/fd/N."""

    def __init__(self, fs, key: str, name: str) -> None:
        self.fs, self.key, self.name = fs, key, name
        self._spool = tempfile.TemporaryFile(prefix=".shardpack.spool.")  # noqa: SIM115
        self.fd = self._spool.fileno()

    def write(self, data: bytes) -> int:
        return self._spool.write(data)

    def commit(self) -> None:
        try:
            self._spool.flush()
            with _naming(self.name):
                self.fs.put_file(f"/proc/self/fd/{self.fd}", self.key)
        finally:
            self.discard()

    def discard(self) -> None:
        self._spool.close()


class _ObjectJournal(JournalWriter):
    """The journal as objects: a head (the plan digest) and one object per finished shard.

    Nothing changes until the first line is added (or begin); then the old records go, the head
    and the records kept from before are written, and each new line is its own object (no
    appends: an object store has none). A crash in between loses kept records, never invents
    one: resume then rewrites those shards.
    """

    def __init__(self, storage: RemoteStorage, head: list[bytes]) -> None:
        self.storage, self.head, self.count, self.begun = storage, head, 0, False
        self.name = storage.path(JOURNAL_FOLDER)

    def _put(self, line: bytes) -> None:
        self.count += 1
        self.storage.put(f"{JOURNAL_FOLDER}/{self.count:08d}.json", line + b"\n")

    def begin(self) -> None:
        if not self.begun:
            self.begun = True
            self.storage.remove_journal()
            self.storage.put(f"{JOURNAL_FOLDER}/{JOURNAL_HEAD}", self.head[0] + b"\n")
            for kept in self.head[1:]:
                self._put(kept)

    def add(self, line: bytes) -> None:
        self.begin()
        self._put(line)

    def close(self) -> None:
        pass


@contextmanager
def _locked(storage: RemoteStorage) -> Iterator[None]:
    """The lock object: created only if absent, removed at the end if it is still ours.

    A lock left by a run on this host whose process is gone (killed) is taken over: the store
    cannot see a process die, this host can.
    """
    import socket  # here: a local pack imports this module but never locks a store

    key = storage._key(LOCK_NAME)
    token = uuid.uuid4().hex
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    mine = json.dumps(
        {"pid": os.getpid(), "host": socket.gethostname(), "token": token, "started": started}
    ).encode()
    for attempt in (1, 2):
        try:
            with _naming(storage.path(LOCK_NAME)):
                storage.fs.pipe_file(key, mine, mode="create")
            break
        except FileExistsError:  # s3fs: 412 Precondition Failed
            tag = _tag(storage, key)  # before what it says: a lock replaced since has another
            owner = _owner(storage, key)
            if attempt == 1 and _dead_here(owner):
                if _take_over(storage, key, tag, mine):
                    break
                continue  # another run took it over first, or it is gone: create it, or refuse
            held = "unknown" if owner is None else (
                f"pid {owner['pid']} on {owner['host']}, since {owner['started']}")  # fmt: skip
            raise OutputError(
                f"{storage.root}: another shardpack run ({held}) is writing here; wait for it "
                f"to finish, or if none is (a run killed on another host leaves its lock), "
                f"remove {storage.path(LOCK_NAME)}"
            ) from None
    failed = True
    try:
        yield
        failed = False
    finally:
        try:
            _release(storage, key, token)
        except Exception as e:
            if not is_store_failure(e):
                raise
            if not failed:  # else a store gone down must not bury why the run stopped
                raise OutputError(
                    f"{storage.path(LOCK_NAME)}: the run is complete (index.json written), but "
                    f"its lock could not be removed ({said(e, 200)}); remove it, or a later run "
                    "on this host takes it over"
                ) from None


def _tag(storage: RemoteStorage, key: str) -> str | None:
    """The lock object's ETag, where the store replaces an object only if unchanged (S3's
    If-Match); None elsewhere, or when it is gone."""
    if not hasattr(storage.fs, "call_s3"):
        return None
    bucket, name, _ = storage.fs.split_path(key)
    try:
        with _naming(storage.path(LOCK_NAME)):
            return storage.fs.call_s3("head_object", Bucket=bucket, Key=name).get("ETag")
    except FileNotFoundError:
        return None


def _take_over(storage: RemoteStorage, key: str, tag: str | None, mine: bytes) -> bool:
    """Put this run's lock in place of a dead run's, and whether it is in place. On S3, only if
    the object is still the one read (PutObject If-Match on its ETag): of two runs taking one
    lock over, one does. Elsewhere (no conditional replace) it is removed and left to the
    create, which two runs at the same instant may both pass (docs/scaling.md), as on an S3
    store that does not implement If-Match."""
    if tag is not None:
        bucket, name, _ = storage.fs.split_path(key)
        try:
            with _naming(storage.path(LOCK_NAME)):
                storage.fs.call_s3("put_object", Bucket=bucket, Key=name, Body=mine, IfMatch=tag)
            return True
        except FileNotFoundError:  # removed since: the create takes it
            return False
        except OSError as e:
            if e.errno == errno.EINVAL:  # s3fs's 412 Precondition Failed: replaced since
                return False
            if e.errno != errno.ENOSYS:  # 501 Not Implemented: the store has no If-Match
                raise
    with suppress(FileNotFoundError):
        storage.fs.rm_file(key)
    return False


def _release(storage: RemoteStorage, key: str, token: str) -> None:
    """Remove the lock object if it is still this run's."""
    held = _owner(storage, key)
    if held and held.get("token") == token:
        with suppress(FileNotFoundError):
            storage.fs.rm_file(key)


def _owner(storage: RemoteStorage, key: str) -> dict | None:
    """What the lock object says of its run (pid, host, started, token), or None."""
    try:
        doc = json.loads(storage.fs.cat_file(key, start=0, end=_LOCK_CAP))
    except (OSError, ValueError, RecursionError):
        return None
    fields = ("pid", "host", "started", "token")
    return doc if isinstance(doc, dict) and all(k in doc for k in fields) else None


def _dead_here(owner: dict | None) -> bool:
    """Whether the lock's run was on this host and its process is gone."""
    import socket  # here: a local pack imports this module but never locks a store

    if owner is None or owner["host"] != socket.gethostname():
        return False
    pid = owner["pid"]
    if type(pid) is not int or not 0 < pid < 2**31:  # os.kill takes a C int; 0, -1: groups
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, someone else's
        return False
    return False
