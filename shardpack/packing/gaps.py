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

import copy

from shardpack.containers import Container

# Bytes a streamed copy moves at a time.


def moves(doc: dict, container: Container) -> dict[str, str]:
    """Old name -> free name: each split's shards numbered past its count, in order, into the
    free names below it, in order ({} where the numbering has no gap)."""
    found = {}
    for split, entry in doc["splits"].items():
        listed = [s["file"] for s in entry["shards"]]
        names = _names(doc["name"], split, entry, container)
        held, numbered = set(listed), set(names)  # once: a comprehension's test runs per name
        free = [n for n in names if n not in held]
        found.update(zip([f for f in listed if f not in numbered], free, strict=True))
    return found


def _names(name: str, split: str, entry: dict, container: Container) -> list[str]:
    """The names of a split's shards numbered from 0, with the count its names keep (an index
    of a pack never grown may lack it: its shard count)."""
    count = entry.get("name_count", len(entry["shards"]))
    return [container.shard_name(name, split, i, count) for i in range(len(entry["shards"]))]


def closed(doc: dict, moved: dict[str, str], container: Container) -> dict:
    """The index document with the `moved` shards under their new names, each split's shards in
    numbering order, and the old names to remove once it is in place (`retired`)."""
    doc = copy.deepcopy(doc)
    for split, entry in doc["splits"].items():
        if not any(s["file"] in moved for s in entry["shards"]):
            continue
        for shard in entry["shards"]:
            shard["file"] = moved.get(shard["file"], shard["file"])
        number = {name: i for i, name in enumerate(_names(doc["name"], split, entry, container))}
        entry["shards"].sort(key=lambda s: number[s["file"]])
        entry["next_shard"] = len(entry["shards"])
    doc["retired"] = sorted(moved)
    return doc
