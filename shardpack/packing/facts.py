"""What a worker notes of each record it writes, compactly: a content key (CRC32C and size of
the bytes the source gave; of three stripes of a JPEG or PNG), the digest of all those bytes
that confirms a copy, the written width and height, the image file's mtime (stamps.py) and the
size of the image as stored (after any resize or re-encoding) in one packed table, and per
shard counts of formats, channels and EXIF orientations, and of a dataset of objects
(packing/objects.py): objects, images without, objects per image, objects per class (ids for
class features, names for text), box sizes as COCO defines them, and the boxes dropped by
reason with each record that lost them."""

from __future__ import annotations

import struct
from collections import Counter

import numpy as np
import xxhash

from shardpack.contentsfile import DROPPED_IN
from shardpack.crc import crc32c
from shardpack.packing.objects import Objects, size_name

# One row per item of the shard, in the plan's order; size 0: the item was not written (then
# mtime and stored hold the stamp of the file its read refused, size in stored: skip());
# mtime 0: its file has no stamp; digest: content_digest's 16 bytes; stored: the bytes of the
# record's image (0: not noted, a row of the version before it).
FACT_DTYPE = np.dtype([("crc", "<u4"), ("size", "<u8"), ("digest", "V16"), ("width", "<u4"),
                       ("height", "<u4"), ("mtime", "<i8"), ("stored", "<u8")])  # fmt: skip
# The rows of the version before "stored", which a journal it left still holds (a resume).
_BEFORE_STORED = np.dtype([(name, FACT_DTYPE[name]) for name in FACT_DTYPE.names[:-1]])


# A row packed into the table's bytes in one call (numpy's assignment of a tuple to a row costs
# ~4x as much): FACT_DTYPE's columns in struct's codes, no padding between them.
_CODES = {"<u4": "I", "<u8": "Q", "<i8": "q", "|V16": "16s"}
_ROW = struct.Struct("<" + "".join(_CODES[FACT_DTYPE[name].str] for name in FACT_DTYPE.names))


# A compressed file's key reads its first, middle and last STRIPE bytes: a whole photo's CRC32C
# is about issue 27's bound alone (2% of the passthrough pack), three stripes a third of that
# (`python -m benchmarks.dedup`). Two compressed images of one size alike there are near copies
# at least, and sha256 tells them apart; uncompressed files (alike margins) are read whole.
STRIPE = 4096
_COMPRESSED = (b"\xff\xd8", b"\x89PNG")
# The tallies (what) of objects; a split's summary holds each as {value: count}.
OBJECTS = "objects"  # "objects": how many; "images without objects": how many
PER_IMAGE = "objects_per_image"  # "n": images holding n objects
CLASSES = "object_classes"  # class id (a class feature's) or name (text): objects
SIZES = "box_sizes"  # small, medium, large: boxes
WITHOUT = "images without objects"
DROPPED = "boxes_dropped"  # why a box was dropped (packing/boxes.py's reasons): boxes
# The records that lost boxes, a tally row (DROPPED_IN, "<reason>: <key>", boxes) each: a
# shard's tally names every one (a grow counts a record it keeps unfetched from them: kept.py;
# contentsfile.py reads them back, no more of a reason than the shard's records),
# a split's summary the first MAX_NAMED_DROPS by key of each reason (stats.py: whatever the
# order the shards land in; the counts count them all), as duplicates names 20 label conflicts.
MAX_NAMED_DROPS = 20
# Distinct text class names tallied in a shard; the rest count as OTHER (a summary stays small
# whatever a text column holds).
MAX_NAMES = 1000
OTHER = "(other)"


def content_key(loaded: bytes | np.ndarray) -> tuple[int, int]:
    """(CRC32C, size) of what a source loaded: an image file's bytes, or pixels."""
    if not isinstance(loaded, bytes):
        data = np.ascontiguousarray(loaded).data
        return crc32c(data), data.nbytes
    size = len(loaded)
    if size <= 3 * STRIPE or not loaded.startswith(_COMPRESSED):
        return crc32c(loaded), size
    view, middle = memoryview(loaded), (size - STRIPE) // 2
    crc = crc32c(view[middle : middle + STRIPE], crc32c(view[:STRIPE]))
    return crc32c(view[-STRIPE:], crc), size


def content_bytes(loaded: bytes | np.ndarray) -> bytes | memoryview:
    """The bytes content_key hashes, for a stronger hash of the candidates."""
    return loaded if isinstance(loaded, bytes) else np.ascontiguousarray(loaded).data


def content_digest(loaded: bytes | np.ndarray) -> bytes:
    """XXH3-128 of all of content_bytes: what confirms a copy. Not a cryptographic hash, and
    it need not be: it tells apart the images of one dataset, not a forger's (~2 µs for a
    46 kB photo, against sha256's ~70: benchmarks/README.md, "Copies")."""
    return xxhash.xxh3_128_digest(content_bytes(loaded))


