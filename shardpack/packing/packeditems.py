"""A shard's items packed as bytes, a column per field PACKED_CHUNK items at a time: what the
packing process holds of a fresh plan's items once it is made (~35 bytes an item, where an
Item and its key take ~170), and what a forked worker reads (pages it never writes)."""

from __future__ import annotations

import pickle
from collections.abc import Iterator, Sequence
from dataclasses import replace

from shardpack.packing.plan import Plan
from shardpack.sources import Dataset, Item

# Items a packed chunk holds: what a reader unpacks at once.
PACKED_CHUNK = 1024


class PackedItems:
    """A shard's items as bytes: iterates, counts and indexes like the tuple it was made from,
    unpacking PACKED_CHUNK items at a time (an item looked up by position unpacks its chunk:
    for the few a caller looks up; `columns` and `picked` read many).

    A forked worker reading the inherited Item objects themselves would write their reference
    counts, copying into itself every page of the listing it touched (scattered by the shuffle:
    nearly all of them). Bytes are only read; a worker holds one chunk at a time.
    """

    __slots__ = ("_chunks", "_count")

    def __init__(self, items: Sequence[Item]) -> None:
        self._count = len(items)
        self._chunks = tuple(
            pickle.dumps(tuple(zip(*items[start : start + PACKED_CHUNK], strict=True)), 5)
            for start in range(0, len(items), PACKED_CHUNK)
        )

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[Item]:
        for chunk in self._chunks:
            yield from map(Item._make, zip(*pickle.loads(chunk), strict=True))

    def __getitem__(self, position: int) -> Item:
        at = position + self._count if position < 0 else position
        if not 0 <= at < self._count:
            raise IndexError(f"item {position} of {self._count}")
        columns = pickle.loads(self._chunks[at // PACKED_CHUNK])
        return Item._make(column[at % PACKED_CHUNK] for column in columns)

    def __reduce__(self) -> tuple:  # to a Dask worker: the bytes as they are, not re-packed
        return _unpickled, (self._count, self._chunks)


def columns(items: Sequence[Item], *names: str) -> tuple[list, ...]:
    """These fields of every item, a list each, in order: a PackedItems's read from its
    columns, with no Item made (a fifth of the time of a pass over its Items)."""
    at = [Item._fields.index(name) for name in names]
    if not isinstance(items, PackedItems):
        return tuple([item[i] for item in items] for i in at)
    found: tuple[list, ...] = tuple([] for _ in names)
    for chunk in items._chunks:
        unpacked = pickle.loads(chunk)
        for values, i in zip(found, at, strict=True):
            values.extend(unpacked[i])
    return found


def picked(items: Sequence[Item], positions: Sequence[int], *names: str) -> tuple[list, ...]:
    """These fields of the items at `positions` (ascending: each chunk is unpacked once), a
    list each."""
    at = [Item._fields.index(name) for name in names]
    found: tuple[list, ...] = tuple([] for _ in names)
    if not isinstance(items, PackedItems):
        for p in positions:
            for values, i in zip(found, at, strict=True):
                values.append(items[p][i])
        return found
    chunk, unpacked = -1, ()
    for p in positions:
        if p // PACKED_CHUNK != chunk:
            chunk = p // PACKED_CHUNK
            unpacked = pickle.loads(items._chunks[chunk])
        for values, i in zip(found, at, strict=True):
            values.append(unpacked[i][p % PACKED_CHUNK])
    return found


def _unpickled(count: int, chunks: tuple[bytes, ...]) -> PackedItems:
    packed = PackedItems(())
    packed._count, packed._chunks = count, chunks
    return packed


def packed_plan(plan: Plan, dataset: Dataset) -> tuple[Plan, Dataset]:
    """The plan with each shard's items packed, and the dataset without its items (the plan's
    shards hold every one): the Items and their keys are freed, ~135 bytes an item
    (200,000 files: `python -m benchmarks.listing --pack`). A shard whose items are not a
    tuple (a streamed list's range) is kept as it is."""
    shards = tuple(replace(spec, items=PackedItems(spec.items))
                   if isinstance(spec.items, tuple) else spec
                   for spec in plan.shards)  # fmt: skip
    return replace(plan, shards=shards), replace(dataset, splits=dict.fromkeys(dataset.splits, ()))
