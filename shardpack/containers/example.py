"""tf.train.Example bytes, written and read without TensorFlow: the record codec of the
TFRecord and ArrayRecord containers (a WebDataset sample decodes to the same shape).

An Example is Features{map<string, Feature> feature = 1} in field 1; a Feature holds one of
bytes_list (1), float_list (2) or int64_list (3), each with repeated field 1. Map entries are
written in sorted key order so equal inputs give equal bytes.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from shardpack.errors import RecordError

FeatureValue = (
    bytes | str | int | float | Sequence[bytes] | Sequence[int] | Sequence[float] | np.ndarray
)


# ---- protobuf wire format ------------------------------------------------------------------
# Messages are built as lists of byte strings with their total size, so that an image payload
# is copied once (by the final join), not once per level of nesting (benchmarks/README.md,
# "Measurements behind the code").

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
    record after record, so each entry is built once."""
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
    raw images and keys repeat their lengths."""
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


class _Unusual(Exception):
    """Bytes _decode_usual leaves to the general parser."""


def _decode_usual(data: bytes) -> dict[str, list]:
    """decode_example for the Examples writers make (each map entry its name then its value,
    one list in a Feature, packed numbers), in one pass over `data` with indices: ~4x faster
    than the general parser's nested generators, which a training loop paid per record
    (benchmarks/torch_read.py). Anything else raises _Unusual (or an error of the bytes): the
    general parser then decides, so what this returns is what it would return."""
    out: dict[str, list] = {}
    pos, end = 0, len(data)
    while pos < end:
        if data[pos] != 0x0A:  # Example.features (1, length-delimited)
            raise _Unusual
        size, pos = _length(data, pos + 1)
        stop = pos + size
        if stop > end:
            raise _Unusual
        while pos < stop:  # Features.feature map entries: {1: name, 2: Feature}
            if data[pos] != 0x0A:
                raise _Unusual
            size, pos = _length(data, pos + 1)
            entry_end = pos + size
            if entry_end > stop or pos >= entry_end or data[pos] != 0x0A:
                raise _Unusual
            size, pos = _length(data, pos + 1)
            name = data[pos : pos + size].decode()
            pos += size
            if pos >= entry_end or data[pos] != 0x12:
                raise _Unusual
            size, pos = _length(data, pos + 1)
            if pos + size != entry_end:
                raise _Unusual
            values: list = []
            if size:  # Feature: one list, {1: bytes, 2: float, 3: int64}, length-delimited
                kind, (size, pos) = data[pos], _length(data, pos + 1)
                if pos + size != entry_end or kind not in (0x0A, 0x12, 0x1A):
                    raise _Unusual
                pos = _values(data, pos, entry_end, kind >> 3, values)
            out[name] = values
            pos = entry_end
    return out


def _length(data: bytes, pos: int) -> tuple[int, int]:
    """A length at pos, and the position after it: most are one byte, read without a loop."""
    size = data[pos]
    return (size, pos + 1) if size < 0x80 else _read_varint(data, pos)


def _values(data: bytes, pos: int, end: int, kind: int, values: list) -> int:
    """A BytesList, FloatList or Int64List's values (packed numbers), appended to `values`;
    returns `end`."""
    while pos < end:
        if data[pos] != 0x0A:  # field 1, length-delimited: a bytes value or a packed run
            raise _Unusual
        size, pos = _length(data, pos + 1)
        stop = pos + size
        if stop > end:
            raise _Unusual
        if kind == 1:
            values.append(data[pos:stop])
        elif kind == 2:
            if size % 4:
                raise _Unusual
            values.extend(struct.unpack_from(f"<{size // 4}f", data, pos))
        else:
            while pos < stop:
                value, pos = _read_varint(data, pos)
                values.append(_signed(value))
            if pos != stop:
                raise _Unusual
        pos = stop
    return pos


def decode_example(data: bytes) -> dict[str, list]:
    """Parse Example bytes into name -> list of bytes, int or float.

    Raises:
        ValueError: the bytes are not a well-formed Example.
    """
    if type(data) is bytes:
        try:
            return _decode_usual(data)
        except (_Unusual, ValueError, IndexError, struct.error, UnicodeDecodeError):
            pass  # the general parser says what is wrong, or reads what is unusual
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


def decode(
    data: bytes, path: str, position: int, unit: str = "byte"
) -> dict[str, list] | RecordError:
    """Example bytes as name -> list of values, or the RecordError saying they are not an
    Example (naming the file and the position)."""
    try:
        return decode_example(data)
    except ValueError as e:
        return RecordError(path, position, f"not a tf.train.Example ({e})", unit)
