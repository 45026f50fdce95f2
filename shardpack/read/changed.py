"""A reader's index against OUT's now: a shard gone, resized, rewritten at its size or failing its
CRCs under a reader is OUT changed (an update, an append, a pack again), not a damaged shard,
where index.json changed too and no longer lists that shard as the reader's does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shardpack.errors import OutChangedError, RecordError, ShardpackError, ShardSizeError
from shardpack.index import Index, load_index
from shardpack.layout import INDEX_NAME

# What a reader says to do once OUT changed under it, unless it has its own way.
OPEN_AGAIN = "open it again"


def changed_since(index: Index, path: str | None = None) -> str | None:
    """How OUT's index.json differs from `index`, the one a reader loaded (read again with
    load_index's bounds), in a few words; None: the same, or, for the shard at `path`, one that
    lists it as `index` does (an append: that shard is the one the reader's index describes)."""
    try:
        now = load_index(index.storage)
    except ShardpackError:  # removed by a pack again before its shards, or not yet written
        return "its index.json is gone or unreadable now: a pack may be writing it"
    if now.to_json() == index.to_json():
        return None
    if path is not None and (listed := _listed(index, path)) and listed == _listed(now, path):
        return None
    return "its index.json changed"


def _listed(index: Index, path: str) -> dict | None:
    """The index's entry for the shard at `path`, as index.json lists it; None: not listed."""
    found = [s.to_json() for s in index.shards if index.shard_path(s) == path]
    return found[0] if found else None


def out_changed(
    index: Index, path: str, what: str, again: str = OPEN_AGAIN
) -> OutChangedError | None:
    """The error of a shard at `path` found `what` ("gone", "rewritten") while OUT's index.json
    is no longer `index` and lists that shard otherwise, if at all; None where it is the same
    (the shard itself is at fault)."""
    how = changed_since(index, path)
    if how is None:
        return None
    return OutChangedError(f"{path}: {what}; {index.out} was updated or packed again since this "
                           f"reader opened it ({how}): {again}")  # fmt: skip


def check_opened(index: Index, path: str, again: str = OPEN_AGAIN) -> None:
    """Once the shard at `path` is open, refuse it where OUT's index.json is no longer the one
    `index` was loaded from and no longer lists that shard as `index` does: a pack again or an
    update may have put other records under its name, at its very size, whose CRCs all hold.
    Shards are only renamed or rewritten after the index that listed them is gone, so an index
    still in place once the shard is open vouches for it. A disk's identity costs one stat; a
    store without one (index.loaded_as None) is checked at a fault only (unless_changed).

    Raises:
        OutChangedError: naming the shard, and `again`.
    """
    if index.loaded_as is None or index.storage.identity(INDEX_NAME) == index.loaded_as:
        return
    if error := out_changed(index, path, "rewritten", again):
        raise error


def changed_or(index: Index, error: RecordError, again: str = OPEN_AGAIN) -> ShardpackError:
    """What a reader raises for `error`, met reading a shard of `index`: OutChangedError where
    OUT's index.json changed since and lists that shard otherwise, else `error` itself."""
    missing = isinstance(error, ShardSizeError) and (error.reason or "").startswith("missing")
    return out_changed(index, error.path, "gone" if missing else "rewritten", again) or error


@contextmanager
def unless_changed(index: Index, again: str = OPEN_AGAIN) -> Iterator[None]:
    """Run a read of OUT's shards through `index`: a shard missing, of another size than it
    says, or faulty (a CRC, a record, a count) is OutChangedError where OUT's index.json changed
    since and lists the shard otherwise, else the RecordError as it was raised."""
    try:
        yield
    except RecordError as e:  # its bytes are not the ones the index lists: which index, now?
        raise changed_or(index, e, again) from None
