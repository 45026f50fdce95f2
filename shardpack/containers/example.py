"""tf.train.Example bytes, written and read without TensorFlow: the record codec of the
TFRecord and ArrayRecord containers (a WebDataset sample decodes to the same shape).

An Example is Features{map<string, Feature> feature = 1} in field 1; a Feature holds one of
bytes_list (1), float_list (2) or int64_list (3), each with repeated field 1. Map entries are
written in sorted key order so equal inputs give equal bytes.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Collection, Iterator, Mapping, Sequence

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
# The numbers an Example of any layout may decode to (an Example of a million COCO boxes holds
# ~8 million), and its other fields (its features, each a name and a list; bytes values; any
# field numbered otherwise): past either, the bytes are a flood of tiny fields or values (a gzip or
# zstd record of one 2-byte field repeated: a GiB walked at a third of a second a MiB, and as
# many values held), refused as no Example.
MAX_VALUES = 1 << 26
MAX_FIELDS = 1 << 20
_CONTINUED = bytes(range(0x80, 0x100))  # a varint's bytes but its last
_FIELDS = 1  # a decode's budget[_FIELDS]: the fields left (MAX_FIELDS); budget[0]: the numbers
_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def _varint(value: int) -> bytes:
    if 0 <= value < 1 << 21:  # 1 to 3 bytes (lengths under 2 MiB: an image's) without the loop
        if value < 128:
            return _SMALL_VARINTS[value]
        if value < 1 << 14:
            return bytes((value & 0x7F | 0x80, value >> 7))
        return bytes((value & 0x7F | 0x80, value >> 7 & 0x7F | 0x80, value >> 14))
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
    return b"".join(_example_parts(features))


# A part of an Example at least this large (an image) is handed on alone, not joined.
APART = 4096


def _example_parts(features: Mapping[str, FeatureValue]) -> list[bytes]:
    """encode_example's bytes as runs in order: a first and a last run of small parts joined
    (either may be empty), each part of at least APART bytes alone between them, not copied."""
    runs: list[bytes] = []
    small: list[bytes] = []
    for name in sorted(features):
        value = features[name]
        kind = type(value)
        # (an int past 64 bits: _scalar_entry raises what _entry would, uncached)
        if kind is int or (kind is str and len(value) <= 64):
            small.append(_scalar_entry(name, value))
            continue
        if kind is bytes:  # the image and the key of every record
            small.append(_bytes_entry_head(name, len(value)))
            parts: Sequence[bytes] = (value,)
        else:
            parts = _entry(name, *_feature(value))[0]
        for part in parts:
            if len(part) < APART:
                small.append(part)
            else:
                runs += (b"".join(small), part)
                small = []
    runs.append(b"".join(small))
    runs[0] = _TAG[1] + _varint(sum(map(len, runs))) + runs[0]
    return runs


@functools.lru_cache(maxsize=4096)
def _bytes_entry_head(name: str, length: int) -> bytes:
    """A map entry holding one bytes value of `length` bytes, all but the value; kept, since
    raw images and keys repeat their lengths. Built at once, not through _entry: a photo's
    length is seldom seen twice."""
    key, prefix = _name_field(name), _bytes_feature_prefix(length)
    feature = _varint(len(prefix) + length)
    entry = _varint(len(key) + 1 + len(feature) + len(prefix) + length)
    return b"".join((_TAG[1], entry, key, _TAG[2], feature, prefix))


def _bytes_feature_prefix(length: int) -> bytes:
    """A Feature holding one bytes value of `length` bytes, all but the value."""
    head = _TAG[1] + _varint(length)
    return _TAG[1] + _varint(len(head) + length) + head


def example_parts(features: Mapping[str, FeatureValue]) -> list[bytes]:
    """encode_example's bytes as runs in order, for a writer that frames and writes them
    without joining them: small parts joined, each of at least APART bytes (an image) alone."""
    return _example_parts(features)


_UINT64 = (1 << 64) - 1


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    if pos + 2 < len(buf):  # up to 3 bytes (lengths under 2 MiB: an image's) without the loop
        low = buf[pos]
        if low < 0x80:
            return low, pos + 1
        middle = buf[pos + 1]
        if middle < 0x80:
            return (low & 0x7F) | middle << 7, pos + 2
        high = buf[pos + 2]
        if high < 0x80:
            return (low & 0x7F) | (middle & 0x7F) << 7 | high << 14, pos + 3
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("varint runs past the end")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result & _UINT64, pos  # as protobuf reads it: a tenth byte's high bits dropped
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than ten bytes")


def _fields(buf: memoryview, budget: list[int]) -> Iterator[tuple[int, int, memoryview | int]]:
    """Yield (field number, wire type, payload) over one message; payloads are views, not
    copies, so an image nested four messages deep is copied once. Each field yielded is taken
    from budget[_FIELDS] (MAX_FIELDS a record)."""
    pos, end = 0, len(buf)
    while pos < end:
        budget[_FIELDS] -= 1
        if budget[_FIELDS] < 0:
            raise ValueError(f"over {MAX_FIELDS:,} fields, more than any Example holds")
        key = buf[pos]  # one-byte varints (every key and most sizes of ours) read inline
        if key < 0x80:
            pos += 1
        else:
            key, pos = _read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if not number:  # no field is numbered 0: protobuf's parsers refuse it (zeros read so)
            raise ValueError("a field numbered 0")
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


def _decode_list(kind: int, payload: memoryview, budget: list[int]) -> list:
    values: list = []
    for number, wire, item in _fields(payload, budget):  # a bytes value is a field: few a list
        if number != 1:
            continue
        if kind == 1 and wire != 2:
            raise ValueError("bytes value is not length-delimited")  # bytes(int) would allocate
        if kind == 1:
            values.append(bytes(item))  # the one copy of a payload: parents are memoryviews
        elif kind == 3 and wire == 0:
            values.append(_signed(item))
        elif kind == 3:
            _numbers(budget, len(bytes(item).translate(None, _CONTINUED)))  # a varint ends once
            pos = 0
            while pos < len(item):
                value, pos = _read_varint(item, pos)
                values.append(_signed(value))
        elif kind == 2:  # packed (wire 2) or one fixed32 (wire 5): both are little-endian floats
            _numbers(budget, len(item) // 4)
            values.extend(struct.unpack(f"<{len(item) // 4}f", item))
    return values


def decode_example(
    data: bytes,
    borrow: Collection[str] = (),
    only: Collection[str] | None = None,
    start: int = 0,
    stop: int | None = None,
) -> dict[str, list]:
    """Parse Example bytes into name -> list of bytes, int or float.

    Args:
        data: the Example's bytes (bytes, a bytearray or a memoryview).
        borrow: features whose bytes values may come back as memoryviews of `data` instead
            of copies (what needs only an image's length, or passes the bytes on once).
        only: the features wanted (the others may be left out, their values not read, where
            the layout is encode_example's); None: all.
        start, stop: where the Example lies in `data` (a record read with its framing: its
            bytes are not copied out to be parsed); None: to its end.

    Raises:
        ValueError: the bytes are not a well-formed Example.
    """
    fast = _decode_canonical(data, borrow, only, start, stop)
    if fast is not None:
        return fast
    return _decode_general(data if (start, stop) == (0, None) else data[start:stop])


def _decode_general(data: bytes) -> dict[str, list]:
    """decode_example for any well-formed Example, one generator per nested message."""
    out: dict[str, list] = {}
    budget = [MAX_VALUES, MAX_FIELDS]  # the numbers and fields left to take
    try:
        for number, _, features in _fields(memoryview(data), budget):
            if number != 1:
                continue
            for _, _, entry in _fields(features, budget):
                name, values = "", []
                for part, _, payload in _fields(entry, budget):
                    if part == 1:
                        name = bytes(payload).decode()
                    elif part == 2:
                        for kind, _, listed in _fields(payload, budget):
                            values = _decode_list(kind, listed, budget)
                out[name] = values
    except (struct.error, TypeError, AttributeError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed Example ({e})") from None  # one error type for callers
    return out


def _numbers(budget: list[int], n: int) -> None:
    """Take `n` numbers from what is left of the Example's MAX_VALUES, before they are read."""
    budget[0] -= n
    if budget[0] < 0:
        raise ValueError(f"over {MAX_VALUES:,} numbers, more than any Example holds")


# Small map entries seen before, by their bytes: a pack's labels, sizes and formats repeat
# record after record, and a dict lookup costs a fraction of parsing them again.
_KEPT_ENTRY = 64  # the longest entry kept (a text value of ~50 bytes)
_KEPT_ENTRIES = 4096  # entries kept before all are forgotten (unique keys fill it)
_ENTRIES: dict[bytes, tuple[str, tuple]] = {}


def _decode_canonical(
    data: bytes,
    borrow: Collection[str] = (),
    only: Collection[str] | None = None,
    start: int = 0,
    stop: int | None = None,
) -> dict[str, list] | None:
    """decode_example of the layout encode_example (and TensorFlow) writes: each entry a name
    then a Feature, each number list packed. One flat loop, one-byte varints read inline and a
    kept entry found by its bytes (a pack's records are parsed in the scan and in the workers:
    ~3x the general decoder's speed); None for any other layout or a fault, which the general
    decoder then reads or refuses alike. The Example is data[start:stop] (None: to the end)."""
    buf = data
    cache = _ENTRIES if type(data) is bytes else None  # a view's slices are no dict keys
    try:
        end = len(buf) if stop is None else stop
        if end - start < 2 or buf[start] != 0x0A:
            return None
        size = buf[start + 1]
        size, pos = (size, start + 2) if size < 0x80 else _read_varint(buf, start + 1)
        if pos + size != end:
            return None
        out: dict[str, list] = {}
        budget = [MAX_VALUES]  # the bytes of lists read value by value: a value takes one
        while pos < end:
            # a map entry of Features (0x0A, size), holding its key (0x0A, size, name) first
            size = buf[pos + 1]
            if buf[pos] != 0x0A:
                return None
            if size < 0x80:
                pos += 2
                entry_end = pos + size
                if entry_end > end:
                    return None
                if size <= _KEPT_ENTRY and cache is not None:
                    entry = buf[pos:entry_end]
                    kept = cache.get(entry)
                    if kept is not None:
                        name = kept[0]
                        if only is None or name in only:
                            if name in out:
                                return None
                            out[name] = list(kept[1])
                        pos = entry_end
                        continue
                else:
                    entry = None
            else:
                size, pos = _read_varint(buf, pos + 1)
                entry_end, entry = pos + size, None
                if entry_end > end:
                    return None
            found = _read_entry(buf, pos, entry_end, only, borrow, budget)
            if found is None or found[0] in out:
                return None  # (a repeated name: the general decoder's)
            name, values = found
            pos = entry_end
            if values is None:  # left out by `only`
                continue
            out[name] = values
            if entry is not None and name not in borrow:  # a borrowed view holds its record
                _keep(cache, entry, name, values)
        return out
    except (IndexError, ValueError, struct.error):  # UnicodeDecodeError is a ValueError
        return None


def _read_entry(
    buf: bytes, pos: int, entry_end: int, only: Collection[str] | None, borrow: Collection[str],
    budget: list[int],
) -> tuple[str, list | None] | None:  # fmt: skip
    """_decode_canonical's map entry from its key field at `pos` to `entry_end`: its name and
    values (None: left out by `only`); None for another layout or a fault, or for a list past
    what is left of `budget` (its bytes: the general decoder counts its values, and refuses
    more than MAX_VALUES)."""
    size = buf[pos + 1]
    if buf[pos] != 0x0A or size >= 0x80:
        return None
    pos += 2
    name = str(buf[pos : pos + size], "utf-8")
    if only is not None and name not in only:
        return name, None
    pos += size
    # then its Feature (0x12, size), holding one list (kind, size), each filling its parent
    if pos + 1 >= entry_end or buf[pos] != 0x12:
        return None  # (an empty Feature: the general decoder's)
    size = buf[pos + 1]
    size, pos = (size, pos + 2) if size < 0x80 else _read_varint(buf, pos + 1)
    if pos + size != entry_end:
        return None
    kind = buf[pos]
    size = buf[pos + 1]
    size, pos = (size, pos + 2) if size < 0x80 else _read_varint(buf, pos + 1)
    if pos + size != entry_end:
        return None
    lend = name in borrow
    # a bytes_list's first value read here: most hold one (an image, a key)
    if kind == 0x0A and pos < entry_end and buf[pos] == 0x0A:
        size = buf[pos + 1]
        size, at = (size, pos + 2) if size < 0x80 else _read_varint(buf, pos + 1)
        if at + size == entry_end:
            if lend:
                return name, [memoryview(buf)[at:entry_end]]
            return name, [buf[at:entry_end] if type(buf) is bytes else bytes(buf[at:entry_end])]
    budget[0] -= entry_end - pos
    if budget[0] < 0:
        return None
    values = _canonical_values(buf, memoryview(buf), pos, entry_end, kind, lend)
    return None if values is None else (name, values)


def _keep(cache: dict[bytes, tuple[str, tuple]], entry: bytes, name: str, values: list) -> None:
    """Keep a small entry's parse by its bytes (all are forgotten once the store is full)."""
    if len(cache) >= _KEPT_ENTRIES:
        cache.clear()
    cache[entry] = (name, tuple(values))


def _canonical_values(
    buf: bytes, view: memoryview, pos: int, entry_end: int, kind: int, lend: bool
) -> list | None:
    """_decode_canonical's one Feature list of `kind` from `pos` to `entry_end` (bytes lent as
    views of the record where `lend`); None for another layout or a fault."""
    values: list = []
    if kind == 0x0A:  # bytes_list: a field 1 (0x0A, size, bytes) a value
        while pos < entry_end:
            if len(values) == MAX_FIELDS:  # the general decoder's to refuse
                return None
            size = buf[pos + 1]
            if buf[pos] != 0x0A:
                return None
            size, pos = (size, pos + 2) if size < 0x80 else _read_varint(buf, pos + 1)
            if pos + size > entry_end:
                return None
            values.append(view[pos : pos + size] if lend else bytes(buf[pos : pos + size]))
            pos += size
    elif kind == 0x1A or kind == 0x12:  # int64_list, float_list: one packed field 1 (0x0A, size)
        if pos < entry_end:
            if buf[pos] != 0x0A:
                return None
            size = buf[pos + 1]
            size, pos = (size, pos + 2) if size < 0x80 else _read_varint(buf, pos + 1)
            if pos + size != entry_end:
                return None
            if kind == 0x12:  # float32s
                if size % 4:
                    return None
                values = list(struct.unpack_from(f"<{size // 4}f", buf, pos))
                pos += size
            while pos < entry_end:  # varints
                value = buf[pos]
                if value < 0x80:
                    pos += 1
                else:
                    value, pos = _read_varint(buf, pos)
                    if value >= 1 << 63:
                        value -= 1 << 64
                values.append(value)
    else:
        return None
    return values if pos == entry_end else None


def decode(
    data: bytes, path: str, position: int, unit: str = "byte", borrow: Collection[str] = (),
    only: Collection[str] | None = None, start: int = 0, stop: int | None = None,
) -> dict[str, list] | RecordError:  # fmt: skip
    """Example bytes as name -> list of values (`borrow`, `only`, `start` and `stop` as
    decode_example takes them), or the RecordError saying they are not an Example (naming the
    file and position)."""
    try:
        return decode_example(data, borrow, only, start, stop)
    except ValueError as e:
        return RecordError(path, position, f"not a tf.train.Example ({e})", unit)