class ShardFacts:
    """A shard's notes, filled one written record at a time (~1 us a record)."""

    def __init__(self, count: int, objects: Objects | None = None) -> None:
        """`count`: the shard's items; `objects`: the schema's object features (objects_of),
        counted as each record is."""
        self._rows = bytearray(count * _ROW.size)  # FACT_DTYPE's rows, each item's 0 until noted
        self.objects = objects
        self.counts: Counter[tuple[str, str]] = Counter()
        # (format, channels, orientation) -> records: one count a record, spelled out by tally
        self.looks: Counter[tuple[str, int, int | None]] = Counter()
        self._names = 0  # distinct text class names tallied
        self._dropped_in: dict[str, dict[str, int]] = {}  # reason -> key -> boxes

    def add(
        self,
        position: int,
        loaded: bytes | np.ndarray,
        features: dict,
        orientation: int | None,
        stamp: tuple[int, int] | None = None,
    ) -> None:
        """Note the record of the shard's `position`-th item; `orientation`: the EXIF one its
        header probe read (images.ImageInfo: a JPEG's; None for others, not counted); `stamp`:
        its file's (size, mtime) as its read saw them (stamps.py; None: none)."""
        crc, size = content_key(loaded)
        # of another size: the file changed as it was read
        mtime = stamp[1] if stamp is not None and stamp[0] == size else 0
        self.note(position, (crc, size, content_digest(loaded)), features, orientation, mtime)

    def note(
        self,
        position: int,
        key: tuple[int, int, bytes],
        features: dict,
        orientation: int | None,
        mtime: int = 0,
    ) -> None:
        """Note a record whose content key and digest (`key`) are known: add's row, a grow's
        kept record's (kept.py) as well."""
        _ROW.pack_into(self._rows, position * _ROW.size, *key, features["width"],
                       features["height"], mtime, len(features["image"]))  # fmt: skip
        self.looks[features["format"], features["channels"], orientation] += 1
        if self.objects is not None:
            self._add_objects(features)

    def skip(self, position: int, stamp: tuple[int, int] | None) -> None:
        """Note the stamp (stamps.py: size, mtime; None or an mtime of 0: none) of the file of
        the shard's `position`-th item, skipped: a grow reads it again once its stamp is
        another."""
        if stamp is None or not stamp[1]:
            return
        _ROW.pack_into(self._rows, position * _ROW.size, 0, 0, bytes(16), 0, 0, stamp[1],
                       stamp[0])  # fmt: skip

    def drop(self, key: str, dropped: dict[str, int]) -> None:
        """Count the boxes the record `key` lost, by reason (boxes.follow), and name it."""
        for reason, n in dropped.items():
            self.counts[DROPPED, reason] += n
            named = self._dropped_in.setdefault(reason, {})
            named[key] = named.get(key, 0) + n

    def _add_objects(self, features: dict) -> None:
        """Count a written record's objects (its features as encoded: flat lists)."""
        boxes = np.asarray(features.get(self.objects.boxes, ()), np.float64).reshape(-1, 4)
        self.counts[OBJECTS, OBJECTS] += len(boxes)
        self.counts[PER_IMAGE, str(len(boxes))] += 1
        if not len(boxes):
            self.counts[OBJECTS, WITHOUT] += 1
        area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
        for pixels in (area * features["height"] * features["width"]).tolist():
            self.counts[SIZES, size_name(pixels)] += 1
        labels = features.get(self.objects.label, ()) if self.objects.label else ()
        for label in labels.tolist() if isinstance(labels, np.ndarray) else labels:
            name = label.decode("utf-8", "replace") if isinstance(label, bytes) else str(label)
            if isinstance(label, bytes) and (CLASSES, name) not in self.counts:
                self._names += 1
                name = name if self._names <= MAX_NAMES else OTHER
            self.counts[CLASSES, name] += 1

    def content(self) -> bytes:
        return bytes(self._rows)

    def tally(self) -> tuple[tuple[str, str, int], ...]:
        """(what, value, count) of each format, channel count and orientation seen (and of
        each object tally)."""
        counts = self.counts.copy()
        for (fmt, channels, orientation), n in self.looks.items():
            counts["format", fmt] += n
            counts["channels", str(channels)] += n
            if orientation is not None:
                counts["orientation", str(orientation)] += n
        for reason, named in self._dropped_in.items():
            counts.update({(DROPPED_IN, f"{reason}: {key}"): n for key, n in named.items()})
        return tuple(sorted((what, value, n) for (what, value), n in counts.items()))


def record_sizes(rows: np.ndarray, num_records: int) -> set[tuple[int, int]] | None:
    """The distinct (height, width)s of a shard's written records, from its table (facts_of);
    None when the table does not note exactly num_records written records."""
    rows = rows[rows["size"] > 0]  # size 0: an item not written
    if len(rows) != num_records:
        return None
    return set(zip(rows["height"].tolist(), rows["width"].tolist(), strict=True))


def facts_of(content: bytes, count: int) -> np.ndarray:
    """A ShardResult's content as its table of `count` rows: a table of the version before
    "stored" with that column 0 (not noted); all zeros (nothing noted) where the bytes hold
    neither (a journal of another version)."""
    if len(content) == count * FACT_DTYPE.itemsize:
        return np.frombuffer(content, FACT_DTYPE)
    table = np.zeros(count, FACT_DTYPE)
    if count and len(content) == count * _BEFORE_STORED.itemsize:
        older = np.frombuffer(content, _BEFORE_STORED)
        for name in _BEFORE_STORED.names:
            table[name] = older[name]
    return table


def object_counts(summary: dict) -> tuple[object, object]:
    """(objects, images without objects) of a split's summary, as read from an index: the
    second is counted only where there is one, so a split whose every image holds objects has
    no such key (read as untrusted: KeyError where the first is missing)."""
    counted = summary[OBJECTS]
    return counted[OBJECTS], counted.get(WITHOUT, 0)
