"""The TFRecord container: framed tf.train.Example records, TFDS's `.tfrecord-` shard names."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Sequence

from shardpack import tfrecord
from shardpack.atomic import open_regular
from shardpack.containers import (
    NAME_SPLIT,
    Container,
    Example,
    Features,
    ShardReader,
    checked,
)
from shardpack.errors import RecordError


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
    """Record i of an uncompressed TFRecord shard by one pread at its offset."""

    def __init__(self, path: str, offsets: Sequence[int] | None) -> None:
        self.path = path
        try:
            self.fd = open_regular(path)
        except OSError as e:
            raise RecordError(path, 0, f"cannot open ({e.strerror})") from None
        size = os.fstat(self.fd).st_size
        if offsets is None:  # hop from header to header: one small read per record
            offsets = [offset for offset, _ in _spans(self.fd, path, size)]
        self.offsets = [*offsets, size]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Example:
        offset, end = self.offsets[i], self.offsets[i + 1]
        record = os.pread(self.fd, end - offset, offset)
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
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def record_spans(path: str) -> Iterator[tuple[int, int]]:
    """Yield (byte offset, framed size) of every record by hopping from header to header.

    Only the 12-byte headers are read, so this costs one pread per record, not a full read.

    Raises:
        RecordError: a header fails its CRC or the file ends inside a record.
    """
    try:
        fd = open_regular(path)
    except OSError as e:
        raise RecordError(path, 0, f"cannot open ({e.strerror})") from None
    try:
        yield from _spans(fd, path, os.fstat(fd).st_size)
    finally:
        os.close(fd)


def _spans(fd: int, path: str, size: int) -> Iterator[tuple[int, int]]:
    """(offset, framed size) of each record, reading only the 12-byte headers."""
    offset = 0
    framing = tfrecord.HEADER.size + tfrecord.FOOTER.size
    while offset < size:
        header = os.pread(fd, tfrecord.HEADER.size, offset)
        framed = framing + tfrecord.record_length(header, path, offset, size)
        if offset + framed > size:
            raise RecordError(path, offset, "file ends inside a record (truncated)")
        yield offset, framed
        offset += framed


class TFRecord(Container):
    """TFRecord files as TensorFlow writes them; offsets are byte offsets (uncompressed)."""

    name = "tfrecord"
    compressions = ("none", "gzip")
    tfds_file_format = "tfrecord"
    writer_class = _Writer
    shard_template = "{name}-{split}.tfrecord-{index:05d}-of-{n:05d}"
    shard_pattern = re.compile(NAME_SPLIT + r"\.tfrecord-\d{5,}-of-\d{5,}")

    def iter_records(
        self, path: str | os.PathLike, compression: str = "none", digest=None
    ) -> Iterator[tuple[int, Example | RecordError]]:
        path = os.fspath(path)
        records = tfrecord.iter_records(path, compression, digest=digest, data_faults=True)
        for offset, data in records:
            yield offset, data if isinstance(data, RecordError) else decode(data, path, offset)

    def open(self, path: str | os.PathLike, compression: str = "none", offsets=None) -> ShardReader:
        if compression != "none":
            raise ValueError("random access needs an uncompressed TFRecord shard")
        return _Reader(os.fspath(path), offsets)
