"""Random access: per-shard index files in DALI's tfrecord2idx format, Records and read_record."""

from __future__ import annotations

import bisect
import io
import itertools
import operator
import os
import sys
import weakref

from shardpack.containers import ShardReader
from shardpack.errors import (
    FileAccessError,
    IndexFormatError,
    OutChangedError,
    RecordError,
    is_machine_limit,
)
from shardpack.index import Index, ShardInfo
from shardpack.layout import index_file_name
from shardpack.options import DEFAULT_MAX_PIXELS
from shardpack.packing.daliindex import random_access_index
from shardpack.read.changed import OPEN_AGAIN, changed_or, check_opened
from shardpack.read.stream import check_max_pixels, count_fault, parse_record
from shardpack.storage import Storage

# An index file line is two decimal numbers of at most 20 digits: a longer line is not ours.
_MAX_LINE = 64


def index_file_path(index: Index, file: str) -> str:
    """Where the index file of one shard lives: OUT/idx/<shard>.idx, as a path or URL."""
    return index.storage.path(index_file_name(file))


class Records:
    """Random access to one split's records: `len(records)`, `records[i]`, `records[i:j]`.

    The index is loaded once; record i is found by bisecting the prefix sums of the shards'
    record counts; each shard is opened through its container the first time it is asked for
    (record offsets come from its index file where the container has them, else its reader
    finds them) and
    stays open. Each record's framing and features are checked as it is read. Use as a context
    manager, or call close(), to release the open files.

    `out` is the output folder or URL of a pack run (`storage_options` go to the URL's fsspec
    filesystem); a record of a remote shard is fetched by range request, a block at a time.
    A shard found gone, resized, rewritten or faulty after OUT was updated or packed again is
    OutChangedError.
    """

    AGAIN = OPEN_AGAIN  # what OutChangedError says to do

    def __init__(
        self,
        out: str | os.PathLike,
        split: str = "train",
        *,
        decode: bool = False,
        max_pixels: int = DEFAULT_MAX_PIXELS,
        storage_options: dict | None = None,
    ) -> None:
        check_max_pixels(max_pixels)
        self.index = random_access_index(out, storage_options=storage_options)
        self.split = split
        self.decode, self.max_pixels = decode, max_pixels
        self._shards = self.index.split(split).shards
        self._ends = list(itertools.accumulate(s.num_records for s in self._shards))
        if self._ends and self._ends[-1] > sys.maxsize:  # what len() can return
            raise IndexFormatError(f"{self.index.out}: split {split!r} claims {self._ends[-1]} "
                                   "records; this is not an index shardpack wrote")  # fmt: skip
        self._readers: dict[int, ShardReader] = {}
        self._paths: dict[int, str] = {}  # each opened shard's path, for its records' errors
        # not __del__: a finalizer also runs at exit before modules are torn down (os.close)
        weakref.finalize(self, _close_readers, self._readers)

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def __getitem__(self, i: int | slice) -> dict[str, object] | list[dict[str, object]]:
        if isinstance(i, slice):  # records[10:20], as a list's: each record read in turn
            return [self[j] for j in range(*i.indices(len(self)))]
        asked = i = operator.index(i)
        size = len(self)
        if i < 0:
            i += size
        if not 0 <= i < size:
            raise IndexError(f"record {asked} is outside split {self.split!r} of {size} records")
        k = bisect.bisect_right(self._ends, i)
        local = i - (self._ends[k - 1] if k else 0)
        try:
            reader = self._reader(k)
            return parse_record(self.index, self._paths[k], reader.position(local),
                                reader[local], self.decode, self.max_pixels)  # fmt: skip
        except RecordError as e:  # damaged, or OUT packed again since: the index now tells
            raise changed_or(self.index, e, self.AGAIN) from None

    def _reader(self, k: int) -> ShardReader:
        """Shard k's reader, opened on first use and checked against the index's count."""
        if k not in self._readers:
            shard = self._shards[k]
            storage, path = self.index.storage, self.index.shard_path(shard)
            offsets = None
            if self.index.container.index_files:
                spans = read_index_file(
                    storage, shard, self.index.container.min_span, shard.num_bytes
                )  # the size the open below holds it to
                offsets = None if spans is None else [offset for offset, _ in spans]
            reader = self.index.container.open(storage, shard.file, self.index.compression,
                                               offsets, num_bytes=shard.num_bytes)  # fmt: skip
            try:  # the same name and size may hold another pack's records: its index tells
                check_opened(self.index, path, self.AGAIN)
            except OutChangedError:
                reader.close()
                raise
            if len(reader) != shard.num_records:
                reader.close()
                raise count_fault(path, len(reader), shard.num_records)
            self._readers[k], self._paths[k] = reader, path
        return self._readers[k]

    def release(self, k: int) -> None:
        """Close shard k's file, if open (it is opened again when asked for): so that a
        cache may remove it."""
        reader = self._readers.pop(k, None)
        if reader is not None:
            reader.close()

    def close(self) -> None:
        """Close the shard files this object opened."""
        _close_readers(self._readers)

    def __enter__(self) -> Records:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _close_readers(readers: dict[int, ShardReader]) -> None:
    """Close and forget the readers a Records opened."""
    for reader in readers.values():
        reader.close()
    readers.clear()


