"""The WebDataset container: deterministic tar shards, `{name}-{split}-{i:06d}.tar`.

Each sample is members sharing one dot-free key, unique in the dataset and the same on every
pack: the shard's split and index, then the record's number in it (`train-000003_000012`), in
this order: the image (`.jpg`, `.png`, `.webp`, or `.npy` for raw pixels), `.cls` (the label as
decimal text, where it is one class index), a member `.<feature>.bin` of each feature of bytes
that are no text (COCO's `mask` PNG, a Parquet binary column: `objects/mask` as
`.objects.mask.bin`) and `.json` (every other feature: the source key, height, width, channels,
format and any extra feature; packs from before kept those bytes in it, as \\udcXX escapes:
they still read). Members are USTAR headers with mtime 0, uid and gid 0, no owner names and
mode 0644, so equal records give equal bytes. Positions
are byte offsets of each sample's first header. Beside the shards, each split gets the shard
index JSON of webdataset's `wids` (`{name}-{split}.shardindex.json`: `shardlist` with `url`,
`nsamples` and `filesize`).

With `wds_naming="img2dataset"`, samples are named as img2dataset's webdataset writer names
them, so code written for its output reads them unchanged: the image, the `caption` feature as
`.txt`, and a `.json` that also holds img2dataset's fields (`url`: the source key, `key`: the
sample's key, `status`, `error_message`, `original_width`, `original_height`, `sha256`). The
reader turns such a sample back into the record written (a sample is img2dataset's when its
JSON holds `url`, `status` and the sample's key as `key`; packing refuses features of those
names).
"""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import re
import tarfile
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

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
from shardpack.errors import RESTORE_SHARD, Option, RecordError, ShardpackError
from shardpack.schema import INT64
from shardpack.storage import HashingBlob, Sink

if TYPE_CHECKING:
    from shardpack.schema import Schema
    from shardpack.storage import Blob, Storage

IMAGE, LABEL, FORMAT = "image", "label", "format"
_EXTENSIONS = {"jpeg": "jpg", "png": "png", "webp": "webp", "raw": "npy"}
_FORMATS = {ext: fmt for fmt, ext in _EXTENSIONS.items()}
_BLOCK = tarfile.BLOCKSIZE  # 512
_RECORD = tarfile.RECORDSIZE  # tar files end padded to a multiple of 20 blocks
_MEMBER = re.compile(r"^(?P<key>[0-9A-Za-z_-]+)\.(?P<ext>[a-z]+|[0-9A-Za-z_.-]+\.bin)$")
# A feature of bytes that are no text is a member of its own, `<key>.<name>.bin` ('/' in its
# name as '.'), where its name is of these: webdataset, wids and datasets key a sample by what
# comes before the member name's first dot and take the rest for the field. Not `.png` for a
# mask: a record with no objects holds an empty one, which no PNG decoder takes.
_BYTES_NAME = re.compile(r"[0-9A-Za-z_-]+(?:/[0-9A-Za-z_-]+)*")
BIN = "bin"
_MAX_BYTES_MEMBERS = 256  # of one sample: past this a sample is refused, not read on
_MOST_DIGITS = 8  # of a record's number in its shard's keys (6, and more past a million)
_MAX_LABEL_DIGITS = 20  # an int64 in decimal
CAPTION, TEXT = "caption", "txt"
IMG2DATASET = "img2dataset"  # the --wds-naming value
# What img2dataset's .json holds beside the columns (its downloader.py's `meta`); the worker
# gives the original size and the sha256 of the bytes fetched, the writer the rest.
IMG2DATASET_FIELDS = ("url", "status", "error_message", "original_width", "original_height",
                      "sha256")  # fmt: skip
# Those the worker gives: what the .json says of the image as fetched.
_ORIGINAL = IMG2DATASET_FIELDS[3:]
# A .json holding both, and the sample's own key as `key`, is an img2dataset-named sample's
# (shardpack's `key` is the source key: a path or URL).
_MARKS = frozenset({"url", "status"})


def _ustar(name: str, size: int) -> bytes:
    """One USTAR header from tarfile, with every field that could vary fixed."""
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = size, 0, 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.type = tarfile.REGTYPE
    return info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "strict")


