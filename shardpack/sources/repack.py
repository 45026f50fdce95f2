"""The shardpack source: the records of an earlier pack (a folder or URL holding our
index.json), packed again into another container, shard count or encoding, with their schema,
classes, keys and splits.

The scan keeps what an item needs: its shard, its record's number in it, its key, label and
other features. It takes them from the pack's contents.json, reading no shard, where that file
agrees with the index and its records carry no more than a class (`scan_held`); else it reads
every shard through its container (framing checked, each record against the index's schema:
`scan_shards`). Either way a worker checks each record it reads whole: framing, the schema,
and that its key, label and features are the item's; a record that fails is skipped (or
fails the run) in one line naming its shard and record number.

A worker opens the shards its items lie in (a few at once; a gzip shard decompressed once, by
its container, and its record count checked against the index) and reads each record at
random; the image bytes go on as they are stored (raw pixels as pixels). Where the
container's records are Example bytes (`raw_examples`), each is parsed once in the worker (and
once more in the scan where that reads the shards), where it was read (TFRecord's framing
around it). Into an Example container the record is encoded from its features, which gives
its very bytes back where nothing changed: that costs less than keeping the bytes read and
comparing them with it (benchmarks/README.md, issue 33 item 5's third round).
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple

from shardpack.containers import Container, ShardReader, checked
from shardpack.errors import (
    ImageError,
    IndexFormatError,
    Option,
    OutputError,
    RecordError,
    SourceError,
)
from shardpack.index import (
    FORMAT,
    STORED_FORMATS,
    Index,
    ShardInfo,
    load_index,
    record_fault,
)
from shardpack.layout import CONTENTS_NAME, INDEX_NAME, JOURNAL_FOLDER, JOURNAL_NAME, LOCK_NAME
from shardpack.options import PackOptions
from shardpack.schema import LABEL, Feature, Schema
from shardpack.sources.classlist import check_class_names
from shardpack.sources.openfiles import OpenFiles
from shardpack.sources.scanprogress import listed
from shardpack.sources.source import NO_FIELDS, Dataset, FieldValue, Item, Source
from shardpack.storage import Storage

if TYPE_CHECKING:
    import numpy as np

KIND = "shardpack"
_FORMATS = {f.encode() for f in STORED_FORMATS}  # what a record's `format` may name
IMAGE = "image"
BORROWED = (IMAGE,)  # decoded as views of the record: the scan needs its length only
KEEP_SHARDS = 8  # shards a worker keeps open (a shuffled shard draws from all of them)
SNIFF_BYTES = 4096  # where json.dumps puts index.json's "format", its first key


class ShardpackSource(Source):
    """An earlier pack's output, read through its index and containers."""

    name = KIND
    kinds = (KIND,)
    described = "a shardpack output (a folder holding index.json)"
    splits_from = "the splits it was packed with"

    def recognise(self, root: Storage, options: PackOptions) -> Storage | None:
        required = options.source == self.name
        if root.kind() == "dir" and root.kind(INDEX_NAME) == "file":
            if required or _ours(root):
                return root
        elif required:
            raise SourceError(f"{root.path()}: holds no {INDEX_NAME}; ",
                              *(unfinished_run(root) or ("pass the output folder of a "
                                                         "shardpack pack run",)))  # fmt: skip
        return None

    def scan(
        self, found: Storage, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        if options.classes is not None:
            raise SourceError(f"{found.path()}: a shardpack output brings its class list; "
                              "drop ", Option("classes"))  # fmt: skip
        index = _index(found)
        warnings = _rereads(index) if options.shuffle else ()
        return scan_held(index, warnings) or scan_shards(index, warnings)

    def load(
        self, item: Item, root: Storage, options: PackOptions, cache: dict
    ) -> bytes | np.ndarray:
        return load(item, root, cache)

    def item_files(self, items: Iterable[Item]) -> Iterator[tuple[str, int]]:
        return iter(())  # records are read from their shards at random, by load

    def default_name(self, dataset: Dataset) -> str:
        return _index(dataset.root).name


def unfinished_run(root: Storage) -> tuple[str | Option, ...] | None:
    """What to do where `root` is the OUT of a pack run that has written no index.json yet
    (its journal or lock is there: a run still going, or one stopped), as a message's tail;
    None where it is not."""
    if root.kind(INDEX_NAME) is not None:
        return None
    if all(root.kind(name) is None for name in (JOURNAL_NAME, JOURNAL_FOLDER, LOCK_NAME)):
        return None
    return (f"it is the output of a pack run that has not written its {INDEX_NAME} yet (still "
            "going, or stopped): let that run finish, or rerun it with ", Option("resume", True),
            ", then pack its output")  # fmt: skip


def _ours(root: Storage) -> bool:
    """Whether SRC's index.json says it is shardpack's (its start alone: SRC is not ours to
    refuse when it holds another tool's index.json among images)."""
    try:
        with root.open(INDEX_NAME) as blob:
            head = blob.pread(SNIFF_BYTES, 0)
    except OSError:
        return False
    return f'"{FORMAT}"'.encode() in head


def _index(root: Storage) -> Index:
    """SRC's index, loaded and checked; one line naming the file when it is not ours."""
    try:
        index = load_index(root)
    except IndexFormatError as e:
        raise SourceError(*e.args, " (", Option("source", "shardpack"), " reads the output "
                          "folder of a shardpack pack run)") from None  # fmt: skip
    for name, feature in index.schema.class_features.items():  # as any source's class list
        check_class_names(feature.classes, f"{root.path(INDEX_NAME)}, feature {name!r}",
                          "its classes")  # fmt: skip
    return index


def _rereads(index: Index) -> tuple[str, ...]:
    """A warning when a shuffled pack decompresses gzip shards more than once a shard."""
    count = sum(len(info.shards) for info in index.splits.values())
    if index.compression == "none" or count <= KEEP_SHARDS:
        return ()
    return (f"{index.out}: shuffled, each shard draws from all {count} {index.compression} "
            f"shards and a worker keeps {KEEP_SHARDS} decompressed: a shard is decompressed "
            "again each time a worker comes back to it; --no-shuffle decompresses each once "
            "(shuffle when reading instead)",)  # fmt: skip


def scan_held(index: Index, warnings: tuple[str, ...] = ()) -> Dataset | None:
    """Every record of every split as an item, from contents.json: no shard read. None where
    that file cannot say (missing, disagreeing with the index, an older pack's without labels,
    a schema with features beyond one class a record, whose values it holds as a digest): the
    shards are read then. What it says is checked by the workers, record by record."""
    schema = index.schema
    label = schema.get(LABEL)
    if not _plain(schema):
        return None
    from shardpack.contentsfile import load_contents  # numpy: not for --help

    try:
        held = load_contents(index.storage, index).shards
    except OutputError:
        return None
    low, high = (0, 0) if label is None else (1, len(label.classes))  # "meta": class + 1
    splits: dict[str, tuple[Item, ...]] = {}
    for split, info in index.splits.items():
        items: list[Item] = []
        for shard in info.shards:
            entry = held[shard.file]
            metas, sizes = entry["meta"], entry["size"]
            if shard.num_records and (
                not _only_ints(metas)
                or not low <= min(metas) <= max(metas) <= high  # a digest (2**62 up): not plain
                or sum(sizes) > shard.num_bytes  # planted sizes would skew the plan
            ):
                return None
            classes = (None,) if label is None else (None, *range(high))
            rows = zip(entry["keys"], metas, sizes, strict=True)
            items.extend(Item(key, classes[meta], shard.file, size, number, NO_FIELDS)
                         for number, (key, meta, size) in enumerate(rows))  # fmt: skip
            listed(shard.num_records)
        splits[split] = tuple(items)
    return Dataset(KIND, index.storage, schema, splits, warnings=warnings)


def _plain(schema: Schema) -> bool:
    """Whether a record holds no feature but one class (or none) beside the built-ins: what
    contents.json's "meta" gives back (any other, a digest of them)."""
    label = schema.get(LABEL)
    return not set(schema.extras) - {LABEL} and (
        label is None or (not label.is_list and bool(label.classes))
    )


def _only_ints(values: list) -> bool:
    """Whether every value is an int (an older pack's entry holds None: no "meta" written)."""
    return set(map(type, values)) <= {int}


def scan_shards(index: Index, warnings: tuple[str, ...] = ()) -> Dataset:
    """Every record of every split as an item; a record unlike the index's schema is skipped.

    Raises:
        SourceError: a shard holds other than the index's count of records.
        RecordError: a shard's framing is broken (names the shard and the position).
    """
    schema = index.schema
    unit = index.container.position_unit
    splits: dict[str, tuple[Item, ...]] = {}
    skipped: list[tuple[str, str]] = []
    for split, info in index.splits.items():
        items: list[Item] = []
        for shard in info.shards:
            count = 0
            for count, (position, example) in enumerate(_records(index, shard), 1):
                size = _unlend(example)
                fault = None if _fits(example, schema) else _fault(example, schema)
                if fault is None:
                    items.append(_item(example, schema, shard.file, count - 1, size))
                else:
                    skipped.append((f"{shard.file}:{count - 1}",
                                    f"{shard.file} {unit} {position}: {fault}"))  # fmt: skip
            listed(count)
            if count != shard.num_records:
                raise SourceError(f"{index.shard_path(shard)}: holds {count} records, the index "
                                  f"says {shard.num_records}; run shardpack verify on "
                                  f"{index.out}")  # fmt: skip
        splits[split] = tuple(items)
    return Dataset(KIND, index.storage, schema, splits, skipped=tuple(skipped), warnings=warnings)


def _unlend(example: dict[str, list] | RecordError) -> int:
    """The size of a decoded record's image, its borrowed bytes dropped for empty ones (the
    scan needs their length only; the schema check, their kind and count)."""
    images = example.get(IMAGE) if isinstance(example, dict) else None
    if not images:
        return 0
    example[IMAGE] = [b"" if isinstance(v, memoryview) else v for v in images]
    return len(images[0])


def _item(example: dict[str, list], schema: Schema, file: str, number: int, size: int) -> Item:
    """A record as an item: its key, label and features as they are stored."""
    fields = {
        name: _values(feature, example[name])
        for name, feature in schema.extras.items()
        if name != LABEL
    }
    label = schema.get(LABEL)
    value = None if label is None else example[LABEL]
    if value is not None:
        value = tuple(value) if label.is_list else value[0]
    return Item(_text(example["key"][0]), value, file, size, number, fields)


def _values(feature: Feature, values: list) -> FieldValue:
    """A feature's stored values as Item.fields holds them (text as str, as every source's)."""
    if feature.text:
        values = [_text(v) for v in values]
    return tuple(values) if feature.is_list else values[0]


def _records(index: Index, shard) -> Iterator[tuple[int, object]]:
    """(position, decoded record or the RecordError saying why not) of each record of a shard,
    the images borrowed where the records are Example bytes."""
    container = index.container
    if not container.raw_examples:
        return container.iter_records(index.storage, shard.file, index.compression,
                                      num_bytes=shard.num_bytes)  # fmt: skip
    from shardpack.containers.example import decode  # numpy: not for --help, which lists us

    path, unit = index.storage.path(shard.file), container.position_unit
    raw = container.iter_raw(index.storage, shard.file, index.compression,
                             num_bytes=shard.num_bytes)  # fmt: skip
    return ((position, data if isinstance(data, RecordError) else
             decode(data, path, position, unit, BORROWED)) for position, data in raw)  # fmt: skip


def _fits(example: dict[str, list] | RecordError, schema: Schema) -> bool:
    """Whether record_fault finds nothing wrong with the record, at a few lookups a feature
    (Schema.fits; a third of a scan's time went to asking record_fault); when not, record_fault
    says what."""
    return isinstance(example, dict) and schema.fits(example) and example["format"][0] in _FORMATS


def _fault(example, schema) -> str | None:
    """What makes a record unfit to pack again, or None."""
    if isinstance(example, RecordError):
        return example.reason
    return record_fault(example, schema)


def _text(key: bytes) -> str:
    return key.decode("utf-8", "surrogateescape")


def _bytes(key: str) -> bytes:
    return key.encode("utf-8", "surrogateescape")


# ---- in the workers --------------------------------------------------------------------------


def load(item: Item, root: Storage, cache: dict) -> bytes | np.ndarray:
    """Record item.position of shard item.path: its image bytes, or raw pixels as an array.

    Raises:
        ImageError: the record cannot be read, is unlike the index's schema, or is not the one
            the scan listed there (names the shard and the record's number).
    """
    kept = cache.get(KIND)
    try:
        if kept is None:
            kept = cache[KIND] = _open_shards(root)
        reader = kept.files.get(item.path)
        if reader.raw_examples:
            # parsed whole (the scan may have read none), where it was read: the Example is
            # record[start:stop], not copied out of its framing
            record, start, stop = reader.framed(item.position)
            try:
                example = kept.parse(record, (), None, start, stop)
            except ValueError:  # said as decode says it, with where the record is
                at = (reader.path, reader.position(item.position), reader.unit)
                example = checked(kept.decode(record, *at, (), None, start, stop))
        else:
            example = reader[item.position]
    except (SourceError, RecordError, OSError, IndexError, KeyError) as e:
        raise ImageError(item.key, f"{_where(item)}: cannot read it ({e})") from None
    images = example.get(IMAGE)
    if images and type(images[0]) is not bytes:  # a container's reader may lend a view
        example[IMAGE] = [bytes(v) for v in images]
    fault = _unlike(example, item, kept)
    if fault is not None:
        raise ImageError(item.key, f"{_where(item)}: {fault}")
    image = example[IMAGE][0]
    if example["format"][0] != b"raw":  # _unlike found one format value
        return image
    import numpy as np

    shape = (example["height"][0], example["width"][0], example["channels"][0])
    try:
        return np.frombuffer(image, np.uint8).reshape(shape)
    except ValueError:
        raise ImageError(item.key, f"{_where(item)}: raw image of {len(image)} bytes, fields say "
                                   f"{shape}") from None  # fmt: skip


def _where(item: Item) -> str:
    """Where an item's record is, for a message."""
    return f"{item.path} record {item.position}"


def _unlike(example: dict[str, list], item: Item, kept: _Opened) -> str | None:
    """What makes a record read in a worker unfit to pack again, or not the item the scan
    listed at its place (from the shard itself, or from contents.json, which may lie): None
    when it fits and is that item."""
    schema = kept.schema
    if not _fits(example, kept.schema):
        return _fault(example, schema)
    if example["key"][0] != _bytes(item.key):
        return (f"holds key {_text(example['key'][0])!r}, not {item.key!r} as the scan found; "
                f"the shard or its {CONTENTS_NAME} changed since: run shardpack verify on "
                "it")  # fmt: skip
    if kept.plain and not item.fields:  # one class at most: no Item to build (a tenth of load)
        label = example[LABEL][0] if LABEL in example else None
        if label == item.label:
            return None
    found = _item(example, schema, item.path, item.position, item.size)
    if (found.label, dict(found.fields)) == (item.label, dict(item.fields)):
        return None
    held, listed_ = _said(found), _said(item)
    return (f"holds {held}, not {listed_} as the scan found; the shard or its {CONTENTS_NAME} "
            "changed since: run shardpack verify on it")  # fmt: skip


def _said(item: Item) -> str:
    """An item's label, and its features where it has any, for a message."""
    fields = dict(item.fields)
    return f"label {item.label!r}" + (f" and features {fields!r}" if fields else "")


class _Shard:
    """One open shard of SRC: its container's reader, and whether it gives Example bytes."""

    def __init__(self, reader: ShardReader, container: Container) -> None:
        self.reader, self.path = reader, getattr(reader, "path", "")
        self.raw_examples, self.unit = container.raw_examples, container.position_unit
        self.raw, self.position = getattr(reader, "raw", None), reader.position
        self.framed = getattr(reader, "framed", None) or self._whole

    def _whole(self, i: int) -> tuple[bytes, int, int]:
        """Record i's Example bytes as framed gives them, from a reader that has no framing to
        give (ArrayRecord's)."""
        data = self.raw(i)
        return data, 0, len(data)

    def __getitem__(self, i: int) -> dict[str, list]:
        return self.reader[i]

    def close(self) -> None:
        self.reader.close()


class _Opened(NamedTuple):
    """A worker's view of SRC: its shards, each opened on first use, and what a record must be."""

    files: OpenFiles[_Shard]
    schema: Schema
    plain: bool  # no features but one class a record (a label list or other feature: False)
    parse: Callable  # example.decode_example, imported once a worker (not by each load)
    decode: Callable  # example.decode: a record parse refuses, in one line naming it


def _open_shards(root: Storage) -> _Opened:
    """The source's shards, each opened through its container on first use."""
    index = _index(root.child(""))  # a Storage: a worker's root may be Storage.reading's proxy
    shards = {s.file: s for info in index.splits.values() for s in info.shards}
    from shardpack.containers.example import decode, decode_example  # numpy: not for --help

    files = OpenFiles(lambda file: _open(index, shards[file]), KEEP_SHARDS)
    return _Opened(files, index.schema, _plain(index.schema), decode_example, decode)


# Each record's position in a source shard, by the shard's path and sha256, found once a worker
# process (a TFRecord reader hops from header to header to find them): each shard a worker
# writes draws from every source shard, and would otherwise find them again. 8 bytes a record.
_POSITIONS: dict[tuple[str, str], array] = {}


def _open(index: Index, shard: ShardInfo) -> _Shard:
    """One source shard opened for random reads, its records' positions kept for the next."""
    known = (index.storage.path(shard.file), shard.sha256)
    positions = _POSITIONS.get(known)
    container = index.container
    reader = container.open(index.storage, shard.file, index.compression, positions,
                            num_bytes=shard.num_bytes)  # fmt: skip
    if positions is None:
        _POSITIONS[known] = array("q", map(reader.position, range(len(reader))))
    count = len(reader)
    if count != shard.num_records:  # the scan may not have counted them
        reader.close()
        raise SourceError(f"{index.shard_path(shard)}: holds {count} records, the index says "
                          f"{shard.num_records}; run shardpack verify on {index.out}")  # fmt: skip
    return _Shard(reader, container)


SOURCE = ShardpackSource()
