"""Reading items that are pieces of larger source files (records of a shard, members of a tar,
rows of a Parquet file): the files a worker reads from are kept open, a bounded number at a
time, the least recently used closed first."""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from shardpack.errors import SourceError
from shardpack.storage import Storage
from shardpack.storage.srcfiles import RefusedFile

# A shuffled shard draws from every source file; keeping each open would hold a descriptor
# (or a remote file's read-ahead buffer) per file of the dataset.
MAX_OPEN = 16
# dataset_info.json, features.json, a class-names file: kilobytes; refuse what could be a trap.
MAX_METADATA_BYTES = 16 * 2**20


class _Closable(Protocol):
    def close(self) -> None: ...


T = TypeVar("T", bound=_Closable)


class OpenFiles(Generic[T]):
    """name -> an open thing made by `opener`, at most `keep` at once."""

    def __init__(self, opener: Callable[[str], T], keep: int) -> None:
        self.opener, self.keep = opener, keep
        self._open: OrderedDict[str, T] = OrderedDict()

    def get(self, name: str) -> T:
        """The open file of this name, opened on first use (and again after being closed)."""
        opened = self._open.get(name)
        if opened is None:
            while len(self._open) >= self.keep:
                self._open.popitem(last=False)[1].close()
            opened = self._open[name] = self.opener(name)
        self._open.move_to_end(name)
        return opened

    def close(self) -> None:
        while self._open:
            self._open.popitem()[1].close()

    def __del__(self) -> None:  # the worker drops its cache when the shard is done
        self.close()


def kept_open(cache: dict, kind: str, opener: Callable[[str], T]) -> OpenFiles[T]:
    """The worker's open files of one kind, kept in its loader's `cache` for the shard: at most
    MAX_OPEN, each opened by `opener(name)` on first use."""
    files = cache.get(kind)
    if files is None:
        files = cache[kind] = OpenFiles(opener, MAX_OPEN)
    return files


def read_metadata(root: Storage, name: str, what: str) -> bytes:
    """A small metadata file of SRC, read as hostile input (a regular file, bounded)."""
    try:
        return root.read(name, MAX_METADATA_BYTES)
    except RefusedFile as e:
        raise SourceError(f"{root.path(name)}: {e}; is it {what}?") from None
    except OSError as e:
        raise SourceError(
            f"{root.path(name)}: cannot read ({e.strerror or e}); check its permissions"
        ) from None


def read_json(root: Storage, name: str, what: str) -> object:
    """A small JSON metadata file of SRC, parsed."""
    try:
        return json.loads(read_metadata(root, name, what))
    except (ValueError, RecursionError):
        raise SourceError(f"{root.path(name)}: is not JSON; is it {what}?") from None
