"""verify: re-read every shard without TensorFlow and check it against the index."""

from __future__ import annotations

import errno
import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from shardpack.containers import is_shard_name
from shardpack.contentsfile import load_contents
from shardpack.errors import (
    FileAccessError,
    IndexFormatError,
    OutChangedError,
    OutputError,
    RecordError,
    check_progress,
)
from shardpack.index import Index, ShardInfo, load_index, record_fault
from shardpack.layout import CONTENTS_NAME, INDEX_NAME, index_file_name
from shardpack.options import DEFAULT_MAX_PIXELS
from shardpack.packing.objects import Objects, objects_of
from shardpack.packing.outdir import growing
from shardpack.read.changed import changed_since
from shardpack.read.objects import decode_mask, mask_size
from shardpack.read.random_access import read_index_file
from shardpack.read.stream import check_max_pixels, decode_pixels, to_python
from shardpack.schema import LABEL

# Faults listed per shard; the rest are counted. A damaged shard's first faults say what is
# wrong, and a shard of millions of bad records must not cost a line (and memory) each.
MAX_SHARD_FAULTS = 100
# Records read between two calls of a progress callback: a live bar for a cheap call each.
PROGRESS_EVERY = 64


@dataclass(frozen=True)
class Fault:
    """One problem: the file, the record's position where known, and what is wrong."""

    file: str
    offset: int | None
    reason: str
    unit: str = "byte"  # what `offset` counts: bytes, or records (ArrayRecord)

    def __str__(self) -> str:
        where = self.file if self.offset is None else f"{self.file} at {self.unit} {self.offset}"
        return f"{where}: {self.reason}"


@dataclass(frozen=True)
class VerifyReport:
    """What verify checked and every fault it found."""

    out: str
    shards: int
    records: int
    decoded: bool
    faults: tuple[Fault, ...] = field(default=())
    framing: str = "CRC"  # what checks each record's bytes: the container's Container.framing
    unwritten: tuple[str, ...] = ()  # splits whose every image was skipped (Index.unwritten_splits)
    damaged: tuple[str, ...] = ()  # the shards the index lists with a fault of their own

    @property
    def ok(self) -> bool:
        return not self.faults

    def to_json(self) -> dict:
        """The report as a JSON-ready dict (what `verify --json` prints)."""
        return {
            "out": self.out,
            "ok": self.ok,
            "shards": self.shards,
            "records": self.records,
            "decoded": self.decoded,
            "framing": self.framing,
            "unwritten_splits": list(self.unwritten),
            "damaged_shards": list(self.damaged),
            "faults": [
                {"file": f.file, "offset": f.offset, "unit": f.unit, "reason": f.reason}
                for f in self.faults
            ],
        }


