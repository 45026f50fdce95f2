"""The TFRecord container: tf.train.Example records in TFRecord framing, TFDS's `.tfrecord-`
shard names; positions are byte offsets in the uncompressed stream (a reader at random of a gzip
shard decompresses it once into an unnamed temporary file).

Framing, per record: uint64 length (little-endian), uint32 masked_crc32c(length bytes), data,
uint32 masked_crc32c(data). Written and read without TensorFlow; tf.data reads the shards
itself (make_tf_data), and DALI's tfrecord2idx files index them (record_spans).
"""

from __future__ import annotations

import functools
import gzip
import io
import os
import re
import struct
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, BinaryIO

from shardpack.containers import (
    MAX_RECORD_BYTES,
    NAME_SPLIT,
    Container,
    Example,
    Features,
    HashingFile,
    ShardReader,
    ShardWriter,
    checked,
    open_hashing,
    open_shard,
)

# encode_example: benchmarks.stages times it as this module's
from shardpack.containers.example import APART, decode, encode_example, example_parts  # noqa: F401
from shardpack.crc import crc32c as _crc32c
from shardpack.errors import RESTORE_SHARD, RecordError
from shardpack.storage import Blob, HashingBlob, Sink

if TYPE_CHECKING:
    from shardpack.storage import Storage

_MASK_DELTA = 0xA282EAD8
HEADER = struct.Struct("<QI")  # uint64 length, uint32 masked CRC of the length
FOOTER = struct.Struct("<I")  # uint32 masked CRC of the data
_FRAMING = HEADER.size + FOOTER.size  # the bytes a record's framing adds to its data
# Large enough that a shard costs few write syscalls, small enough to stay invisible in RSS.
_WRITE_BUFFER = 1 << 20
# What iter_views reads at a time: records of a few hundred KB rarely straddle two reads.
_CHUNK = 4 << 20
# A record read by random access up to this size comes in one read, not three: a CIFAR
# record's three reads cost more than copying its data out of one.
_ONE_READ = 64 << 10
# GZIP level: zlib's default, the same trade-off TensorFlow's own writer makes.
_GZIP_LEVEL = 6
# Deflate's largest ratio (zlib's FAQ: 1032:1): no gzip shard inflates past this many times its
# size, which bounds the copy a reader of a gzip shard decompresses it into.
_MAX_INFLATION = 1032


def masked_crc(data: bytes) -> int:
    """Return the masked CRC32C that TFRecord stores beside lengths and data."""
    return _masked(_crc32c(data))


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_parts(data: bytes) -> tuple[bytes, bytes]:
    """The 12-byte header and 4-byte footer that frame `data` as one TFRecord."""
    return _header(len(data)), FOOTER.pack(masked_crc(data))


@functools.lru_cache(maxsize=4096)
def _header(length: int) -> bytes:
    """A record's length and its CRC: kept, since records of raw pixels repeat their length."""
    packed = struct.pack("<Q", length)
    return packed + FOOTER.pack(_masked(_crc32c(packed)))


def frame(data: bytes) -> bytes:
    """Return one TFRecord: header, data and footer."""
    header, footer = frame_parts(data)
    return header + data + footer


class TFRecordWriter(ShardWriter):
    """Write one TFRecord file under a temporary name; it appears under `path` only on success.

    Use as a context manager: leaving the block normally renames the file into place, an
    exception removes the temporary file. `result` then holds a WriteResult: record count, file
    size, sha256 and each record's offset in the uncompressed stream (for index files, without
    reading the shard again). `write` takes one record's bytes.
    """

    def __init__(
        self, path: str | os.PathLike, compression: str = "none", storage: Storage | None = None
    ) -> None:
        if compression not in TFRecord.compressions:
            raise ValueError(
                f"compression must be one of {TFRecord.compressions}, got: {compression!r}"
            )
        super().__init__(path, compression, storage)

    def _open(self, sink: Sink) -> None:
        self._position = 0
        self._hashing = HashingFile(sink)
        self._out: HashingFile | gzip.GzipFile = self._hashing
        if self.compression == "gzip":
            # mtime=0 and no file name keep the bytes a pure function of the records.
            self._out = gzip.GzipFile(
                filename="", mode="wb", fileobj=self._hashing, mtime=0, compresslevel=_GZIP_LEVEL
            )

    def _append(self, data: bytes) -> int:
        header, footer = frame_parts(data)
        if len(data) < APART:  # one write: each is a list append and a sha256 update
            self._out.write(b"".join((header, data, footer)))
        else:  # three: a large record is not copied to frame it
            self._out.writelines((header, data, footer))
        offset = self._position
        self._position += len(header) + len(data) + len(footer)
        return offset

    def _close(self, failed: bool) -> tuple[int, str]:
        if failed:  # first: the trailer below must not raise the sink's error in its place
            self._hashing.discard()
        if self._out is not self._hashing:
            self._out.close()  # the GZIP trailer
        return self._hashing.finish()


