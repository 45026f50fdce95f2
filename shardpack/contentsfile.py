"""contents.json read back: which items each shard of a pack holds (keys, content keys, a
digest of label and fields, sizes, counts) and which it skipped, as `pack --append`/`--update`
(packing/contents.py, which writes it) and `--source shardpack` (sources/repack.py) read it.

Read as untrusted: bounded in bytes and in values (as index.json is: each a Python object),
and every field checked against the index it must agree with.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import NamedTuple

from shardpack.errors import Option, OutputError
from shardpack.index import MAX_COUNT, Index, ShardInfo, json_values
from shardpack.layout import CONTENTS_NAME, INDEX_NAME
from shardpack.schema import LABEL
from shardpack.storage import Storage

FORMAT = "shardpack-contents"
# A million records' keys and content keys fit many times over.
MAX_CONTENTS_BYTES = 1 << 30
# The JSON values (numbers, strings, lists, objects: each a Python object once parsed) a file
# may hold per record and skipped item it describes, and per shard: what a pack writes is
# well under each (9 a record, 11 one of a --dedup near dataset, and 4 more for each of the 4
# reasons a record lost boxes for: a DROPPED_IN row; 11 a copy --dedup left out); past them it
# is planted, and refused unread.
VALUES_PER_ITEM = 32
VALUES_PER_SHARD = 256
# A shard's tally row (packing/facts.py) naming a record of it that lost boxes: its value
# "<reason>: <key>" (dropped_in), its count the boxes lost for that reason. A shard's tally
# names each such record once a reason (a split's summary, the first few: packing/stats.py).
DROPPED_IN = "boxes_dropped_in"

# The most each record's CRC-32C and sizes may be: a grow finds copies by them as uint32 and
# bytes (packing/duplicates.py) and sums them in index.json's summaries, sides as uint32 and
# bytes as index.json's counts (packing/stats.py); past them, planted.
_CRC_MOST = 2**32 - 1
_MOST = {"crc": _CRC_MOST, "width": 2**32 - 1, "height": 2**32 - 1, "size": MAX_COUNT,
         "stored": MAX_COUNT}  # fmt: skip

# One shard's: "keys", "crc", "size", "width", "height", "stored" (the image's bytes as the
# record holds it; each of these three 0: not noted, by a version before it), "meta", "digest"
# (of its bytes, hex; "": not noted, by a version before it), "copy"
# (one per record), "label_counts", "tally" ([what, value, count]), "lossless" ([the images
# --encode keep made PNG]; absent: not noted, by a version before it), "sha256" ([the shard's];
# absent: not noted, by a version before it), "skipped" and "reasons" (one per item skipped)
Entry = dict[str, list]
Skip = tuple[str, str, str]  # (split, key, reason)
# A copy --dedup left out: (split, key, crc, size, meta, copy, mtime), its content key, the
# number it shares with its kept copy (as a record's "copy") and its file's mtime as stamps.py
# keeps a record's (0: none), so that a grow needs not read it again.
Dropped = tuple[str, str, int, int, int, int, int]


class Noted(NamedTuple):
    """What contents.json notes of the copies --dedup found: those it left out, and the
    perceptual hash of each image (--dedup near), so that a grow reads neither them nor the
    held images again to find copies among them."""

    dropped: tuple[Dropped, ...] = ()
    near: tuple[tuple[str, int], ...] = ()  # (key, hash)


@dataclass(frozen=True)
class Contents:
    """What OUT holds: each listed shard's entry, and the items skipped with no shard to note
    them (`loose`: the shard that tried them was rewritten, or came out empty)."""

    shards: dict[str, Entry]
    loose: tuple[Skip, ...] = ()
    noted: Noted = field(default_factory=Noted)  # none: an older shardpack's (read again)

    def skips(self) -> Iterator[tuple[str, str]]:
        """(key, reason) of every skip OUT holds: its shards' and the loose ones."""
        for entry in self.shards.values():
            yield from zip(entry["skipped"], entry["reasons"], strict=True)
        yield from ((key, why) for _, key, why in self.loose)

    def without_skips(self, keys: frozenset[str]) -> Contents:
        """What OUT holds without the skips of `keys` (its shards' and the loose ones)."""
        if not keys:
            return self
        shards = {}
        for file, entry in self.shards.items():
            kept = [(k, why) for k, why in zip(entry["skipped"], entry["reasons"], strict=True)
                    if k not in keys]  # fmt: skip
            shards[file] = {**entry, "skipped": [k for k, _ in kept],
                            "reasons": [why for _, why in kept]}  # fmt: skip
        return replace(self, shards=shards, loose=tuple(s for s in self.loose if s[1] not in keys))


# A record's "meta" from here up is a digest of its label and fields; under it, its class + 1
# (0: unlabelled) for an item of one class and no fields (packing.contents.meta).
DIGESTED = 1 << 62


