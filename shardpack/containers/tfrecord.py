"""The TFRecord container: framed tf.train.Example records, TFDS's `.tfrecord-` shard names."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from shardpack.containers import (
    NAME_SPLIT,
    Container,
    Example,
    Features,
    ShardReader,
    checked,
    open_shard,
)
from shardpack.containers import example as tfrecord
from shardpack.errors import RecordError

if TYPE_CHECKING:
    from shardpack.storage import Blob, Storage


def decode(data: bytes, path: str, position: int, unit: str = "byte") -> Example | RecordError:
    """Example bytes as name -> list of values, or the RecordError saying they are not an
    Example (naming the file and the position)."""
    try:
        return tfrecord.decode_example(data)
    except ValueError as e:
        return RecordError(path, position, f"not a tf.train.Example ({e})", unit)


class _Writer(tfrecord.TFRecordWriter):
    """TFRecordWriter, fed features instead of record bytes."""

    def _append(self, features: Features) -> int:
        return super()._append(tfrecord.encode_example(features))


class _Reader(ShardReader):
    """Record i of an uncompressed TFRecord shard by one read at its offset."""

    def __init__(self, storage: Storage, name: str, offsets: Sequence[int] | None) -> None:
        self.blob = open_shard(storage, name)
        self.path = self.blob.name
        try:
            if offsets is None:  # hop from header to header: one small read per record
                offsets = [offset for offset, _ in _spans(self.blob)]
        except BaseException:
            self.blob.close()
            raise
        self.offsets = [*offsets, self.blob.size]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Example:
        offset, end = self.offsets[i], self.offsets[i + 1]
        record = self.blob.pread(end - offset, offset)
        head = tfrecord.HEADER.size
        try:
            length = tfrecord.record_length(record[:head], self.path, offset, end - offset)
        except RecordError:
            raise self._stale(offset) from None
        if head + length + tfrecord.FOOTER.size != len(record):
            raise self._stale(offset)
        data = record[head : head + length]
        tfrecord.check_data(data, record[head + length :], self.path, offset)
        return checked(decode(data, self.path, offset))

    def position(self, i: int) -> int:
        return self.offsets[i]

    def _stale(self, offset: int) -> RecordError:
        return RecordError(self.path, offset, "no record starts here: the index file is stale; "
                                              "rewrite it with write_index_files")  # fmt: skip

    def close(self) -> None:
        self.blob.close()


def record_spans(storage: Storage, name: str) -> Iterator[tuple[int, int]]:
    """Yield (byte offset, framed size) of every record by hopping from header to header.

    Only the 12-byte headers are read, so this costs one read per record, not a full read.

    Raises:
        RecordError: a header fails its CRC or the file ends inside a record.
    """
    with open_shard(storage, name) as blob:
        yield from _spans(blob)


def _spans(blob: Blob) -> Iterator[tuple[int, int]]:
    """(offset, framed size) of each record, reading only the 12-byte headers."""
    offset, size = 0, blob.size
    framing = tfrecord.HEADER.size + tfrecord.FOOTER.size
    while offset < size:
        header = blob.pread(tfrecord.HEADER.size, offset)
        framed = framing + tfrecord.record_length(header, blob.name, offset, size)
        if offset + framed > size:
            raise RecordError(blob.name, offset, "file ends inside a record (truncated)")
        yield offset, framed
        offset += framed


class TFRecord(Container):
    """TFRecord files as TensorFlow writes them; offsets are byte offsets (uncompressed)."""

    name = "tfrecord"
    index_files = True
    compressions = ("none", "gzip")
    tfds_file_format = "tfrecord"
    writer_class = _Writer
    shard_template = "{name}-{split}.tfrecord-{index:05d}-of-{n:05d}"
    shard_pattern = re.compile(NAME_SPLIT + r"\.tfrecord-\d{5,}-of-\d{5,}")

    def iter_records(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        max_bytes: int | None = None,
    ) -> Iterator[tuple[int, Example | RecordError]]:  # fmt: skip
        path = storage.path(name)
        records = tfrecord.iter_records(storage, name, compression, digest=digest,
                                        data_faults=True)  # fmt: skip
        for offset, data in records:
            yield offset, data if isinstance(data, RecordError) else decode(data, path, offset)

    def open(
        self, storage: Storage, name: str, compression: str = "none", offsets=None,
        max_bytes: int | None = None,
    ) -> ShardReader:  # fmt: skip
        if compression != "none":
            raise ValueError("random access needs an uncompressed TFRecord shard")
        return _Reader(storage, name, offsets)