class _BlobStream(io.RawIOBase):
    """A Blob as a raw stream read front to back (what io.BufferedReader and gzip take)."""

    def __init__(self, blob) -> None:
        self.blob, self.position = blob, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.blob.pread(len(buffer), self.position)
        memoryview(buffer)[: len(data)] = data
        self.position += len(data)
        return len(data)

    def close(self) -> None:
        self.blob.close()
        super().close()


def iter_records(
    storage: Storage,
    name: str,
    compression: str = "none",
    check_crc: bool = True,
    digest=None,
    max_record_bytes: int = MAX_RECORD_BYTES,
    data_faults: bool = False,
    num_bytes: int | None = None,
) -> Iterator[tuple[int, bytes | RecordError]]:
    """Yield (offset, data) for every record of a TFRecord file, checking both CRCs.

    Offsets count in the uncompressed stream; data is bytes (a bytearray past 1 MiB, so that
    a large record is not copied once more). The file is read front to back as the records
    are asked for (a remote object streams); on a local disk it is opened without following
    a link.

    Args:
        storage: where the file is (a local folder or a URL prefix).
        name: the TFRecord file's name in it.
        compression: "none" or "gzip".
        check_crc: check the length and data CRCs.
        digest: a hashlib object fed every byte of the file as it is read, and then the rest
            of it even when a record is bad, so that one pass both checks the records and
            hashes the file.
        max_record_bytes: refuse a record that claims more bytes than this.
        data_faults: yield a record whose data fails its CRC as (offset, RecordError) and read
            on (its length passed a CRC of its own, so the next record's start is known),
            rather than raise; what verify wants, to name every damaged record.
        num_bytes: the file's size as the index says; a file of another is refused unread.

    Raises:
        RecordError: a CRC does not match, a length is past the cap, the file is cut short
            or of another size than num_bytes; names path and offset.
        FileAccessError: permission denied.
    """
    blob = open_hashing(storage, name, digest, num_bytes)
    path = blob.name
    buffered = io.BufferedReader(_BlobStream(blob), _WRITE_BUFFER)
    f = gzip.GzipFile(fileobj=buffered, mode="rb") if compression == "gzip" else buffered
    # A corrupt length field must not ask for gigabytes: no record outgrows its file.
    limit = min(max_record_bytes, blob.size) if compression == "none" else max_record_bytes
    with f, buffered:
        try:
            yield from _records(f, path, limit, check_crc, data_faults)
        finally:
            if isinstance(blob, HashingBlob):
                blob.finish()  # the rest of the file, into the hash


def record_length(header: bytes, path: str, offset: int, limit: int, check_crc: bool = True) -> int:
    """The data length a 12-byte record header declares, once its CRC and size are checked.

    Raises:
        RecordError: the header is cut short, fails its CRC, or claims more than `limit` bytes.
    """
    if len(header) < HEADER.size:
        raise RecordError(path, offset, "file ends inside a record header (truncated)")
    length, length_crc = HEADER.unpack(header)
    if check_crc and masked_crc(header[:8]) != length_crc:
        raise RecordError(path, offset, f"length CRC mismatch (corrupt record header): the "
                                        f"shard is damaged; {RESTORE_SHARD}")  # fmt: skip
    if length > limit:
        raise RecordError(path, offset, f"record claims {length:,} bytes, over the limit of "
                                        f"{limit:,} (corrupt header)")  # fmt: skip
    return length


def check_data(data: bytes, footer: bytes, path: str, offset: int) -> None:
    """Check a record's data against its 4-byte footer.

    Raises:
        RecordError: the footer is cut short or the CRC differs.
    """
    if len(footer) < FOOTER.size:
        raise RecordError(path, offset, "file ends inside a record (truncated)")
    if masked_crc(data) != FOOTER.unpack(footer)[0]:
        raise RecordError(path, offset, f"data CRC mismatch (corrupt record): the shard is "
                                        f"damaged; {RESTORE_SHARD}")  # fmt: skip