def load_contents(out: Storage, index: Index) -> Contents:
    """The entry of every shard `index` lists, checked against it, and the loose skips.

    Raises:
        OutputError: contents.json is missing, too large (in bytes or in values for the items
            the index counts), not JSON, or disagrees with the index.
    """
    path = out.path(CONTENTS_NAME)
    fix = ("repack with ", Option("overwrite", True), " to write it anew")
    shards = [s for split in index.splits.values() for s in split.shards]
    items = sum(s.num_records for s in shards) + index.num_skipped
    # a shard's label_counts holds a count a class: thousands of classes outgrow VALUES_PER_SHARD
    limit = VALUES_PER_ITEM * items + (VALUES_PER_SHARD + len(index.classes)) * (len(shards) + 1)
    try:
        with out.open(CONTENTS_NAME) as blob:
            if blob.size > MAX_CONTENTS_BYTES:
                raise OutputError(f"{path}: over {MAX_CONTENTS_BYTES:,} bytes; ", *fix)
            text = blob.pread(blob.size, 0)
        if (found := json_values(text, limit)) > limit:  # each a Python object: refused unread
            raise OutputError(f"{path}: {found:,} values, over the {limit:,} that the "
                              f"index's {items:,} items, {len(shards):,} shards and "
                              f"{len(index.classes):,} classes allow; ",
                              *fix)  # fmt: skip
        doc = json.loads(text)
    except FileNotFoundError:
        raise OutputError(f"{path}: not found (OUT was packed by an older shardpack, which "
                          f"kept no list of its items); ", *fix) from None  # fmt: skip
    except (OSError, ValueError, RecursionError) as e:
        raise OutputError(f"{path}: unreadable ({e}); ", *fix) from None
    listed = doc.get("shards") if isinstance(doc, dict) else None
    loose = doc.get("loose", []) if isinstance(doc, dict) else None
    dropped = doc.get("dropped", []) if isinstance(doc, dict) else None
    near = doc.get("near", []) if isinstance(doc, dict) else None
    if (not isinstance(listed, dict) or doc.get("format") != FORMAT or not _skips(loose)
            or not _dropped(dropped) or not _hashes(near)):  # fmt: skip
        raise OutputError(f"{path}: not a contents file shardpack wrote; ", *fix)
    found = {}
    label = index.schema.get(LABEL)
    one_label = label is not None and label.shape == ()  # each record counts one class at most
    for shard in shards:
        entry = listed.get(shard.file)
        if not _agrees(entry, shard.num_records, one_label) or not _same_shard(entry, shard):
            raise OutputError(f"{path}: does not agree with index.json about "
                              f"{shard.file}; ", *fix)  # fmt: skip
        found[shard.file] = _filled(entry)
    _counted(out, index, found, fix)
    _each_key_once(path, found, fix)
    noted = Noted(tuple(map(tuple, dropped)), tuple(map(tuple, near)))
    return Contents(found, tuple(map(tuple, loose)), noted)


def _counted(out: Storage, index: Index, found: dict[str, Entry], fix: tuple) -> None:
    """Refuse an index whose splits' record or class counts are not its shards' (a grow would
    carry them on into the next index)."""
    for name, split in index.splits.items():
        counts = [0] * max(len(index.classes), len(split.class_counts))
        for shard in split.shards:
            for label, n in enumerate(found[shard.file]["label_counts"][: len(counts)]):
                counts[label] += n
        told = [*split.class_counts, *[0] * (len(counts) - len(split.class_counts))]
        if told != counts or split.num_records != sum(s.num_records for s in split.shards):
            raise OutputError(f"{out.path(INDEX_NAME)}: split {name!r} counts other records or "
                              "classes than its shards hold (as contents.json lists them); ",
                              *fix)  # fmt: skip


def _each_key_once(path: str, found: dict[str, Entry], fix: tuple) -> None:
    """Refuse a record key listed twice: pack keys each item once in a dataset, and a grow
    takes a record of another key for that key's (kept twice, or another dropped unseen)."""
    counted = Counter(key for entry in found.values() for key in entry["keys"])
    if len(counted) < sum(counted.values()):
        key, _ = counted.most_common(1)[0]
        shards = [file for file, entry in found.items() if key in entry["keys"]]
        raise OutputError(f"{path}: lists record {key!r} more than once ({', '.join(shards)}); "
                          "a grow would keep one record twice or drop another; ", *fix)  # fmt: skip


def _skips(loose: object) -> bool:
    """Whether `loose` is a list of [split, key, reason] strings."""
    return isinstance(loose, list) and all(
        isinstance(s, list) and len(s) == 3 and all(isinstance(v, str) for v in s) for s in loose
    )


def _dropped(dropped: object) -> bool:
    """Whether `dropped` is a list of [split, key, crc, size, meta, copy, mtime]: two strings,
    then integers, none negative, the CRC and size within a record's (_MOST)."""
    return isinstance(dropped, list) and all(
        isinstance(d, list) and len(d) == 7 and _only(d[:2], str) and _only(d[2:], int)
        and min(d[2:]) >= 0 and d[2] <= _CRC_MOST and d[3] <= MAX_COUNT
        for d in dropped
    )  # fmt: skip


