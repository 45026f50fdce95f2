"""TFRecord framing and tf.train.Example bytes, written and read without TensorFlow.

Framing, per record: uint64 length (little-endian), uint32 masked_crc32c(length bytes), data,
uint32 masked_crc32c(data). An Example is Features{map<string, Feature> feature = 1} in field 1;
a Feature holds one of bytes_list (1), float_list (2) or int64_list (3), each with repeated
field 1. Map entries are written in sorted key order so equal inputs give equal bytes.
"""

from __future__ import annotations

import functools
import gzip
import importlib.machinery
import importlib.util
import io
import os
import struct
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from shardpack.containers import HashingFile, ShardWriter, open_hashing
from shardpack.errors import RecordError
from shardpack.options import COMPRESSIONS
from shardpack.storage import HashingBlob, Sink, Storage

if TYPE_CHECKING:
    from shardpack.storage import Storage

_MASK_DELTA = 0xA282EAD8
HEADER = struct.Struct("<QI")  # uint64 length, uint32 masked CRC of the length
FOOTER = struct.Struct("<I")  # uint32 masked CRC of the data
# Large enough that a shard costs few write syscalls, small enough to stay invisible in RSS.
_WRITE_BUFFER = 1 << 20
# Readers refuse a record that claims more: one image per record, and a raw image at the default
# max_pixels (178,956,970 x 3 channels) is 537 MB. A GZIP record's length cannot be checked
# against the file size, so this is what bounds a hostile length there. Pass max_record_bytes
# to iter_records to read larger records.
MAX_RECORD_BYTES = 2**30
# GZIP level: zlib's default, the same trade-off TensorFlow's own writer makes.
_GZIP_LEVEL = 6

FeatureValue = (
    bytes | str | int | float | Sequence[bytes] | Sequence[int] | Sequence[float] | np.ndarray
)


def _load_crc32c() -> Callable[[bytes], int]:
    """The crc32c package's crc32c function, loaded from its compiled module alone.

    The package's __init__ also asks importlib.metadata for its own version: importing that,
    email's parser and argparse cost 25-50 ms of every command that reads or writes a TFRecord,
    against ~1 ms for the compiled module. Laid out otherwise, or should the compiled module
    not load alone, the package is imported whole.
    """
    spec = importlib.util.find_spec("crc32c")
    for folder in (spec and spec.submodule_search_locations) or ():
        for suffix in importlib.machinery.EXTENSION_SUFFIXES:
            path = os.path.join(folder, "_crc32c" + suffix)
            if os.path.isfile(path):
                compiled = importlib.util.spec_from_file_location("crc32c._crc32c", path)
                try:
                    module = importlib.util.module_from_spec(compiled)  # loads the library
                    compiled.loader.exec_module(module)
                    return module.crc32c
                except (ImportError, AttributeError, OSError):
                    break
    import crc32c

    return crc32c.crc32c


_crc32c = _load_crc32c()


def masked_crc(data: bytes) -> int:
    """Return the masked CRC32C that TFRecord stores beside lengths and data."""
    crc = _crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def frame_parts(data: bytes) -> tuple[bytes, bytes]:
    """The 12-byte header and 4-byte footer that frame `data` as one TFRecord."""
    return _header(len(data)), FOOTER.pack(masked_crc(data))


@functools.lru_cache(maxsize=4096)
def _header(length: int) -> bytes:
    """A record's length and its CRC: kept, since records of raw pixels repeat their length."""
    packed = struct.pack("<Q", length)
    return packed + struct.pack("<I", masked_crc(packed))


def frame(data: bytes) -> bytes:
    """Return one TFRecord: header, data and footer."""
    header, footer = frame_parts(data)
    return header + data + footer


# ---- protobuf wire format ------------------------------------------------------------------
# Messages are built as lists of byte strings with their total size, so that an image payload
# is copied once (by the final join), not once per level of nesting. For the seven features
# pack writes: 29.5 us per record with nested concatenation, 6.9 us this way (3 KB image,
# timeit on the 2-core dev machine; benchmarks/stages.py shows it in context).