def _read_exactly(f: BinaryIO, size: int, path: str, offset: int) -> bytes | bytearray:
    """Up to `size` bytes. Past 1 MiB they are read a chunk at a time into one growing
    bytearray: memory follows the bytes that are there, not what a corrupt length claims, and
    is not held twice (a 127 KB GZIP shard may hold one 128 MiB record: read at once, then
    sliced, it would peak at over twice that)."""
    try:
        if size <= _WRITE_BUFFER:
            return f.read(size)
        data = bytearray()
        while len(data) < size and (chunk := f.read(min(size - len(data), _WRITE_BUFFER))):
            data += chunk  # realloc grows a large buffer in place (mremap), without a copy
        return data
    except (OSError, EOFError, zlib.error) as e:
        raise RecordError(path, offset, f"unreadable compressed data ({e})") from None


def _records(
    f: BinaryIO, path: str, limit: int, check_crc: bool, data_faults: bool
) -> Iterator[tuple[int, bytes | RecordError]]:
    """The framing loop of iter_records over an open stream."""
    offset = 0
    while header := _read_exactly(f, HEADER.size, path, offset):
        length = record_length(header, path, offset, limit, check_crc)
        data = _read_exactly(f, length, path, offset)
        if len(data) < length:
            raise RecordError(path, offset, "file ends inside a record (truncated)")
        footer = _read_exactly(f, FOOTER.size, path, offset)
        if check_crc and len(footer) == FOOTER.size and data_faults:
            try:
                check_data(data, footer, path, offset)
            except RecordError as e:
                data = e
        elif check_crc:
            check_data(data, footer, path, offset)
        elif len(footer) < FOOTER.size:
            raise RecordError(path, offset, "file ends inside a record (truncated)")
        yield offset, data
        offset += HEADER.size + length + FOOTER.size


def iter_views(
    storage: Storage, name: str, max_record_bytes: int = MAX_RECORD_BYTES,
    num_bytes: int | None = None,
) -> Iterator[tuple[int, memoryview | RecordError]]:  # fmt: skip
    """iter_records(check_crc=True, data_faults=True) of an uncompressed file, each record's
    data a view into a chunk of the file read _CHUNK bytes at a time: no copy and no read call
    a record (what a scan of every record of our own shards costs most in)."""
    with open_shard(storage, name, num_bytes) as blob:
        path, size = blob.name, blob.size
        limit, framing = min(max_record_bytes, size), HEADER.size + FOOTER.size
        chunk, view, base, offset = b"", memoryview(b""), 0, 0
        while offset < size:
            at = offset - base
            if at + HEADER.size > len(chunk):  # the chunk ends inside this header
                chunk, base, at = blob.pread(max(_CHUNK, HEADER.size), offset), offset, 0
                view = memoryview(chunk)
            length = record_length(chunk[at : at + HEADER.size], path, offset, limit)
            if at + framing + length > len(chunk):  # or inside this record
                chunk, base, at = blob.pread(max(_CHUNK, framing + length), offset), offset, 0
                view = memoryview(chunk)
            start, end = at + HEADER.size, at + HEADER.size + length
            if end + FOOTER.size > len(chunk):
                raise RecordError(path, offset, "file ends inside a record (truncated)")
            data: memoryview | RecordError = view[start:end]
            try:
                check_data(data, chunk[end : end + FOOTER.size], path, offset)
            except RecordError as e:
                data = e
            yield offset, data
            offset += framing + length


class _Writer(TFRecordWriter):
    """TFRecordWriter, fed features instead of record bytes."""

    def _append(self, features: Features) -> int:
        # The Example's pieces framed and written as they are: its image is neither joined
        # into the Example nor the Example into the record (two copies of every image), and
        # its CRC runs over the pieces.
        pieces = example_parts(features)
        crc = 0
        for piece in pieces:
            crc = _crc32c(piece, crc)
        size = sum(map(len, pieces))
        header = _header(size)
        pieces[0] = header + pieces[0]
        pieces[-1] += FOOTER.pack(_masked(crc))
        self._out.writelines(pieces)
        offset = self._position
        self._position += len(header) + size + FOOTER.size
        return offset