def _hashes(near: object) -> bool:
    """Whether `near` is a list of [key, perceptual hash] (64 bits)."""
    return isinstance(near, list) and all(
        isinstance(n, list) and len(n) == 2 and type(n[0]) is str and type(n[1]) is int
        and 0 <= n[1] < 1 << 64
        for n in near
    )  # fmt: skip


def _filled(entry: Entry) -> Entry:
    """An entry with the fields an older shardpack did not write: no sizes, stored sizes,
    digests, copies, tallies or reasons noted (its items' labels and fields are then taken as
    unchanged). Each 0, None or empty tally means "not noted", never a value: summaries leave
    such figures out (packing/stats.py), and a copy 0 (none known) is confirmed by its bytes."""
    n = len(entry["keys"])
    older = {"width": [0] * n, "height": [0] * n, "stored": [0] * n, "meta": [None] * n,
             "digest": [""] * n, "copy": [0] * n, "tally": [],
             "reasons": ["skipped"] * len(entry["skipped"])}  # fmt: skip
    return {**entry, **{k: v for k, v in older.items() if k not in entry}}  # entry's order kept


def _same_shard(entry: dict, shard: ShardInfo) -> bool:
    """Whether the entry names the shard's sha256 (an older shardpack's names none): an entry
    moved under another shard's name would have a grow rewrite the wrong shard."""
    return entry.get("sha256", [shard.sha256]) == [shard.sha256]


def _agrees(entry: object, records: int, one_label: bool) -> bool:
    """Whether a shard's entry holds `records` keys, content keys, sizes (each within _MOST)
    and digests, class counts (of at most `records` together, with `one_label`: a multi-label
    record counts each label it lists, one listed twice twice), at most `records` images made
    PNG, and a reason for each item skipped."""
    if not isinstance(entry, dict):
        return False
    fields = ("keys", "crc", "size", "label_counts", "skipped")
    keys, crc, size, counts, skipped = (entry.get(k) for k in fields)
    more = {k: entry[k] for k in ("width", "height", "stored", "meta", "copy") if k in entry}
    noted = ["skipped"] * len(skipped) if isinstance(skipped, list) else None  # no reasons kept
    tally, reasons = entry.get("tally", []), entry.get("reasons", noted)
    lossless, digests = entry.get("lossless", [0]), entry.get("digest", [""] * records)
    return (
        all(isinstance(v, list) for v in (keys, crc, size, counts, skipped, tally, reasons))
        and _digests(digests, records)
        and isinstance(lossless, list)
        and len(lossless) == 1
        and all(isinstance(v, list) and len(v) == records for v in more.values())
        and len(keys) == len(crc) == len(size) == records
        and len(reasons) == len(skipped)
        and all(_only(v, str) for v in (keys, skipped, reasons))
        and all(
            _only(v, int) and min(v, default=0) >= 0
            for v in (crc, size, counts, lossless, *more.values())
        )
        and all(max(entry.get(k, ()), default=0) <= most for k, most in _MOST.items())
        and lossless[0] <= records  # the shard's images made PNG: a count index.json takes
        and tally_fits(tally, records)
        and (not one_label or sum(counts) <= records)
    )


def _digests(digests: object, records: int) -> bool:
    """Whether `digests` is a shard's: a record's 32 hex digits each, or "" (not noted)."""
    return (isinstance(digests, list) and len(digests) == records and _only(digests, str)
            and all(not d or (len(d) == 32 and _HEX.fullmatch(d)) for d in digests))  # fmt: skip


_HEX = re.compile(r"[0-9a-f]{32}")


def _only(values_: list, kind: type) -> bool:
    """Whether every value is of exactly `kind` (a bool is no int): map and set run in C, a
    tenth of a test per value over a million records."""
    return set(map(type, values_)) <= {kind}


def tally_fits(tally: object, records: int) -> bool:
    """Whether `tally` is a shard's (a list of [what, value, count]) that names, of each reason
    boxes were dropped for, no more records (DROPPED_IN rows) than the shard's `records`."""
    if not isinstance(tally, list) or not all(map(_tallied, tally)):
        return False
    named = Counter(dropped_in(value)[0] for what, value, _ in tally if what == DROPPED_IN)
    return max(named.values(), default=0) <= records


def dropped_in(value: str) -> tuple[str, str]:
    """The reason and the record's key a DROPPED_IN row's value names."""
    reason, _, key = value.partition(": ")
    return reason, key


def _tallied(row: object) -> bool:
    """Whether a tally row is [what, value, count]."""
    return (
        isinstance(row, list)
        and len(row) == 3
        and isinstance(row[0], str)
        and isinstance(row[1], str)
        and type(row[2]) is int
    )