# Only the name, the size and the checksum differ between our headers, so each is the template's
# fixed fields joined with those three: a fifth of tarfile's cost, three times a sample.
# tests/containers/test_conformance.py checks the bytes against tarfile's own.
_TEMPLATE = _ustar("", 0)
_SIZE, _CHECKSUM = slice(124, 136), slice(148, 156)
_FIXED = (slice(100, 124), slice(136, 148), slice(156, _BLOCK))  # mode..gid, mtime, type..end
_MODE_TO_GID, _MTIME, _TYPE_TO_END = (_TEMPLATE[field] for field in _FIXED)
_NAME_FIELD = bytes(100)  # a name, NUL-padded to its 100 bytes


# The template's byte sum with its checksum field as spaces and no name or size: a header's
# checksum is that plus its name's and its size field's bytes (no sum of 512 bytes a member).
_BASE_SUM = sum(_TEMPLATE) - sum(_TEMPLATE[_CHECKSUM]) + 8 * 32 - sum(_TEMPLATE[_SIZE])


def _header(name: str, size: int) -> bytes:
    """_ustar(name, size): the template's fixed fields joined with these (cheaper than filling
    a copy of the template in)."""
    raw = name.encode("ascii")
    return _named_header(raw, sum(raw), size)


def _named_header(raw: bytes, raw_sum: int, size: int) -> bytes:
    """_header of a name given as its bytes and their sum (a sample's members share their
    key's, summed once a sample)."""
    field = b"%011o\0" % size
    checksum = b"%06o\0 " % (_BASE_SUM + raw_sum + sum(field))
    return b"".join((raw, _NAME_FIELD[len(raw) :], _MODE_TO_GID, field, _MTIME, checksum,
                     _TYPE_TO_END))  # fmt: skip


# Each member's ".ext" after a sample's key, as bytes and their sum.
_SUFFIXES = {ext: (b"." + ext.encode(), sum(b"." + ext.encode()))
             for ext in (*_EXTENSIONS.values(), "cls", TEXT, "json")}  # fmt: skip


_OCTAL_SIZE = re.compile(rb"[0-7]{11}\0")
_OCTAL_CHECKSUM = re.compile(rb"[0-7]{6}\0 ")


def _parse_header(block: bytes, fault, offset: int) -> tuple[str, int]:
    """(name, size) of a header _header wrote: every other field must be the template's, so
    a link, a folder, an owner or a time (what another tar tool writes) is refused, not read.
    A fourth of the cost of tarfile's frombuf, which dominated reading a shard."""
    if any(block[field] != _TEMPLATE[field] for field in _FIXED):
        raise fault(offset, "not a tar header shardpack writes (type, mode, owner or time)")
    if not _OCTAL_SIZE.fullmatch(block[_SIZE]) or not _OCTAL_CHECKSUM.fullmatch(block[_CHECKSUM]):
        raise fault(offset, "bad tar header (size or checksum field)")
    # the fixed fields are the template's (above): only the name and size add to its sum
    if int(block[_CHECKSUM][:6], 8) != _BASE_SUM + sum(block[:100]) + sum(block[_SIZE]):
        raise fault(offset, "bad tar header (bad checksum)")
    name = block[:100].rstrip(b"\0")
    if b"\0" in name or not name.isascii():
        raise fault(offset, "bad tar header (member name)")
    return name.decode("ascii"), int(block[_SIZE][:11], 8)


_AS_THEY_ARE = {int, str}  # what a sample's JSON holds as it is: most of its values
# One encoder for every sample's JSON: json.dumps with these options builds one a call, and so
# does JSONEncoder.encode (its C encoder, a third of a sample's JSON): that one is made once here
# (no circular check: a sample's values are plain lists and scalars, made fresh by _json_value).
_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True)
_C_JSON = json.encoder.c_make_encoder and json.encoder.c_make_encoder(
    None, _JSON.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True
)


def _json(rest: dict[str, object]) -> bytes:
    """_JSON.encode(rest) as bytes."""
    return ("".join(_C_JSON(rest, 0)) if _C_JSON else _JSON.encode(rest)).encode()


_PADDINGS = [b"\0" * n for n in range(_BLOCK)]  # a member of n bytes ends in _PADDINGS[-n % 512]


