"""Where SRC and OUT live: a local folder, or any fsspec URL (s3://, gs://, memory://).

What plugs in here is a `Storage`: the class below, which a store implements (names; reading
files whole, ahead or at offsets; writing through a Sink that is final only at commit; the
lock; the journal; and what a caller may need of a disk: `local_path()`, `holds()`).
storage_at() picks the implementation from the form of SRC or OUT:
- `local.LocalStorage` for plain paths, file:// and local:// (fsspec's name for this disk):
  temporary names renamed into place, flock, links never followed in OUT;
- `remote.RemoteStorage` for every other fsspec URL: an object store keeps the same guarantees
  its own way (shards streamed as a multipart upload completed only at the end, a lock object
  created only if absent, one journal object per finished shard).
Nothing outside this package imports either module or branches on which one it has; the
failures a disk or store raises are told apart by `store_failure()`.

A Storage is rooted at a folder or URL prefix; every name it takes is relative to that root,
slash-separated, and never climbs out of it. Storages pickle: workers get the very one the
parent made, options included.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from shardpack.errors import StorageError
from shardpack.storage.base import (
    Blob,
    Entry,
    Folder,
    Handover,
    HashingBlob,
    JournalWriter,
    Sink,
    Storage,
    truth,
)
from shardpack.storage.failures import is_store_failure, store_failure
from shardpack.storage.local import LocalStorage
from shardpack.storage.locations import LOCAL_SCHEMES, URL, is_url

__all__ = [
    "Blob", "Entry", "Folder", "Handover", "HashingBlob", "JournalWriter", "Sink", "Storage",
    "StorageError",
    "is_store_failure", "is_url", "storage_at", "store_failure",
]  # fmt: skip


def parse_options(pairs: Iterable[str]) -> dict[str, object]:
    """`--storage-option KEY=VALUE` pairs as filesystem options; values that read as JSON
    (numbers, true/false, null) become those, and so do True and False in any case (the string
    'False' is true wherever a filesystem passes it on unchecked); the rest stay strings.

    Raises:
        StorageError: a pair without `=`.
    """
    import json

    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise StorageError(f"--storage-option {pair!r}: give it as KEY=VALUE")
        try:
            options[key] = json.loads(value)
        except (ValueError, RecursionError):
            said = truth(value)
            options[key] = value if said is None else said
    return options


def storage_at(location: str | os.PathLike, options: Mapping[str, object] | None = None) -> Storage:
    """The Storage rooted at a local path or a URL (file:// and local:// are local paths).

    Raises:
        StorageError: the URL's filesystem package is missing or the scheme is unknown.
        TypeError: `location` is neither a str nor an os.PathLike of one.
    """
    if isinstance(location, Storage):
        return location
    text = os.fspath(location) if isinstance(location, str | os.PathLike) else None
    if not isinstance(text, str):  # bytes failed inside re, any other type inside os.fspath
        raise TypeError(f"a folder or URL must be a str or os.PathLike, got: {location!r}")
    match = URL.match(text)
    if match is None or match["scheme"].lower() in LOCAL_SCHEMES:
        return LocalStorage(text[match.end() :] if match else text)
    from shardpack.storage.remote import RemoteStorage  # a URL's alone: fsspec's stores

    return RemoteStorage.at(text, match["scheme"].lower(), dict(options or {}))