class _Reader(ShardReader):
    """Record i of an uncompressed TFRecord shard (or a gzip one's copy) by one read at its
    offset."""

    def __init__(self, blob: Blob, offsets: Sequence[int] | None) -> None:
        self.blob = blob
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
        return checked(decode(self.raw(i), self.path, self.offsets[i]))

    def raw(self, i: int) -> bytes:
        framed, start, end = self.framed(i)
        return framed if (start, end) == (0, len(framed)) else framed[start:end]

    def framed(self, i: int) -> tuple[bytes, int, int]:
        """Record i as read, both CRCs checked: (bytes, where its data starts, where it ends)
        in them. A small record comes in one read, with its framing (a caller that needs a
        part of its data copies that part alone); a large one's header, data and footer are
        read apart (a remote blob's read-ahead serves the three), so that its data comes as
        bytes of its own, not a slice of the record copied out again."""
        offset, end = self.offsets[i], self.offsets[i + 1]
        head, span = HEADER.size, end - offset
        framed = self.blob.pread(span, offset) if span <= _ONE_READ else None
        if framed is not None and len(framed) == span >= _FRAMING:
            # the checks below, inline, for a record that passes them (~2 us of a repack's
            # record); one that fails any goes the long way, which says what is wrong
            length, length_crc = HEADER.unpack_from(framed)
            stop = head + length
            view = memoryview(framed)
            if (
                stop + FOOTER.size == span
                and _masked(_crc32c(view[:8])) == length_crc
                and _masked(_crc32c(view[head:stop])) == FOOTER.unpack_from(framed, stop)[0]
            ):
                return framed, head, stop
        try:
            header = self.blob.pread(head, offset) if framed is None else framed[:head]
            length = record_length(header, self.path, offset, span)
        except RecordError:
            raise self._stale(offset) from None
        if head + length + FOOTER.size != span:
            raise self._stale(offset)
        if framed is None:
            data = self.blob.pread(length, offset + head)
            footer = self.blob.pread(FOOTER.size, offset + head + length)
            if len(data) != length or len(footer) != FOOTER.size:
                raise self._stale(offset)
            check_data(data, footer, self.path, offset)
            return data, 0, length
        if len(framed) != span:
            raise self._stale(offset)
        check_data(memoryview(framed)[head : head + length], framed[head + length :], self.path,
                   offset)  # fmt: skip
        return framed, head, head + length

    def position(self, i: int) -> int:
        return self.offsets[i]

    def _stale(self, offset: int) -> RecordError:
        return RecordError(self.path, offset, "no record starts here: the shard is damaged or "
                                              "its index file is stale; verify tells which: "
                                              "restore the shard, or rewrite the index with "
                                              "write_index_files")  # fmt: skip

    def close(self) -> None:
        self.blob.close()


class _Copy(Blob):
    """A gzip shard's decompressed stream in an unnamed temporary file, read at offsets."""

    def __init__(self, blob: Blob) -> None:
        self.name, self.file = blob.name, tempfile.TemporaryFile()  # noqa: SIM115 (close())
        try:
            self.size = self._inflate(blob)
        except BaseException:
            self.file.close()
            raise

    def _inflate(self, blob: Blob) -> int:
        """Decompress the blob into the file (closing it); refuse one that inflates past what
        deflate can (its size was held to the index's by open_shard)."""
        buffered = io.BufferedReader(_BlobStream(blob), _WRITE_BUFFER)
        with buffered, gzip.GzipFile(fileobj=buffered, mode="rb") as f:
            limit, size = _MAX_INFLATION * blob.size, 0
            while chunk := _read_exactly(f, _WRITE_BUFFER, self.name, size):
                size += len(chunk)
                if size > limit:
                    raise RecordError(self.name, limit, "inflates past what gzip can (corrupt)")
                self.file.write(chunk)
        self.file.flush()
        return size

    def pread(self, size: int, offset: int) -> bytes:
        return os.pread(self.file.fileno(), size, offset)

    def close(self) -> None:
        self.file.close()


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
    framing = HEADER.size + FOOTER.size
    while offset < size:
        header = blob.pread(HEADER.size, offset)
        framed = framing + record_length(header, blob.name, offset, size)
        if offset + framed > size:
            raise RecordError(blob.name, offset, "file ends inside a record (truncated)")
        yield offset, framed
        offset += framed