def _json_value(value: object) -> object:
    """A feature's value as a sample's JSON holds it: a float (every float feature is float32)
    as the shortest text that reads back to its float32, as the list had it (0.4), not as
    the float32 widened (0.4000000059604645: img2dataset's JSON keeps the list's float)."""
    if type(value) in _AS_THEY_ARE:
        return value
    if isinstance(value, bytes):
        return os.fsdecode(value)  # a file name that is not UTF-8 survives as \udcXX escapes
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if type(value) is float:  # a float32 feature's: as the shortest text of its float32
        value = np.float32(value)
    if isinstance(value, np.ndarray | np.generic):  # a number list (boxes, labels): as Python's
        if value.dtype == np.float32:  # each float32 as its shortest text, which reads back to
            return value.astype(str).astype(float).tolist()  # it: 0.4, not 0.4000000059604645
        return value.tolist()
    return value


def _npy(features: Features) -> bytes:
    """Raw HWC uint8 pixels as an .npy file (what webdataset's decoder loads)."""
    shape = (int(features["height"]), int(features["width"]), int(features["channels"]))
    pixels = np.frombuffer(features[IMAGE], np.uint8).reshape(shape)
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, pixels, version=(1, 0), allow_pickle=False)
    return buffer.getvalue()


def bytes_members(schema: Schema | None) -> dict[str, str]:
    """Each feature of the schema written as a member of its own (bytes that are no text, one
    value a record, under a name _BYTES_NAME takes) -> its member's extension (a writer keeps
    it in the .json where the name would not fit a tar header beside its keys)."""
    if schema is None:
        return {}
    return {name: f"{name.replace('/', '.')}.{BIN}" for name, f in schema.extras.items()
            if f.dtype == "bytes" and not f.text and not f.is_list
            and _BYTES_NAME.fullmatch(name)}  # fmt: skip


def sample_members(
    key: str, features: Features, naming: str = "shardpack", apart: dict[str, str] | None = None
) -> list[tuple[str, bytes]]:
    """The (extension, bytes) of one sample's members (`<key>.<extension>`), in the order they
    are written: the image, the label as .cls when it is one class index (else it stays in the
    JSON), with img2dataset's naming the caption as .txt, each feature of `apart`
    (bytes_members) as its own member, then the .json."""
    fmt = features[FORMAT]
    fmt = fmt.decode() if isinstance(fmt, bytes) else fmt
    image = _npy(features) if fmt == "raw" else bytes(features[IMAGE])
    label = features.get(LABEL)
    cls = type(label) is int
    apart = apart or {}
    rest = {  # most values as they are: no call a value
        k: v if type(v) in _AS_THEY_ARE else _json_value(v)
        for k, v in features.items()
        if k != IMAGE and (k != LABEL or not cls) and k not in apart
    }
    members = [(_EXTENSIONS[fmt], image)]
    if cls:
        members.append(("cls", str(label).encode()))
    if naming == IMG2DATASET:
        rest = _img2dataset_json(key, rest)
        if CAPTION in rest:
            members.append((TEXT, str(rest[CAPTION]).encode()))
    members.extend((ext, bytes(features[name])) for name, ext in apart.items() if name in features)
    return [*members, ("json", _json(rest))]


def _img2dataset_json(key: str, rest: dict[str, object]) -> dict[str, object]:
    """A sample's JSON as img2dataset's downloader fills it for a success: the source key as
    `url`, the sample's key as `key`; the original size and sha256 as the worker gave them."""
    rest["url"] = rest.pop("key", None)
    rest.update(key=key, status="success", error_message=None)
    return rest


def _key_stem(shard: str) -> str:
    """The keys' first part for a shard named `{name}-{split}-{index}.tar`: `{split}-{index}`
    (a dataset name holds no '-'), a dot in the split as '-' (a split name holds none): webdataset
    ends a key at its first dot, and wids users join and resume by key across shards."""
    stem = re.sub(
        r"[^0-9A-Za-z_-]", "-", os.path.basename(shard).removesuffix(".tar").split("-", 1)[-1]
    )
    return stem if len(stem) <= _MAX_KEY_STEM else stem.rpartition("-")[2]  # the index alone


# A tar member's name holds 100 bytes: the key's stem, "_", the record's number and an extension.
_MAX_KEY_STEM = 80


