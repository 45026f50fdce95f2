"""Reading items that are pieces of larger source files (records of a TFDS shard, members of a
tar): the files a worker reads from are kept open in its cache, a bounded number at a time."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TypeVar

from shardpack.errors import SourceError
from shardpack.storage import Storage
from shardpack.storage.srcfiles import RefusedFile

# A shuffled shard draws from every source file; keeping each open would hold a descriptor
# (or a remote file's read-ahead buffer) per file of the dataset.
MAX_OPEN = 16
# dataset_info.json, features.json, a class-names file: kilobytes; refuse what could be a trap.
MAX_METADATA_BYTES = 16 * 2**20

Opened = TypeVar("Opened")


def kept_open(cache: dict, key: tuple, opener: Callable[[], Opened]) -> Opened:
    """The file `opener` opens, kept in the worker's `cache` under `key`; the one opened
    longest ago is closed when MAX_OPEN are open."""
    files: dict = cache.setdefault("pieces.open", {})
    if key not in files:
        if len(files) >= MAX_OPEN:
            files.pop(next(iter(files))).close()
        files[key] = opener()
    return files[key]


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
