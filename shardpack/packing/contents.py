"""contents.json: which items each shard holds (their keys, content keys and per-class counts),
so that `pack --append` and `--update` know what OUT has without reading a shard.

Written by every pack beside index.json (before it), read back as untrusted: bounded, and
every field checked against the index it must agree with.
"""

from __future__ import annotations

import json

from shardpack.errors import OutputError
from shardpack.index import Index
from shardpack.layout import CONTENTS_NAME
from shardpack.packing.facts import table
from shardpack.packing.plan import Plan, ShardResult
from shardpack.storage import Storage
from shardpack.storage.atomic import json_bytes

FORMAT = "shardpack-contents"
# A million records' keys and content keys fit many times over.
MAX_CONTENTS_BYTES = 1 << 30

Entry = dict[str, list]  # "keys", "crc", "size", "label_counts", "skipped": one shard's


def entries(plan: Plan, results: list[ShardResult]) -> dict[str, Entry]:
    """Each written shard's entry: the keys and content keys of its records, in order."""
    by_file = {r.file: r for r in results}
    found: dict[str, Entry] = {}
    for spec in plan.shards:
        result = by_file[spec.file]
        rows = table(result.content, len(spec.items))
        written = [i for i in range(len(spec.items)) if rows["size"][i] > 0]
        found[spec.file] = {
            "keys": [spec.items[i].key for i in written],
            "crc": [int(rows["crc"][i]) for i in written],
            "size": [int(rows["size"][i]) for i in written],
            "label_counts": list(result.label_counts),
            # planned but skipped (a bad image): not new to the next --append either
            "skipped": [spec.items[i].key for i in range(len(spec.items)) if rows["size"][i] == 0],
        }
    return found


def write_contents(out: Storage, shards: dict[str, Entry]) -> None:
    """Write contents.json for the shards an index is about to list."""
    out.put(CONTENTS_NAME, json_bytes({"format": FORMAT, "shards": shards}))


def load_contents(out: Storage, index: Index) -> dict[str, Entry]:
    """The entry of every shard `index` lists, checked against it.

    Raises:
        OutputError: contents.json is missing, too large, not JSON, or disagrees with the index.
    """
    path = out.path(CONTENTS_NAME)
    fix = "repack with --overwrite to write it anew"
    try:
        with out.open(CONTENTS_NAME) as blob:
            if blob.size > MAX_CONTENTS_BYTES:
                raise OutputError(f"{path}: over {MAX_CONTENTS_BYTES:,} bytes; {fix}")
            doc = json.loads(blob.pread(blob.size, 0))
    except FileNotFoundError:
        raise OutputError(f"{path}: not found (OUT was packed by an older shardpack, which "
                          f"kept no list of its items); {fix}") from None  # fmt: skip
    except (OSError, ValueError, RecursionError) as e:
        raise OutputError(f"{path}: unreadable ({e}); {fix}") from None
    shards = doc.get("shards") if isinstance(doc, dict) else None
    if not isinstance(shards, dict) or doc.get("format") != FORMAT:
        raise OutputError(f"{path}: not a contents file shardpack wrote; {fix}")
    found = {}
    for split in index.splits.values():
        for shard in split.shards:
            entry = shards.get(shard.file)
            if not _agrees(entry, shard.num_records):
                raise OutputError(f"{path}: does not agree with index.json about "
                                  f"{shard.file}; {fix}")  # fmt: skip
            found[shard.file] = entry
    return found


def _agrees(entry: object, records: int) -> bool:
    """Whether a shard's entry holds `records` keys, content keys and integer class counts."""
    if not isinstance(entry, dict):
        return False
    fields = ("keys", "crc", "size", "label_counts", "skipped")
    keys, crc, size, counts, skipped = (entry.get(k) for k in fields)
    return (
        all(isinstance(v, list) for v in (keys, crc, size, counts, skipped))
        and len(keys) == len(crc) == len(size) == records
        and all(isinstance(k, str) for k in (*keys, *skipped))
        and all(type(n) is int and n >= 0 for n in (*crc, *size, *counts))
    )