class _Writer(ShardWriter):
    def _open(self, sink: Sink) -> None:
        self._out = HashingFile(sink)
        self._stem = _key_stem(self.name)
        # a member's name is 100 bytes at most: key, '_', the record's number, '.', extension
        room = len(_NAME_FIELD) - len(self._stem) - 1 - _MOST_DIGITS - 1
        self._apart = {n: e for n, e in bytes_members(self.schema).items() if len(e) <= room}
        self._suffixes = {**_SUFFIXES, **{ext: (b"." + ext.encode(), sum(b"." + ext.encode()))
                                          for ext in self._apart.values()}}  # fmt: skip

    def _append(self, features: Features) -> int:
        out, offset = self._out, self._out.size
        key = f"{self._stem}_{len(self.offsets):06d}"
        raw = key.encode("ascii")  # the stem and number are ASCII: a member's name summed once
        raw_sum = sum(raw)
        (ext, image), *small = sample_members(key, features, self.naming, self._apart)
        suffixes = self._suffixes
        suffix, suffix_sum = suffixes[ext]
        head = _named_header(raw + suffix, raw_sum + suffix_sum, len(image))
        # the small members, with the image's padding, in one piece: a write each costs more
        # than joining them, here and in the thread that hashes and writes them
        parts = [_PADDINGS[-len(image) % _BLOCK]]
        for ext, data in small:
            suffix, suffix_sum = suffixes[ext]
            size = len(data)
            parts += (_named_header(raw + suffix, raw_sum + suffix_sum, size), data,
                      _PADDINGS[-size % _BLOCK])  # fmt: skip
        out.writelines((head, image, b"".join(parts)))
        return offset

    def _close(self, failed: bool) -> tuple[int, str]:
        if failed:
            self._out.discard()
        else:  # the end-of-archive marker: two zero blocks, then up to a full record
            end = self._out.size + 2 * _BLOCK
            self._out.write(b"\0" * (2 * _BLOCK + (-end % _RECORD)))
        return self._out.finish()


class _Tar:
    """A tar shard read at offsets (open_shard: no link followed), every size bounded."""

    def __init__(self, blob: Blob) -> None:
        self.blob, self.path, self.size = blob, blob.name, blob.size
        self.stem = _key_stem(self.path)
        self.split = self.stem.rpartition("-")[0]  # a key's shard index may be an old one

    def fault(self, offset: int, reason: str) -> RecordError:
        return RecordError(self.path, offset, reason)

    def member(self, offset: int) -> tuple[str, str, bytes, int] | None:
        """(key, extension, data, next offset) of the member at `offset`; None at the end."""
        block = self.blob.pread(_BLOCK, offset)
        if len(block) < _BLOCK:
            raise self.fault(offset, "file ends inside a tar header (truncated)")
        if block == b"\0" * _BLOCK:
            return None
        name, size = _parse_header(block, self.fault, offset)
        match = _MEMBER.match(name)
        if not match:
            raise self.fault(offset, f"unexpected tar member {name!r}")
        start = offset + _BLOCK
        if size > min(MAX_RECORD_BYTES, self.size - start):
            raise self.fault(offset, f"member {name!r} claims {size} bytes, past the end of "
                                     "the file (truncated)")  # fmt: skip
        data = self.blob.pread(size, start)
        return match["key"], match["ext"], data, start + size + (-size % _BLOCK)

    def sample(
        self, offset: int, number: int, original: dict | None = None
    ) -> tuple[Example | RecordError, int] | None:
        """(the sample at `offset`, the shard's `number`th, and the next sample's offset); None
        at the end-of-archive.

        A sample is the members from its image to its .json; its key must name
        this shard's split and the record's number, as the writer keyed it (the shard's index
        in it may be one an --update's renumbering moved it from; packed before keys named
        their shard, the number alone): a tar of another split put in this one's place is
        refused, not read as this split's records. `original` takes what an img2dataset-named
        sample's .json says of the image as fetched (ShardReader.original)."""
        members: list[tuple[str, str, bytes]] = []
        position = offset
        while not members or (members[-1][1] != "json" and _may_go_on(members)):
            found = self.member(position)
            if found is None:
                if members:
                    raise self.fault(position, "archive ends inside a sample")
                return None
            members.append(found[:3])
            position = found[3]
        stem, _, counted = members[0][0].rpartition("_")
        if counted != f"{number:06d}" or (stem and stem.rpartition("-")[0] != self.split):
            key, expected = members[0][0], f"{self.stem}_{number:06d}"
            moved = self.fault(offset, f"sample {key!r} is not this shard's record {number} "
                                       f"({expected!r}): another shard's file put in its "
                                       f"place; {RESTORE_SHARD}")  # fmt: skip
            return moved, position
        try:
            return _decode(members, self.path, offset, original), position
        except RecordError as e:  # the tar's framing held: the next sample can be read
            return e, position

    def check_end(self, offset: int) -> None:
        """After the last sample: nothing but zero blocks, a whole number of blocks."""
        tail = self.blob.pread(_RECORD + 2 * _BLOCK + 1, offset)
        if len(tail) < 2 * _BLOCK or len(tail) > _RECORD + 2 * _BLOCK or tail.count(0) != len(tail):
            raise self.fault(offset, "bad end of archive (truncated, or data after the end)")
        if (offset + len(tail)) % _BLOCK:
            raise self.fault(offset, "file size is not a whole number of tar blocks")

    def close(self) -> None:
        self.blob.close()