_TAG = {1: b"\x0a", 2: b"\x12", 3: b"\x1a"}  # fields 1-3, wire type 2 (length-delimited)
_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    value &= 0xFFFFFFFFFFFFFFFF  # int64 negatives are ten-byte two's complement varints
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2) as one byte string."""
    return _TAG[number] + _varint(len(payload)) + payload


def _wrap(number: int, parts: list[bytes], size: int) -> tuple[list[bytes], int]:
    """Parts of a length-delimited field around `parts`, and its size."""
    head = _TAG[number] + _varint(size)
    return [head, *parts], len(head) + size


@functools.lru_cache(maxsize=4096)
def _int_feature(value: int) -> bytes:
    """A Feature holding one int64: labels and sizes repeat, so each is built once."""
    return _field(3, _field(1, _varint(value)))


@functools.lru_cache(maxsize=256)
def _name_field(name: str) -> bytes:
    return _field(1, name.encode())


def _feature(value: FeatureValue) -> tuple[list[bytes], int]:
    if type(value) is int and -(2**63) <= value < 2**63:  # the common scalars, fast
        feature = _int_feature(value)
        return [feature], len(feature)
    if type(value) is str:
        value = value.encode()
    if type(value) is bytes:
        prefix = _bytes_feature_prefix(len(value))
        return [prefix, value], len(prefix) + len(value)
    if isinstance(value, np.ndarray):  # typed by its dtype, so that an empty list keeps its kind
        if value.dtype.kind == "f":
            return _float_feature(value.astype("<f4").tobytes())
        if value.dtype.kind in "iu":
            return _ints_feature(value.tolist())
        value = value.tolist()
    values = value if isinstance(value, (list, tuple)) else [value]
    if all(isinstance(v, (bytes, str)) for v in values):
        parts: list[bytes] = []
        for v in values:
            data = v.encode() if isinstance(v, str) else v
            parts += (_TAG[1] + _varint(len(data)), data)
        return _wrap(1, parts, sum(len(p) for p in parts))
    if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return _ints_feature(values)
    if all(isinstance(v, float) for v in values):
        return _float_feature(struct.pack(f"<{len(values)}f", *values))
    raise TypeError(f"feature values must be all bytes, all int or all float, got: {value!r}")


def _ints_feature(values: Sequence[int]) -> tuple[list[bytes], int]:
    if any(not -(2**63) <= v < 2**63 for v in values):
        raise ValueError(f"int64 feature values must fit in 64 bits, got: {values!r}")
    if len(values) == 1:
        feature = _int_feature(values[0])
    else:
        feature = _field(3, _field(1, b"".join(map(_varint, values))) if values else b"")
    return [feature], len(feature)


def _float_feature(packed: bytes) -> tuple[list[bytes], int]:
    feature = _field(2, _field(1, packed) if packed else b"")
    return [feature], len(feature)


@functools.lru_cache(maxsize=4096)
def _scalar_entry(name: str, value: int | str) -> bytes:
    """A whole map entry for an int or short text value: labels, sizes and formats repeat
    record after record, so each entry is built once (CIFAR raw: 19 -> 11 us per Example)."""
    return b"".join(_entry(name, *_feature(value))[0])


def _entry(name: str, value: list[bytes], value_size: int) -> tuple[list[bytes], int]:
    """Parts of one map entry (key = name, value = the Feature in `value`), and its size."""
    key = _name_field(name)
    value_head = _TAG[2] + _varint(value_size)
    return _wrap(1, [key, value_head, *value], len(key) + len(value_head) + value_size)


def encode_example(features: Mapping[str, FeatureValue]) -> bytes:
    """Serialize a tf.train.Example, byte-identical to TensorFlow's deterministic output.

    Args:
        features: name -> bytes/str, int or float, a list of one of those kinds, or a
            numpy array (int or float: its dtype picks the list kind, even when empty).

    Returns:
        The Example's wire bytes.
    """
    parts: list[bytes] = []
    size = 0
    for name in sorted(features):
        value = features[name]
        kind = type(value)
        if (kind is int and -(2**63) <= value < 2**63) or (kind is str and len(value) <= 64):
            entry = _scalar_entry(name, value)
            parts.append(entry)
            size += len(entry)
        elif kind is bytes:  # the image and the key of every record
            head = _bytes_entry_head(name, len(value))
            parts += (head, value)
            size += len(head) + len(value)
        else:
            entry_parts, entry_size = _entry(name, *_feature(value))
            parts += entry_parts
            size += entry_size
    return b"".join([_TAG[1], _varint(size), *parts])


@functools.lru_cache(maxsize=4096)
def _bytes_entry_head(name: str, length: int) -> bytes:
    """A map entry holding one bytes value of `length` bytes, all but the value; kept, since
    raw images and keys repeat their lengths (a raw CIFAR record's Example: 8.3 -> 3.5 us,
    timeit)."""
    prefix = _bytes_feature_prefix(length)
    return b"".join(_entry(name, [prefix], len(prefix) + length)[0])


def _bytes_feature_prefix(length: int) -> bytes:
    """A Feature holding one bytes value of `length` bytes, all but the value."""
    head = _TAG[1] + _varint(length)
    return _TAG[1] + _varint(len(head) + length) + head


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("varint runs past the end")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than ten bytes")


def _fields(buf: memoryview) -> Iterator[tuple[int, int, memoryview | int]]:
    """Yield (field number, wire type, payload) over one message; payloads are views, not
    copies, so an image nested four messages deep is copied once."""
    pos, end = 0, len(buf)
    while pos < end:
        key = buf[pos]  # one-byte varints (every key and most sizes of ours) read inline
        if key < 0x80:
            pos += 1
        else:
            key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            yield number, wire, value
        elif wire == 2:
            if pos < end and buf[pos] < 0x80:
                size, pos = buf[pos], pos + 1
            else:
                size, pos = _read_varint(buf, pos)
            if pos + size > end:
                raise ValueError("field runs past the end")
            yield number, wire, buf[pos : pos + size]
            pos += size
        elif wire == 5:
            yield number, wire, buf[pos : pos + 4]
            pos += 4
        elif wire == 1:
            yield number, wire, buf[pos : pos + 8]
            pos += 8
        else:
            raise ValueError(f"unsupported wire type {wire}")


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _decode_list(kind: int, payload: memoryview) -> list:
    values: list = []
    for number, wire, item in _fields(payload):
        if number != 1:
            continue
        if kind == 1 and wire != 2:
            raise ValueError("bytes value is not length-delimited")  # bytes(int) would allocate
        if kind == 1:
            values.append(bytes(item))  # the one copy of a payload: parents are memoryviews
        elif kind == 3 and wire == 0:
            values.append(_signed(item))
        elif kind == 3:
            pos = 0
            while pos < len(item):
                value, pos = _read_varint(item, pos)
                values.append(_signed(value))
        elif kind == 2:  # packed (wire 2) or one fixed32 (wire 5): both are little-endian floats
            values.extend(struct.unpack(f"<{len(item) // 4}f", item))
    return values


def decode_example(data: bytes) -> dict[str, list]:
    """Parse Example bytes into name -> list of bytes, int or float.

    Raises:
        ValueError: the bytes are not a well-formed Example.
    """
    out: dict[str, list] = {}
    try:
        for number, _, features in _fields(memoryview(data)):
            if number != 1:
                continue
            for _, _, entry in _fields(features):
                name, values = "", []
                for part, _, payload in _fields(entry):
                    if part == 1:
                        name = bytes(payload).decode()
                    elif part == 2:
                        for kind, _, listed in _fields(payload):
                            values = _decode_list(kind, listed)
                out[name] = values
    except (struct.error, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed Example ({e})") from None  # one error type for callers
    return out


# ---- files ---------------------------------------------------------------------------------


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
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression must be one of {COMPRESSIONS}, got: {compression!r}")
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
        # one write: each is a sha256 update and a buffered write, ~1 us apart from the bytes
        self._out.write(b"".join((header, data, footer)))
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

    Raises:
        RecordError: a CRC does not match, a length is past the cap, or the file is cut
            short; names path and offset.
        FileAccessError: permission denied.
    """
    blob = open_hashing(storage, name, digest)
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
        raise RecordError(path, offset, "length CRC mismatch (corrupt record header)")
    if length > limit:
        raise RecordError(path, offset, f"record claims {length} bytes, over the limit of "
                                        f"{limit} (corrupt header)")  # fmt: skip
    return length


def check_data(data: bytes, footer: bytes, path: str, offset: int) -> None:
    """Check a record's data against its 4-byte footer.

    Raises:
        RecordError: the footer is cut short or the CRC differs.
    """
    if len(footer) < FOOTER.size:
        raise RecordError(path, offset, "file ends inside a record (truncated)")
    if masked_crc(data) != FOOTER.unpack(footer)[0]:
        raise RecordError(path, offset, "data CRC mismatch (corrupt record)")


def _read_exactly(f: BinaryIO, size: int, path: str, offset: int) -> bytes | bytearray:
    """Up to `size` bytes. Past 1 MiB they are read a chunk at a time into one growing
    bytearray: memory follows the bytes that are there, not what a corrupt length claims, and
    is not held twice (a 127 KB GZIP shard may hold one 128 MiB record: reading it at once, then
    slicing off its footer, peaked at 300 MB)."""
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