def verify(
    out: str | os.PathLike, decode: bool = False, max_pixels: int = DEFAULT_MAX_PIXELS,
    storage_options: dict | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:  # fmt: skip
    """Check every shard of OUT: presence, size, sha256, every CRC, record counts and features,
    and a dataset's objects (boxes inside [0, 1], per-object lists as long as the boxes, an
    instance-mask PNG whole and of its image's size).

    Each shard is read once, front to back, hashed as it is read (one in an object store
    streams; a container whose library opens files by path copies it first).

    Args:
        out: the output folder or URL (s3://, gs://, memory://...) of a pack run.
        decode: also decode every image and compare its size with the record's fields.
        max_pixels: with decode, an image claiming more pixels than this is a fault.
        storage_options: options for the URL's fsspec filesystem (credentials, endpoint...).
        progress: called as records are read with (records read, records the index lists),
            first with (0, records the index lists) as the reading starts.

    Returns:
        A report; `ok` is False if anything disagrees with the index.

    Raises:
        IndexFormatError: the index itself is missing, malformed or unsafe.
        OutChangedError: OUT was updated or packed again while its shards were read.
        ShardpackError: max_pixels is not a positive integer.
        StorageError: the URL's filesystem package is missing.
        TypeError: progress is not callable.
    """
    check_max_pixels(max_pixels)
    check_progress(progress)
    index = load_index(out, storage_options)
    faults: list[Fault] = []
    records = shards = 0
    listed: set[str] = set()
    counter = _Counter(progress, sum(s.num_records for sp in index.splits.values()
                                     for s in sp.shards))  # fmt: skip
    labelled = LABEL in index.schema and bool(index.classes)
    listed_keys = _listed_keys(index)
    for split_name, split in index.splits.items():
        held = [0] * len(index.classes)  # each class's labels among the split's good records
        before = len(faults)
        for shard in split.shards:
            listed.add(shard.file)
            shards += 1
            keys = _KeysListed(shard.file, listed_keys.get(shard.file))
            records += _check_shard(index, shard, decode, max_pixels, faults, counter,
                                    held if labelled else None, keys)  # fmt: skip
        whole = len(faults) == before  # the labels counted are the split's: every record read
        if fault := split.num_records_fault(split_name):  # each shard is held to its own count
            faults.append(Fault(INDEX_NAME, None, fault))
        if labelled and whole and (fault := split.class_counts_fault(split_name, held,
                                                                     index.classes)):  # fmt: skip
            faults.append(Fault(INDEX_NAME, None, fault))

    faults += _bookkeeping_faults(index)
    grown = growing(index.storage)  # a grow's new shards are in no index until its own lands
    for entry in index.storage.listdir():
        if is_shard_name(entry.name, index.name) and entry.name not in listed and not grown:
            faults.append(Fault(entry.name, None, "shard file not listed in index.json (extra "
                                "shard)"))  # fmt: skip
    counter.finish()
    if faults and (how := changed_since(index)):  # shards gone or rewritten by that, not damaged
        raise OutChangedError(f"{index.out}: was updated or packed again while verify read it "
                              f"({how}); run verify again")  # fmt: skip
    damaged = tuple(sorted({fault.file for fault in faults} & listed))
    return VerifyReport(index.out, shards, records, decode, tuple(faults), index.container.framing,
                        index.unwritten_splits, damaged)  # fmt: skip


class _Counter:
    """Records read, told to a progress callback every PROGRESS_EVERY."""

    def __init__(self, progress: Callable[[int, int], None] | None, total: int) -> None:
        self.progress, self.total, self.done = progress, total, 0
        if progress is not None:  # where the reading starts: a rate counts from this report
            progress(0, total)

    def __call__(self) -> None:
        self.done += 1
        if self.progress is not None and self.done % PROGRESS_EVERY == 0:
            self.progress(self.done, max(self.total, self.done))

    def finish(self) -> None:
        if self.progress is not None:
            self.progress(self.done, max(self.total, self.done))


def _check_shard(
    index: Index,
    shard: ShardInfo,
    decode: bool,
    max_pixels: int,
    faults: list[Fault],
    counter: _Counter,
    held: list[int] | None = None,
    keys: _KeysListed | None = None,
) -> int:
    """Check one shard, appending its faults; return the records read. `held`: each class's
    count, to which every good record's labels are added (None: no labels to count); `keys`:
    what contents.json says each record's key is."""
    try:  # opened once first, for the size: on a local disk a link or FIFO is never followed
        with index.storage.open(shard.file) as blob:
            size = blob.size
    except FileNotFoundError:
        faults.append(Fault(shard.file, None, "missing shard file"))
        return 0
    except PermissionError as e:  # how the machine is set up, not a damaged shard
        raise FileAccessError.from_os_error(e, index.shard_path(shard)) from None
    except OSError as e:
        reason = "not a regular file (a link or special file)" if e.errno in (
            errno.ELOOP, errno.EINVAL) else f"cannot open ({e.strerror or e})"  # fmt: skip
        faults.append(Fault(shard.file, None, reason))
        return 0
    before = len(faults)
    if size != shard.num_bytes:
        faults.append(Fault(shard.file, None, f"{size:,} bytes, index.json says "
                                              f"{shard.num_bytes:,}"))  # fmt: skip
        if size > shard.num_bytes:  # what is past the index's size is not ours to read
            return 0
    index_file = _IndexFile(index, shard, size)
    digest = hashlib.sha256()  # fed by the same read that checks the records: one pass
    count = 0
    unit = index.container.position_unit
    listed, unlisted = len(faults) + MAX_SHARD_FAULTS, 0
    try:
        records = index.container.iter_records(
            index.storage, shard.file, index.compression, digest=digest, num_bytes=size
        )
        for position, example in records:
            index_file.saw(count, position)
            if isinstance(example, RecordError):  # its framing held: on to the next record
                faults.append(Fault(shard.file, example.offset, example.reason, example.unit))
            elif reason := _check_record(example, index, decode, max_pixels):
                faults.append(Fault(shard.file, position, reason, unit))
            else:
                if held is not None:  # record_fault held each label to the class list
                    for label in example[LABEL]:
                        held[label] += 1
                if keys is not None:
                    keys.saw(count, example.get("key"))
            count += 1
            counter()
            if len(faults) > listed:
                faults.pop()
                unlisted += 1
    except RecordError as e:
        faults.append(Fault(shard.file, e.offset, e.reason, e.unit))
    if unlisted:
        faults.append(Fault(shard.file, None, f"{unlisted} more faulty records (not listed)"))
    if digest.hexdigest() != shard.sha256:
        faults.append(Fault(shard.file, None, "sha256 differs from the index (file changed)"))
    if count != shard.num_records:
        faults.append(Fault(shard.file, None, f"{count:,} records read, index.json says "
                                              f"{shard.num_records:,}"))  # fmt: skip
    if len(faults) == before and (fault := index_file.fault(count)):
        faults.append(fault)
    if keys is not None and keys.fault is not None:
        faults.append(keys.fault)
    return count


def _listed_keys(index: Index) -> dict[str, list[str]]:
    """Each shard's record keys as contents.json lists them: none where a grow would refuse
    the file (it says why itself) or there is none (an older shardpack's)."""
    if not index.storage.lexists(CONTENTS_NAME):
        return {}
    try:
        return {file: entry["keys"] for file, entry in
                load_contents(index.storage, index).shards.items()}  # fmt: skip
    except OutputError:
        return {}


class _KeysListed:
    """A shard's records' keys against those contents.json lists for it: a grow takes the
    list for the shards it does not read (a key listed for another record's place has that
    record kept twice, or dropped)."""

    def __init__(self, file: str, keys: list[str] | None) -> None:
        self.file, self.keys = file, keys
        self.fault: Fault | None = None

    def saw(self, n: int, key: list | None) -> None:
        """Record n of the shard holds `key` (its feature's values, as the container read it)."""
        if self.keys is None or self.fault is not None or n >= len(self.keys):
            return  # a count that differs is the shard's own fault, told already
        held = key[0] if isinstance(key, list) and len(key) == 1 else None
        held = held.decode("utf-8", "replace") if isinstance(held, bytes) else repr(held)
        if held != _as_stored(self.keys[n]):
            self.fault = Fault(CONTENTS_NAME, None, f"lists {self.keys[n]!r} as record {n} of "
                               f"{self.file}, which holds {held!r}; a grow would keep a record "
                               "twice or drop one; pack again to write it anew")  # fmt: skip


def _as_stored(key: str) -> str:
    """A key of contents.json as a record's key reads back: the bytes of a name that is not
    UTF-8 (its lone surrogates) as U+FFFD, as a Parquet shard stores them."""
    try:
        return key.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    except UnicodeEncodeError:  # a surrogate no file name decodes to: no record's key
        return key.encode("utf-8", "replace").decode("utf-8")


class _IndexFile:
    """A whole shard's DALI index file, where it has one, against the record positions that
    verify's one read of the shard finds: Records and DALI seek by its offsets, so a stale
    one is refused there or reads the wrong bytes."""

    def __init__(self, index: Index, shard: ShardInfo, size: int) -> None:
        self.name, self.size = index_file_name(shard.file), size
        self.spans: list[tuple[int, int]] | None = None
        self.unreadable: Fault | None = None
        self.stale = False
        if not index.container.index_files or index.compression != "none":
            return
        try:
            self.spans = read_index_file(index.storage, shard, index.container.min_span, size)
        except IndexFormatError as e:
            said = str(e).removeprefix(f"{index.storage.path(self.name)}: ")
            self.unreadable = Fault(self.name, None, said)

    def saw(self, n: int, position: int) -> None:
        """Record n of the shard starts at `position`."""
        if self.spans is not None and (n >= len(self.spans) or self.spans[n][0] != position):
            self.stale = True

    def fault(self, count: int) -> Fault | None:
        """What is wrong with the index file, once the shard's `count` records are read."""
        if self.unreadable is not None or self.spans is None:
            return self.unreadable
        last = self.spans[-1] if self.spans else (0, 0)
        if self.stale or len(self.spans) != count or (count and sum(last) != self.size):
            fix = "rewrite it with write_index_files (shardpack index-files)"
            return Fault(
                self.name, None, f"its offsets and sizes are not the shard's (stale); {fix}"
            )
        return None


def _bookkeeping_faults(index: Index) -> list[Fault]:
    """index.json's bookkeeping against its shards' names and generations: the count in a
    split's names (`name_count`), the number a grow gives its next shard (`next_shard`, past
    every one listed, or a grow writes a new shard under a listed name) and the latest
    run (`generation`, none of a shard past it). A grow trusts them."""
    faults = []
    for split_name, split in index.splits.items():
        named = {s.file: found for s in split.shards
                 if (found := _numbered(index, split_name, s.file))}  # fmt: skip
        counts = {n for _, n in named.values() if n is not None}
        wrong = [(file, n) for file, (_, n) in named.items() if n not in (None, split.names_count)]
        if wrong:
            fix = f"set it to {wrong[0][1]}" if len(counts) == 1 else "pack again"
            faults.append(Fault("index.json", None, f"'name_count' of split {split_name!r} is "
                                f"{split.names_count}, but {wrong[0][0]} is named with "
                                f"{wrong[0][1]}: {fix}"))  # fmt: skip
        last = max(named, key=lambda file: named[file][0], default=None)
        if last is not None and split.next_number <= named[last][0]:
            faults.append(Fault("index.json", None, f"'next_shard' of split {split_name!r} is "
                                f"{split.next_number}, but {last} is numbered {named[last][0]}: "
                                "a grow would write over a listed shard; set it to "
                                f"{named[last][0] + 1}"))  # fmt: skip
    latest = max((s.generation for s in index.shards), default=0)
    if latest > index.generation:
        faults.append(Fault("index.json", None, f"'generation' is {index.generation}, but a "
                            f"shard is of generation {latest}: set it to {latest}"))  # fmt: skip
    return faults


def _numbered(index: Index, split: str, file: str) -> tuple[int, int | None] | None:
    """A shard's number and the count in its name, as the container names it (None: a name
    without one), from the numbers in `file`; None: not a name the container gives."""
    # the last three: every template ends in its numbers, and a planted name of thousands
    # of them would cost their square in names tried (and one of 5,000 digits, int's refusal)
    numbers = [int(digits) for digits in re.findall(r"\d+", file)[-3:] if len(digits) <= 20]
    name = index.container.shard_name
    for k in numbers:
        for n in numbers:
            if name(index.name, split, k, n) == file:
                return k, n if name(index.name, split, k, n + 1) != file else None
    return None


def _check_record(
    example: dict[str, list], index: Index, decode: bool, max_pixels: int
) -> str | None:
    """Return what is wrong with one record, as its container read it, or None."""
    if fault := record_fault(example, index.schema):
        return fault
    objects = objects_of(index.schema)
    if not decode and objects is None:
        return None
    record = to_python(example, index.schema)
    if objects is not None and (fault := _objects_fault(record, objects, decode, max_pixels)):
        return f"record {record['key']!r}: {fault}"
    if not decode:
        return None
    try:
        pixels = decode_pixels(record, max_pixels)
    except ValueError as e:  # images.BadImage; OpenCV is imported only when decoding
        named = f" of {record['key']!r}" if record.get("key") else ""  # the source file
        return f"image{named} does not decode: {e}"
    if pixels.shape[:2] != (record["height"], record["width"]):
        return (f"image decodes to {pixels.shape[1]}x{pixels.shape[0]}, fields say "
                f"{record['width']}x{record['height']}")  # fmt: skip
    return None


def _objects_fault(record: dict, objects: Objects, decode: bool, max_pixels: int) -> str | None:
    """What is wrong with a record's objects, naming the feature, or None: a box outside [0, 1]
    or with a min over its max, a per-object list of another length than the boxes, a mask
    that is no PNG or of another size than the image (with decode: an id past the objects)."""
    boxes = record[objects.boxes]
    wrong = ~((boxes >= 0) & (boxes <= 1)).all(axis=1)  # NaN too
    wrong |= (boxes[:, 0] > boxes[:, 2]) | (boxes[:, 1] > boxes[:, 3])
    if wrong.any():
        row = int(wrong.argmax())
        values = [round(v, 4) for v in boxes[row].tolist()]
        return (f"feature {objects.boxes!r} row {row} {values} is not a box [ymin, xmin, ymax, "
                "xmax] inside [0, 1]")  # fmt: skip
    for name in objects.rows:
        if len(record[name]) != len(boxes):
            return (f"feature {name!r} holds {len(record[name])} rows beside {len(boxes)} "
                    f"boxes in {objects.boxes!r}")  # fmt: skip
    if objects.mask is None:
        return None
    data = record[objects.mask]
    try:
        size = mask_size(data)
        if size is not None and size != (record["height"], record["width"]):
            return (f"feature {objects.mask!r} is a {size[1]}x{size[0]} mask of a "
                    f"{record['width']}x{record['height']} image")  # fmt: skip
        ids = decode_mask(data, max_pixels) if decode else None
    except ValueError as e:  # images.BadImage
        return f"feature {objects.mask!r} does not decode: {e}"
    if ids is not None and int(ids.max(initial=0)) > len(boxes):
        return (f"feature {objects.mask!r} holds instance id {int(ids.max())}, past the "
                f"{len(boxes)} objects")  # fmt: skip
    return None
