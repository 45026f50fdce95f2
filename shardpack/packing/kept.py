"""Records a grow takes from the shard that held them, not from their source: images whose
read is a request (Storage.read_is_request): a URL list's, and objects of a store (an s3://
SRC, a manifest's s3:// images). `pack --update` rewrites a shard that holds a changed or
removed item; fetching every image of it again would cost a shard of downloads for one edited
caption or one rewritten object, and drop each image whose URL no longer answers (or whose GET
fails now). So each held image the compare took as unchanged unread (its URL unchanged: it
names its image; an object's listed stamp the held one: grow._compare, stamps.py) keeps its
record's image as it was stored (resized and encoded by the dataset's options, which a grow
must keep), with its row's label and fields now; only new and changed images are fetched. A
local file is read again (cheap, and exact), as is an object the compare read (its stamp, or
its row's values, changed): its worker takes the bytes the compare read, kept (UrlSpool).

The parent picks the records (`kept_records`), each with its shard and record number in OUT
(the old shards stay until the grown index lands), its content key from contents.json and its
held mtime (an object's, for the stamps of the next grow; a URL has none); a worker reads them
there (`KeptReader`). A kept record is the record a fresh pack of the same bytes writes, but
where the dataset moves geometry with the pixels (boxes, keypoints, masks) and the row's values
changed: the new values must follow the pixels of the image as fetched, so such a row is
fetched again. Its facts are the held ones (content key, written size, mtime) and so are the
boxes it lost, by reason: its row and bytes unchanged, a fresh pack drops as many, and its held
shard's tally names each record that lost any. A kept record is never fetched again to count
them (its URL may no longer answer, and a grow keeps what OUT holds): in a shard an older
shardpack wrote, whose tally names the first 20 records of each reason or none, the boxes of a
record it does not name go uncounted, and the recount may undercount there. Its EXIF
orientation and whether --encode keep made it PNG are counted where its stored bytes are the
bytes fetched (or, for the second, where the options neither resize nor turn an image: a PNG
of other bytes was made so), unknown (not counted) otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

from shardpack import images
from shardpack.containers import CONTAINERS, ShardReader
from shardpack.contentsfile import DROPPED_IN, dropped_in
from shardpack.errors import ImageError, Option, RecordError, SourceError
from shardpack.options import PackOptions
from shardpack.packing.facts import ShardFacts, content_key
from shardpack.schema import Schema, example_value
from shardpack.sources import Item
from shardpack.sources.openfiles import OpenFiles
from shardpack.storage import Storage

# Held shards a worker keeps open: a rewritten shard draws its kept records from the few
# shards the update touched, shuffled among them.
KEEP_SHARDS = 8


class Kept(NamedTuple):
    """Where a kept record is in OUT, and its content key (contents.json's)."""

    file: str  # the held shard
    number: int  # the record's number in it
    crc: int
    size: int  # of the image as fetched
    dropped: tuple[tuple[str, int], ...] = ()  # the boxes it lost when packed, by reason
    mtime: int = 0  # its held stamp's (stamps.py; 0: none, a URL's)


def kept_records(
    items: Iterable[Item],
    held: Mapping[str, tuple[str, int, int, int | None]],
    contents: Mapping[str, Mapping[str, list]],
    changed: frozenset[str],
    moved: bool,
    read: Mapping[str, object],
    known: Mapping[str, int],
    root: Storage,
) -> dict[str, Kept]:
    """key -> Kept of each of `items` whose record is taken from its held shard: an image OUT
    holds (`held`: key -> (shard, number, size, meta); `contents`: the shards' entries) that
    the compare took as unchanged unread (not in `read`, its held items read) and whose read
    is a request (`root`: Storage.read_is_request), but, where the dataset moves geometry with
    the pixels (`moved`), not one whose label or fields changed (`changed`). Each with its held
    mtime (`known`: stamps.py) and the boxes its shard's tally names it lost."""
    found = {}
    lost: dict[str, dict[str, tuple[tuple[str, int], ...]]] = {}  # each held shard's, read once
    for item in items:
        where = held.get(item.key)
        if (where is None or item.key in read or (moved and item.key in changed)
                or not root.read_is_request(item.path)):  # fmt: skip
            continue
        file, number, size, _ = where
        if file not in lost:
            lost[file] = _lost(contents[file]["tally"])
        dropped = lost[file].get(item.key, ())
        found[item.key] = Kept(file, number, contents[file]["crc"][number], size, dropped,
                               known.get(item.key, 0))  # fmt: skip
    return found


def _lost(tally: list) -> dict[str, tuple[tuple[str, int], ...]]:
    """key -> the boxes it lost, by reason, of each record a held shard's tally names."""
    lost: dict[str, list[tuple[str, int]]] = {}
    for what, value, n in tally:
        if what == DROPPED_IN:
            reason, key = dropped_in(value)
            lost.setdefault(key, []).append((reason, n))
    return {key: tuple(sorted(reasons)) for key, reasons in lost.items()}


class KeptReader:
    """A worker's reads of kept records from OUT's held shards, a few open at once."""

    def __init__(self, out: Storage, options: PackOptions, schema: Schema, original: bool) -> None:
        """`original`: the records hold what their writer was told of the image as fetched
        (ShardReader.original), written again."""
        container = CONTAINERS[options.format]
        self.out, self.schema, self.encode, self.original = out, schema, options.encode, original
        self.files: OpenFiles[ShardReader] = OpenFiles(
            lambda file: container.open(out, file, options.compression), KEEP_SHARDS
        )

    def record(self, item: Item, kept: Kept) -> dict[str, object]:
        """The kept record's features as a writer takes them (the image's as stored, with
        what img2dataset's naming keeps of the image as fetched), its key checked.

        Raises:
            ImageError: the record cannot be read, or holds another key (names the shard).
        """
        where = f"{self.out.path(kept.file)} record {kept.number}"
        try:
            reader = self.files.get(kept.file)
            example = reader[kept.number]
            original = reader.original(kept.number) if self.original else {}
        except (RecordError, SourceError, OSError, IndexError) as e:
            raise ImageError(item.key, f"{where}, which held it: cannot read it ({e}); pack "
                                       "with ", Option("overwrite", True), " to fetch it "
                                       "again") from None  # fmt: skip
        key = example.get("key", [b""])[0]
        if key != item.key.encode("utf-8", "surrogateescape"):
            raise ImageError(item.key, f"{where} holds {key!r}, not this image's record: the "
                                       "shard changed since it was packed; run shardpack "
                                       "verify on it")  # fmt: skip
        features = {name: _value(self.schema, name, example[name]) for name in example}
        features["format"] = features["format"].decode()
        return {**features, **original}

    def note(
        self, facts: ShardFacts, position: int, features: dict, kept: Kept, reshaped: bool
    ) -> bool:
        """Note a kept record in its shard's facts, with its held content key (its digest
        unknown: zeros; a grow reads none of a held record's) and mtime; whether --encode keep
        made its image PNG (`reshaped`: the options may resize an image or turn it upright, so
        a PNG of other bytes may have been a PNG fetched)."""
        image, orientation, made_png = features["image"], None, False
        if content_key(image) == (kept.crc, kept.size):  # stored as it came
            info = images.probe(image)
            orientation = None if info is None else info.orientation
        else:
            made_png = self.encode == "keep" and not reshaped and features["format"] == "png"
        facts.note(position, (kept.crc, kept.size, bytes(16)), features, orientation, kept.mtime)
        return made_png

    def close(self) -> None:
        self.files.close()


def _value(schema: Schema, name: str, values: list) -> object:
    """A feature's values as read, as a writer takes them (example_value's form)."""
    feature = schema[name]
    return values[0] if not feature.is_list else example_value(feature, values)
