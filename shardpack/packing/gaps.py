"""Closing the gaps an `--update` leaves in a split's shard numbering, so that TFDS, which reads
a split through one numbering from 0, reads the updated dataset too.

Once the update's index.json is in place (with gaps), each split's shards numbered past its
count are copied to the free names below it (a hard link on a local disk; on a store a copy of
as many shards as the update removed at most), a second index.json lists them there, and the
old names go. Every index that lands names only files that are there: a stop between the two
leaves the first one whole, and the next grow closes the gaps (grow.close_gaps). On every store
alike, so the same commands give the same names on a disk and in a bucket.
"""

from __future__ import annotations

from dataclasses import replace

from shardpack.index import Index, SplitInfo


def gap_moves(index: Index) -> dict[str, str]:
    """Old name -> free name: each split's shards numbered past its count, in order, into the
    free names below it, in order ({} where the numbering has no gap)."""
    found = {}
    for split, entry in index.splits.items():
        listed = [s.file for s in entry.shards]
        names = _names(index, split, entry)
        held, numbered = set(listed), set(names)  # once: a comprehension's test runs per name
        free = [n for n in names if n not in held]
        found.update(zip([f for f in listed if f not in numbered], free, strict=True))
    return found


def _names(index: Index, split: str, entry: SplitInfo) -> list[str]:
    """The names of a split's shards numbered from 0, with the count its names keep."""
    count = entry.names_count
    return [index.container.shard_name(index.name, split, i, count)
            for i in range(len(entry.shards))]  # fmt: skip


def close_gaps(index: Index, moved: dict[str, str]) -> Index:
    """The index with the `moved` shards under their new names, each split's shards in
    numbering order, and the old names to remove once it is in place (`retired`)."""
    splits = dict(index.splits)
    for split, entry in index.splits.items():
        if not any(s.file in moved for s in entry.shards):
            continue
        number = {name: i for i, name in enumerate(_names(index, split, entry))}
        shards = sorted((replace(s, file=moved.get(s.file, s.file)) for s in entry.shards),
                        key=lambda s: number[s.file])  # fmt: skip
        splits[split] = replace(entry, shards=tuple(shards), next_shard=len(shards))
    return replace(index, splits=splits, retired=tuple(sorted(moved)))
