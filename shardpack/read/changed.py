"""A reader's index against OUT's now: a shard gone or resized under a reader is OUT changed
(an update, an append, a pack again), not a damaged shard, where index.json changed too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shardpack.errors import OutChangedError, ShardpackError, ShardSizeError
from shardpack.index import Index, load_index

# What a reader says to do once OUT changed under it, unless it has its own way.
OPEN_AGAIN = "open it again"


def changed_since(index: Index) -> str | None:
    """How OUT's index.json differs from `index`, the one a reader loaded (read again with
    load_index's bounds), in a few words; None: the same."""
    try:
        now = load_index(index.storage)
    except ShardpackError:  # removed by a pack again before its shards, or not yet written
        return "its index.json is gone or unreadable now: a pack may be writing it"
    return None if now.to_json() == index.to_json() else "its index.json changed"


def out_changed(
    index: Index, path: str, what: str, again: str = OPEN_AGAIN
) -> OutChangedError | None:
    """The error of a shard at `path` found `what` ("gone", "rewritten") while OUT's index.json
    is no longer `index`; None where it is the same (the shard itself is at fault)."""
    how = changed_since(index)
    if how is None:
        return None
    return OutChangedError(f"{path}: {what}; {index.out} was updated or packed again since this "
                           f"reader opened it ({how}): {again}")  # fmt: skip


@contextmanager
def unless_changed(index: Index, again: str = OPEN_AGAIN) -> Iterator[None]:
    """Run a read of OUT's shards through `index`: a shard missing or of another size than it
    says is OutChangedError where OUT's index.json changed since, else the ShardSizeError."""
    try:
        yield
    except ShardSizeError as e:
        what = "gone" if (e.reason or "").startswith("missing") else "rewritten"
        raise out_changed(index, e.path, what, again) or e from None