# What may come between an image and its .json, before its features' own members (.<name>.bin)
_BETWEEN = ([], ["cls"], [TEXT], ["cls", TEXT])


def _may_go_on(members: list[tuple[str, str, bytes]]) -> bool:
    """Whether a sample's members so far (no .json yet) may be followed by more: a wrong one
    ends it, to be refused by name, not read past."""
    fixed, apart = _parted([ext for _, ext, _ in members[1:]])
    return len(apart) < _MAX_BYTES_MEMBERS and (
        fixed in _BETWEEN if apart else any(a[: len(fixed)] == fixed for a in _BETWEEN)
    )


def _parted(between: list[str]) -> tuple[list[str], list[str]]:
    """The members between an image and its .json as (the .cls and .txt before the features'
    own members, those members): one of another kind after a feature's is in the first."""
    count = len(between)
    while count and between[count - 1].endswith("." + BIN):
        count -= 1
    return between[:count], between[count:]


def _decode(
    members: list[tuple[str, str, bytes]], path: str, offset: int, original: dict | None = None
) -> Example:
    """One sample's members as name -> list of values, the shape decode_example returns (and,
    into `original`, img2dataset's fields of the image as fetched)."""

    def bad(reason: str) -> RecordError:
        return RecordError(path, offset, reason)

    (key, image_ext, image), *middle, (_, json_ext, text) = members
    between, _ = _parted([ext for _, ext, _ in middle])
    labelled = between[:1] == ["cls"]
    if {k for k, _, _ in members} != {key} or json_ext != "json" or between not in _BETWEEN:
        raise bad(f"sample {key!r} is not <key>.<image>, [<key>.cls], [<key>.txt], "
                  "[<key>.<feature>.bin ...], <key>.json")  # fmt: skip
    if image_ext not in _FORMATS:
        raise bad(f"sample {key!r} has no image member (.jpg, .png, .webp or .npy)")
    cls = middle[0][2] if labelled else b"0"
    if not (0 < len(cls) <= _MAX_LABEL_DIGITS and cls.lstrip(b"-").isdigit()):
        raise bad(f"{key}.cls is not a decimal label")
    try:
        rest = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise bad(f"{key}.json is not JSON ({e})") from None
    if not isinstance(rest, dict) or rest.get(FORMAT) != _FORMATS[image_ext]:
        raise bad(f"{key}.json does not describe a {image_ext} image")
    if rest.keys() >= _MARKS and rest.get("key") == key:  # img2dataset's: as written
        rest["key"] = rest.pop("url")
        for name in IMG2DATASET_FIELDS[1:]:
            value = rest.pop(name, None)
            if original is not None and name in _ORIGINAL:
                original[name] = value
    elif TEXT in between:
        raise bad(f"{key}.txt beside a .json that is not img2dataset's (no url and status)")
    if labelled and LABEL in rest:  # pack writes one or the other: which is the record's?
        raise bad(f"{key}.cls beside a label in {key}.json (readers would differ on it)")
    example: Example = {k: _listed(v) for k, v in rest.items()}
    if past := next((k for k, v in example.items() for n in v if _past_int64(n)), None):
        raise bad(f"{key}.json: {past!r} holds an integer past int64")
    for _, ext, data in middle[len(between) :]:
        name = ext.removesuffix("." + BIN).replace(".", "/")
        if name in example:  # in the .json too, or twice: which is the record's?
            raise bad(f"{key}.{ext} beside another value of {name!r} (readers would differ on it)")
        example[name] = [data]
    if labelled:
        example[LABEL] = [int(cls)]
    example[IMAGE] = [_pixels(image, path, offset) if image_ext == "npy" else image]
    return example


