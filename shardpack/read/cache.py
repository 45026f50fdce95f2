"""A local cache of a pack's shards for training reads: whole shards fetched ahead of the reader
into one folder, the longest held removed beyond a byte limit, and kept for a reader started
later. Nothing outside the folder is written."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from threading import Lock
from typing import TypeVar

from shardpack.containers import open_shard
from shardpack.errors import RecordError, ShardpackError, is_count
from shardpack.index import Index, ShardInfo
from shardpack.storage import storage_at
from shardpack.storage.atomic import remove_temp_files
from shardpack.storage.locations import local_file

# Bytes copied per read from the store: large enough for throughput, bounded for memory.
CHUNK_BYTES = 8 << 20
# Shards fetched ahead of the one being read (a thread each).
AHEAD = 2
# A half-written shard untouched this long is a killed reader's: another reader's fetch under
# way writes every chunk (CHUNK_BYTES) and is left alone.
STALE_SECONDS = 600
# Fetches of one shard that readers sharing the folder may remove before it opens: each of
# them keeps to its own limit, and removes what it does not read itself.
OPEN_TRIES = 4

T = TypeVar("T")


class ShardCache:
    """Shards of one pack copied whole into `folder`/<pack's digest>/ (with its index.json, so
    that it reads as a local pack); `limit` bytes at most, besides the shards being read or
    fetched ahead.

    A shard is complete under its final name or not there: each is written under a temporary
    name and renamed, and one of the right size is reused, by this reader or a later one.
    """

    def __init__(self, index: Index, folder: str | os.PathLike, limit: int | None = None,
                 ahead: int = AHEAD) -> None:  # fmt: skip
        if limit is not None and not is_count(limit):
            raise ShardpackError(f"cache_limit must be a positive number of bytes, got: {limit!r}")
        if local_file(folder) is None:
            raise ShardpackError(f"cache_dir must be a local folder, got: {os.fspath(folder)!r}")
        self.index, self.limit, self.ahead = index, limit, ahead
        document = index.to_json()
        digest = hashlib.sha256(json.dumps([index.out, document], sort_keys=True).encode())
        root = storage_at(local_file(folder))
        root.make_root()
        # a link planted in its place is refused (OutputError), never written through
        self.storage = root.make_folder(digest.hexdigest()[:16])
        self.folder = self.storage.path()
        self._shards = {s.file: s for split in index.splits.values() for s in split.shards}
        self._remove_stale()
        self.storage.put("index.json", json.dumps(document).encode())
        self._pool: ThreadPoolExecutor | None = None
        self._fetching: dict[str, Future] = {}
        self._in_use: set[str] = set()
        self._lock = Lock()

    def ensure(self, file: str, then: Sequence[str] = ()) -> None:
        """Have shard `file` in the cache (fetched now, or waited for) and in use; start
        fetching the first `ahead` of `then`, the shards read next."""
        with self._lock:
            self._in_use.add(file)
        for name in then[: self.ahead]:
            self._fetch_ahead(name)
        future = self._fetching.pop(file, None)
        if future is not None:
            future.result()
        self._fetch(self._shards[file])  # unless there (another reader may have removed it)

    def read(self, file: str, reading: Callable[[], T]) -> T:
        """`reading()`, which opens shard `file` in the cache (and keeps it open), once the
        shard is there (ensure). Another reader of the folder (a DataLoader worker, a rank) may
        remove it for room between its fetch and its open: a shard found gone when `reading`
        fails is fetched again, up to OPEN_TRIES times; one that is there fails as it is."""
        for _ in range(OPEN_TRIES - 1):
            self.ensure(file)
            try:
                return reading()
            except RecordError:
                if self._present(self._shards[file]):  # there, so damaged: not for a fetch
                    raise
        self.ensure(file)
        return reading()

    def done(self, file: str) -> None:
        """Shard `file` is no longer read here: it may be removed for room."""
        with self._lock:
            self._in_use.discard(file)
        self._make_room()

    def close(self) -> None:
        """Stop fetching ahead (a fetch under way finishes); no shard is in use any more."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        self._fetching.clear()
        with self._lock:
            self._in_use.clear()
        self._make_room()

    def _fetch_ahead(self, file: str) -> None:
        if file in self._fetching or self._present(self._shards[file]):
            return
        with self._lock:
            self._in_use.add(file)  # not removed for room before it is read
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.ahead, thread_name_prefix="shardpack-cache")
        self._fetching[file] = self._pool.submit(self._fetch, self._shards[file])

    def _present(self, info: ShardInfo) -> bool:
        """Whether the shard is in the cache whole: a regular file (no link) of its size."""
        held = self.storage.identity(info.file)
        return held is not None and held[2] == info.num_bytes

    def _fetch(self, info: ShardInfo) -> None:
        """Copy one shard from the pack's store, whole, then make room for it."""
        if self._present(info):
            return
        sink = self.storage.create(info.file)
        try:
            with open_shard(
                self.index.storage, info.file, info.num_bytes
            ) as blob:  # gone: one line
                for offset in range(0, blob.size, CHUNK_BYTES):
                    sink.write(blob.pread(min(CHUNK_BYTES, blob.size - offset), offset))
            sink.commit()
        except BaseException:
            sink.discard()
            raise
        self._make_room()

    def _remove_stale(self) -> None:
        """Remove what a killed reader left half-written (not what another reader of the
        folder is fetching, nor what it renamed as this one looked)."""
        remove_temp_files(self.storage.path(), self._shards, time.time() - STALE_SECONDS)

    def _make_room(self) -> None:
        """Remove the longest held shards not in use until the rest fit the limit."""
        if self.limit is None:
            return
        held = [(found[3], found[2], name) for name in self._shards
                if (found := self.storage.identity(name)) is not None]  # fmt: skip
        total = sum(size for _, size, _ in held)
        with self._lock:
            in_use = set(self._in_use)
        for _, size, name in sorted(held):
            if total <= self.limit:
                break
            if name not in in_use:
                self.storage.remove([name])
                total -= size
