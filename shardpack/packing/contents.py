"""contents.json: which items each shard holds (their keys, content keys, a digest of their
label and fields, the written sizes and per-class and per-format counts) and which it skipped
with the reason, so that `pack --append` and `--update` know what OUT has without reading a
shard, and recount its statistics, skips and copies as a fresh pack would.

Written by every pack beside index.json (before it); read back, as untrusted, by
shardpack.contentsfile (a lower layer: `--source shardpack` reads it too).
"""

from __future__ import annotations

import hashlib
import json

from shardpack.contentsfile import (
    DIGESTED,
    FORMAT,
    MAX_CONTENTS_BYTES,
    VALUES_PER_ITEM,
    VALUES_PER_SHARD,
    Contents,
    Entry,
    Skip,
    load_contents,
    values,
)
from shardpack.layout import CONTENTS_NAME
from shardpack.packing.facts import facts_of
from shardpack.packing.plan import Plan, ShardResult
from shardpack.sources import Item
from shardpack.storage import Storage

# What a grow reads of OUT is read by shardpack.contentsfile, and named here too.
__all__ = ["FORMAT", "MAX_CONTENTS_BYTES", "VALUES_PER_ITEM", "VALUES_PER_SHARD", "Contents",
           "Entry", "Skip", "entries", "load_contents", "meta", "values", "with_copies",
           "write_contents"]  # fmt: skip


def meta(item: Item) -> int:
    """A number for an item's label and fields: what its record holds beside the image, so that
    a relabelled row with the same image bytes is a changed item. An item of one class and no
    fields (a folder tree's: a million a grow) is its label + 1, unlabelled 0; others a
    digest, from 2**62 up."""
    label = item.label
    if not item.fields and (label is None or type(label) is int):
        return 0 if label is None else label + 1
    digest = hashlib.blake2b(repr((label, sorted(item.fields.items()))).encode(), digest_size=8)
    return DIGESTED | (int.from_bytes(digest.digest(), "little") >> 2)


def entries(plan: Plan, results: list[ShardResult]) -> dict[str, Entry]:
    """Each written shard's entry: the keys and content keys of its records, in order."""
    by_file = {r.file: r for r in results}
    found: dict[str, Entry] = {}
    for spec in plan.shards:
        result = by_file[spec.file]
        rows = facts_of(result.content, len(spec.items))
        written = [i for i in range(len(spec.items)) if rows["size"][i] > 0]
        reasons = dict(result.skipped)
        # planned but skipped (a bad image): not new to the next --append either
        skipped = [spec.items[i].key for i in range(len(spec.items)) if rows["size"][i] == 0]
        found[spec.file] = {
            "keys": [spec.items[i].key for i in written],
            "crc": [int(rows["crc"][i]) for i in written],
            "size": [int(rows["size"][i]) for i in written],
            "width": [int(rows["width"][i]) for i in written],
            "height": [int(rows["height"][i]) for i in written],
            "meta": [meta(spec.items[i]) for i in written],
            "label_counts": list(result.label_counts),
            "tally": [list(t) for t in result.tally],
            "skipped": skipped,
            "reasons": [reasons.get(key, "skipped") for key in skipped],
        }
    return found


def with_copies(
    shards: dict[str, Entry], groups: list[list[tuple]], unknown: frozenset[str]
) -> dict[str, Entry]:
    """The entries with each record's "copy": a number its exact copies (confirmed by digest)
    share, 0 for none known, so that the next grow reads one of them for all; those of the
    `unknown` shards (rewritten: their old records' bytes are not the items' now) all 0."""
    number = {member[1]: i for i, group in enumerate(groups, 1) for member in group}
    return {file: {**entry, "copy": [0 if file in unknown else number.get(key, 0)
                                     for key in entry["keys"]]}
            for file, entry in shards.items()}  # fmt: skip


def write_contents(out: Storage, shards: dict[str, Entry], loose: tuple[Skip, ...] = ()) -> None:
    """Write contents.json for the shards an index is about to list."""
    doc = {"format": FORMAT, "shards": shards, "loose": [list(s) for s in loose]}
    # compact: json's C encoder (an indent takes its Python one, ~5x slower on a million keys)
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    out.put(CONTENTS_NAME, text.encode("utf-8", "backslashreplace"))