def _past_int64(value: object) -> bool:
    """Whether a .json value is an integer no int64 feature holds (JSON's are unbounded)."""
    return type(value) is int and not INT64[0] <= value <= INT64[1]


def _listed(value: object) -> list:
    """A .json value as a feature's list: text as bytes, a float as the float32 it stands for
    (every float feature is float32: as the other containers read it back)."""
    values = value if isinstance(value, list) else [value]
    return [os.fsencode(v) if isinstance(v, str) else float(np.float32(v)) if type(v) is float
            else v for v in values]  # fmt: skip


def _pixels(data: bytes, path: str, offset: int) -> bytes:
    """The raw bytes of an .npy member, refusing anything but a uint8 image array whose header
    declares exactly the bytes the member holds (np.load would allocate what a header claims,
    2**60 bytes as readily as 3,072, before it found the data short)."""
    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read_header = _NPY_HEADERS.get(version)
        if read_header is None:
            raise ValueError(f"version {version[0]}.{version[1]}")
        shape, fortran_order, dtype = read_header(stream)
    except (ValueError, OSError, EOFError, SyntaxError) as e:
        raise RecordError(path, offset, f"the .npy image does not load ({e})") from None
    if dtype != np.uint8 or fortran_order or len(shape) != 3:
        raise RecordError(path, offset, "the .npy image is not an HxWxC uint8 array")
    pixels = data[stream.tell() :]
    if math.prod(shape) != len(pixels):
        raise RecordError(path, offset, f"the .npy image declares {shape[0]}x{shape[1]}x"
                          f"{shape[2]} pixels but holds {len(pixels):,} bytes")  # fmt: skip
    return pixels


_NPY_HEADERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


class _Reader(ShardReader):
    def __init__(
        self, storage: Storage, name: str, offsets: Sequence[int] | None, num_bytes: int | None
    ) -> None:
        self.tar = _Tar(open_shard(storage, name, num_bytes))
        try:
            if offsets is None:
                offsets = [offset for offset, _ in _samples(self.tar)]
        except BaseException:
            self.tar.close()
            raise
        self.offsets = list(offsets)

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i: int) -> Example:
        found = self.tar.sample(self.offsets[i], i)
        if found is None:
            raise self.tar.fault(self.offsets[i], "no sample starts here (stale offsets)")
        return checked(found[0])

    def position(self, i: int) -> int:
        return self.offsets[i]

    def original(self, i: int) -> dict[str, object]:
        found: dict[str, object] = {}
        self.tar.sample(self.offsets[i], i, found)
        return found

    def close(self) -> None:
        self.tar.close()


def _samples(tar: _Tar) -> Iterator[tuple[int, Example | RecordError]]:
    """Every sample in order, then a check of the end-of-archive marker."""
    offset = 0
    for number in itertools.count():
        if (found := tar.sample(offset, number)) is None:
            break
        yield offset, found[0]
        offset = found[1]
    tar.check_end(offset)


def _formats_apart(naming: str, formats: list[str]) -> list[str]:
    """A line where the samples name their images by several formats (.jpg, .png: --encode
    keep of JPEGs and PNGs): `datasets.load_dataset` takes one set of member names a pack (its
    first 5 samples'), and code written for img2dataset's output asks every sample for its
    --encode_format's."""
    if len(formats) < 2:
        return []
    theirs = (
        ", and code written for img2dataset's output (to_tuple('jpg', 'txt', 'json')) finds no "
        ".jpg in a sample of another; encoding them as jpeg names each .jpg, as img2dataset's "
        "default does"
        if naming == IMG2DATASET
        else "; encode them as jpeg or png for one"
    )
    return [f"its samples hold images of {len(formats)} formats ({', '.join(formats)}) under "
            "as many extensions, which datasets.load_dataset(OUT) misreads: it takes its first "
            "samples' members for every sample's, so another format's images load as None (or "
            f"it refuses the pack, where its first 5 samples mix them){theirs}"]  # fmt: skip