def read_index_file(
    storage: Storage, shard: ShardInfo, min_span: int, size: int
) -> list[tuple[int, int]] | None:
    """The spans of a shard's index file, each line checked: two numbers that tile the shard
    of `size` bytes; None when it has none."""
    path = storage.path(index_file_name(shard.file))

    def bad(n: int, why: str) -> IndexFormatError:
        return IndexFormatError(f"{path}: line {n}: {why}; rewrite it with write_index_files "
                                "(shardpack index-files)")  # fmt: skip

    try:
        blob = storage.open(index_file_name(shard.file))  # a link is refused, not followed
    except FileNotFoundError:
        return None
    except OSError as e:
        if is_machine_limit(e):  # the index file is not at fault
            raise FileAccessError.from_os_error(e, path) from None
        raise IndexFormatError(f"{path}: cannot open ({e.strerror or e})") from None
    # one line too many is enough to refuse it; no more lines than the shard has room for
    lines = min(shard.num_records, size // max(min_span, 1)) + 1
    with blob:
        f = io.BytesIO(blob.pread(min(lines * _MAX_LINE, blob.size), 0))
    spans: list[tuple[int, int]] = []
    expected = 0
    for n in range(1, shard.num_records + 2):
        line = f.readline(_MAX_LINE)
        if not line:
            break
        if n > shard.num_records:
            raise bad(n, f"more lines than the shard's {shard.num_records} records")
        fields = line.split()
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            raise bad(n, "not two numbers '<offset> <size>'")
        offset, framed = int(fields[0]), int(fields[1])
        if offset != expected or framed < min_span or offset + framed > size:
            raise bad(n, f"record at {offset} of {framed} bytes does not fit the "
                         f"{size}-byte shard")  # fmt: skip
        spans.append((offset, framed))
        expected = offset + framed
    if len(spans) < shard.num_records:  # cut short: the shard would be blamed for its count
        raise bad(len(spans) + 1, f"missing: {len(spans)} lines for the shard's "
                                  f"{shard.num_records} records")  # fmt: skip
    return spans


def read_record(
    out: str | os.PathLike, split: str, i: int, *, decode: bool = False,
    storage_options: dict | None = None,
) -> dict[str, object]:  # fmt: skip
    """Fetch record i of a split without scanning the shards before it: `Records` for one call.

    Returns:
        The record as iter_examples yields it (image bytes, label, key...).

    Raises:
        IndexError: i is outside the split.
        RecordError, IndexFormatError: the shard or its index file is damaged or stale.
    """
    with Records(out, split, decode=decode, storage_options=storage_options) as records:
        return records[i]