class TFRecord(Container):
    """TFRecord files as TensorFlow writes them; offsets are byte offsets (uncompressed)."""

    name = "tfrecord"
    index_files = True
    min_span = HEADER.size + FOOTER.size
    min_record_bytes = min_span  # an empty record: its framing alone

    def most_records(self, num_bytes: int, compression: str = "none") -> int:
        grown = num_bytes * _MAX_INFLATION if compression == "gzip" else num_bytes
        return grown // self.min_record_bytes

    tf_readable = True
    compressions = ("none", "gzip")
    tfds_file_format = "tfrecord"
    media_type = "application/x-tfrecord"
    writer_class = _Writer
    shard_template = "{name}-{split}.tfrecord-{index:05d}-of-{n:05d}"
    shard_pattern = re.compile(NAME_SPLIT + r"\.tfrecord-\d{5,}-of-\d{5,}")

    raw_examples = True

    def iter_records(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        num_bytes: int | None = None,
    ) -> Iterator[tuple[int, Example | RecordError]]:  # fmt: skip
        path = storage.path(name)
        for offset, data in self.iter_raw(storage, name, compression, digest, num_bytes):
            yield offset, data if isinstance(data, RecordError) else decode(data, path, offset)

    def iter_raw(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        num_bytes: int | None = None,
    ) -> Iterator[tuple[int, bytes | RecordError]]:  # fmt: skip
        if compression == "none" and digest is None:
            return iter_views(storage, name, num_bytes=num_bytes)
        return iter_records(storage, name, compression, digest=digest, data_faults=True,
                            num_bytes=num_bytes)  # fmt: skip

    def open(
        self, storage: Storage, name: str, compression: str = "none", offsets=None,
        num_bytes: int | None = None,
    ) -> ShardReader:  # fmt: skip
        blob = open_shard(storage, name, num_bytes)
        return _Reader(blob if compression == "none" else _Copy(blob), offsets)

    def first_record(
        self, storage: Storage, name: str, compression: str = "none", num_bytes: int | None = None
    ) -> Example | None:
        if compression != "none":  # a gzip stream's head: iter_records inflates no further
            return super().first_record(storage, name, compression, num_bytes)
        with open_shard(storage, name, num_bytes) as blob:  # its header, then its record
            if blob.size == 0:
                return None
            length = record_length(blob.pread(HEADER.size, 0), blob.name, 0,
                                   min(blob.size, MAX_RECORD_BYTES))  # fmt: skip
            framed = blob.pread(HEADER.size + length + FOOTER.size, 0)
            data = memoryview(framed)[HEADER.size : HEADER.size + length]
            if len(data) < length:
                raise RecordError(blob.name, 0, "file ends inside a record (truncated)")
            check_data(data, framed[HEADER.size + length :], blob.name, 0)
            return checked(decode(bytes(data), blob.name, 0))

    def record_spans(self, storage: Storage, name: str) -> Iterator[tuple[int, int]]:
        return record_spans(storage, name)

    def open_for_tf(self, storage: Storage, name: str, compression: str, num_bytes: int) -> None:
        # TensorFlow's reader ends the process in a segmentation fault at a record whose length
        # header (its CRC good) claims 2**40 to 2**62 bytes: the framing is walked first, header
        # to header (one 12-byte read a record: 2-3% of what tf_dataset takes to read a 300 MiB
        # shard, `python -m benchmarks.tf_framing`). Under gzip it would inflate the whole shard
        # once more: not done.
        with open_shard(storage, name, num_bytes) as blob:
            if compression == "none":
                for _ in _spans(blob):
                    pass

    def make_tf_data(self, tf, storage: Storage, file, compression: str = "none"):
        if storage.tf_path() is not None:  # TensorFlow opens the file itself, off the GIL
            compression_type = "GZIP" if compression == "gzip" else ""
            return tf.data.TFRecordDataset(file, compression_type=compression_type)

        def stream(name: bytes) -> Iterator[bytes]:
            for _, data in iter_records(storage, name.decode(), compression):
                yield bytes(data)

        # elsewhere our reader streams them through the storage (no tensorflow-io)
        return tf.data.Dataset.from_generator(
            stream, output_signature=tf.TensorSpec([], tf.string), args=(file,)
        )