def _no_caption(naming: str, schema: Schema) -> list[str]:
    """img2dataset's naming of a dataset with no `caption` but text columns (LAION's `TEXT`):
    no sample holds the .txt that code written for img2dataset's output asks for."""
    if naming != IMG2DATASET or CAPTION in schema:
        return []
    texts = [name for name, f in schema.extras.items() if f.text and f.shape == ()]
    if not texts:
        return []
    said = ", ".join(map(repr, texts[:3])) + (", ..." if len(texts) > 3 else "")
    captions = next((name for name in texts if name.lower() == "text"), texts[0])
    return [f"no 'caption' column, so no sample holds a .txt (img2dataset writes one from the "
            "column its caption_col names, renamed 'caption'), and code written for its output "
            f"(to_tuple('jpg', 'txt', 'json')) finds none; the text columns ({said}) are in "
            "each .json: name the captions' feature 'caption' for a .txt (a list's: --columns "
            f"{captions}=caption, with the other columns to keep)"]  # fmt: skip


def _binary_in_json(schema: Schema) -> list[str]:
    """A line where features of bytes that are no text but are no member of their own (a list
    of them, or a name a member cannot take: bytes_members) ride in each sample's .json, as
    \\udcXX escapes of their bytes past ASCII: json reads them back, but
    `datasets.load_dataset` (pyarrow) refuses such strings."""
    apart = bytes_members(schema)
    binary = [name for name, f in schema.extras.items()
              if f.dtype == "bytes" and not f.text and name not in apart]  # fmt: skip
    if not binary:
        return []
    said = ", ".join(map(repr, binary[:3])) + (", ..." if len(binary) > 3 else "")
    return [f"its samples' .json holds {said}, bytes that are no text, as \\udcXX escapes, "
            "which Python's json reads back but datasets.load_dataset(OUT) refuses (pyarrow: "
            "surrogates not allowed); for datasets and the Hub, pack it as parquet, whose "
            "columns hold bytes"]  # fmt: skip


class WebDataset(Container):
    """Tar shards for `webdataset.WebDataset`, `wids` and DALI's webdataset reader."""

    name = "webdataset"
    framing = "tar headers"
    min_record_bytes = _BLOCK  # a sample is one member at least, each a 512-byte header
    media_type = "application/x-tar"
    writer_class = _Writer
    shard_template = "{name}-{split}-{index:06d}.tar"
    shard_pattern = re.compile(NAME_SPLIT + r"-\d{6,}\.tar")
    namings = ("shardpack", IMG2DATASET)

    def check_naming(self, naming: str, features: Sequence[str]) -> None:
        """img2dataset's naming refuses a feature of a name its .json takes, as img2dataset
        refuses such a save_additional_columns."""
        taken = sorted(set(features) & set(IMG2DATASET_FIELDS)) if naming == IMG2DATASET else []
        if taken:
            raise ShardpackError(
                Option("wds_naming", IMG2DATASET),
                f": img2dataset's .json keeps {', '.join(map(repr, taken))} for its own fields; "
                "rename that column",
            )

    def naming_notes(self, naming: str, schema: Schema, formats: list[str]) -> list[str]:
        return [*_formats_apart(naming, formats), *_no_caption(naming, schema),
                *_binary_in_json(schema)]  # fmt: skip

    def iter_records(
        self, storage: Storage, name: str, compression: str = "none", digest=None,
        num_bytes: int | None = None,
    ) -> Iterator[tuple[int, Example | RecordError]]:  # fmt: skip
        tar = _Tar(open_hashing(storage, name, digest, num_bytes))
        try:
            yield from _samples(tar)
        finally:
            if isinstance(tar.blob, HashingBlob):
                tar.blob.finish()  # the rest of the file, into the hash
            tar.close()

    def open(
        self, storage: Storage, name: str, compression: str = "none", offsets=None,
        num_bytes: int | None = None,
    ) -> ShardReader:  # fmt: skip
        return _Reader(storage, name, offsets, num_bytes)

    def split_files(
        self, name: str, split: str, shards: list[tuple[str, int, int]]
    ) -> dict[str, object]:
        # filesize as wids' own index writer gives it (its `widsindex info` sums it)
        shardlist = [{"url": file, "nsamples": count, "filesize": size}
                     for file, count, size in shards]  # fmt: skip
        document = {
            "__kind__": "wids-shard-index-v1",
            "wids_version": 1,
            "name": f"{name}-{split}",
            "shardlist": shardlist,  # urls relative to this file, as wids resolves them
        }
        return {f"{name}-{split}.shardindex.json": document}
