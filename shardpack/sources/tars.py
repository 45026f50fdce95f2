"""The WebDataset source: tar files as the webdataset library reads them. SRC is a .tar file, a
folder of them, or a brace pattern (`shards-{000..009}.tar`). Members are grouped into samples
as webdataset groups them (key: the path up to the first dot of the base name; consecutive
members of one key); the image is the member of the first of IMAGE_EXTENSIONS the sample has,
`cls`/`cls2`/`label` (decimal text) the label, `txt` a text feature, each `json` field a typed
feature (under its own name, or `json/<name>` where that is taken), any other member a bytes
feature named by its extension. The scan reads tar headers and the small members; an item's
position is its image's data offset, so a worker reads that member's bytes alone.
"""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping

from shardpack.errors import ImageError, SourceError
from shardpack.options import PackOptions
from shardpack.schema import BUILTIN_NAMES, LABEL, Feature, Schema
from shardpack.sources.classlist import MAX_CLASSES
from shardpack.sources.pieces import kept_open
from shardpack.sources.scanned import listed
from shardpack.sources.source import Dataset, Item, Source
from shardpack.storage import Blob, Storage, storage_at

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm")
LABEL_EXTENSIONS = ("cls", "cls2", "label")
TEXT, JSON = "txt", "json"
# A member the scan reads whole (a caption, a json, a mask) is small; refuse a trap.
MAX_MEMBER_BYTES = 16 * 2**20
# A pax or GNU long-name header tarfile reads whole: a name and a few attributes.
MAX_HEADER_BYTES = 2**20
# webdataset's tar_file_iterator: metadata members skipped; base_plus_ext: key and extension.
_META = re.compile(r"__[^/]*__($|/)")
_KEY_EXT = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_CHOICES = re.compile(r"\{([^{}]*,[^{}]*)\}")
_MAX_PATTERN_NAMES = 1_000_000
_HOSTILE = {
    tarfile.SYMTYPE: "a symbolic link",
    tarfile.LNKTYPE: "a hard link",
    tarfile.CHRTYPE: "a device",
    tarfile.BLKTYPE: "a device",
    tarfile.FIFOTYPE: "a FIFO",
}
_PASS = (
    "pass WebDataset .tar files (uncompressed), a folder of them or a shards-{000..009}.tar pattern"
)


class TarSource(Source):
    """WebDataset tars."""

    name = "webdataset"
    kinds = (name,)
    described = "WebDataset tars (a .tar file, a folder of them, or a brace pattern)"

    def takes_path(self, where: str) -> bool:
        return where.endswith(".tar") or _pattern(where)

    def recognise(self, root: Storage, options: PackOptions) -> tuple | None:
        where, kind = root.path(), root.kind()
        if kind == "file" and where.endswith(".tar"):
            return None, root, [""]
        if kind is None and _pattern(where):
            parent, base = where.rsplit("/", 1)
            return parent, None, _expand(base, where)
        if kind == "dir":
            entries = root.listdir()
            tars = [e.name for e in entries if not e.is_dir and e.name.endswith(".tar")]
            # beside folders, tars are the source's only when asked: a class folder may hold one
            if tars and (options.source == self.name or not any(e.is_dir for e in entries)):
                return None, root, tars
        if options.source == self.name:
            raise SourceError(f"{where}: holds no .tar files; {_PASS}")
        return None

    def scan(
        self, found: tuple, options: PackOptions, storage_options: Mapping[str, object] | None
    ) -> Dataset:
        parent, root, names = found
        return scan_tars(root or storage_at(parent, storage_options), names, options)

    def load(self, item: Item, root: Storage, options: PackOptions, cache: dict) -> bytes:
        try:
            blob = kept_open(cache, "tar.files", root.open).get(item.path)
            data = blob.pread(item.size, item.position)
        except OSError as e:
            raise ImageError(item.key, f"cannot read its tar ({e.strerror or e})") from None
        if len(data) != item.size:
            raise ImageError(item.key, "the tar ends inside the image (truncated since listed)")
        return data

    def item_files(self, items: Iterable[Item]) -> Iterator[tuple[str, int]]:
        return iter(())  # members are read a piece at a time, not as whole files


def _pattern(where: str) -> bool:
    base = where.rsplit("/", 1)[-1]
    return bool(_RANGE.search(base) or _CHOICES.search(base))


def _expand(pattern: str, where: str) -> list[str]:
    """A brace pattern's names, as webdataset's braceexpand gives them ({0..9}, {a,b})."""
    names = [pattern]
    while any("{" in name for name in names):
        expanded = []
        for name in names:
            found = _RANGE.search(name)
            if found:
                first, last = found[1], found[2]
                width = len(first) if first.startswith("0") else 0
                values = [f"{i:0{width}d}" for i in range(int(first), int(last) + 1)]
            elif found := _CHOICES.search(name):
                values = found[1].split(",")
            else:
                raise SourceError(f"{where}: a brace that is not {{a..b}} or {{x,y}}; {_PASS}")
            expanded += [name[: found.start()] + v + name[found.end() :] for v in values]
            if len(expanded) > _MAX_PATTERN_NAMES:
                raise SourceError(f"{where}: names over {_MAX_PATTERN_NAMES:,} tars; {_PASS}")
        names = expanded
    return names


class _Sample:
    """One sample's members: extension -> (data offset, size), and the small ones' bytes."""

    __slots__ = ("data", "key", "members", "path", "tar", "why")

    def __init__(self, path: str, tar: str, key: str) -> None:
        self.path, self.tar, self.key, self.why = path, tar, key, None  # tar: path, or its name
        self.members: dict[str, tuple[int, int]] = {}
        self.data: dict[str, bytes] = {}


def scan_tars(root: Storage, names: list[str], options: PackOptions) -> Dataset:
    """Every sample of the tars `names` in `root`, in order."""
    from shardpack import images  # numpy: not for pack --help

    limit = images.max_file_bytes(options.max_pixels)
    samples: list[_Sample] = []
    for name in names:
        found = _read_tar(root, name, limit)
        samples += found
        listed(len(found))
    return _dataset(root, samples, options)


def _read_tar(root: Storage, name: str, limit: int) -> list[_Sample]:
    """The samples of one tar: headers read, small members' bytes kept."""
    path = root.path(name)
    try:
        blob = root.open(name)
    except OSError as e:
        raise SourceError(f"{path}: cannot open ({e.strerror or e}); {_PASS}") from None
    with blob:
        samples = list(_group(_members(blob, path), name, name or os.path.basename(path)))
        for sample in samples:
            if sample.why is None:
                _read_small(blob, sample, limit)
    return samples


def _members(blob: Blob, path: str) -> Iterator[tarfile.TarInfo]:
    """The tar's members, headers only (tarfile seeks over each member's data)."""
    try:
        tar = tarfile.open(fileobj=_Headers(blob), mode="r:")  # noqa: SIM115
        while (info := tar.next()) is not None:
            tar.members.clear()  # tarfile keeps every header it read
            if info.offset_data + info.size > blob.size:
                raise SourceError(f"{path}: member {info.name!r} ends past the end of the file "
                                  f"(truncated); {_PASS}")  # fmt: skip
            yield info
    except (tarfile.TarError, UnicodeError, ValueError, OverflowError) as e:
        raise SourceError(f"{path}: is not a tar file ({e}); {_PASS}") from None


class _Headers(io.RawIOBase):
    """A tar Blob as the seekable file tarfile reads headers from; every read bounded."""

    def __init__(self, blob: Blob) -> None:
        self.blob, self.at, self.name = blob, 0, blob.name

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > MAX_HEADER_BYTES:
            raise ValueError(f"a header of {size} bytes at byte {self.at} is over-long (hostile)")
        data = self.blob.pread(size, self.at)
        self.at += len(data)
        return data

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.at = offset + (0, self.at, self.blob.size)[whence]
        return self.at

    def tell(self) -> int:
        return self.at

    def seekable(self) -> bool:
        return True


def _group(members: Iterator[tarfile.TarInfo], path: str, tar: str) -> Iterator[_Sample]:
    """Members grouped into samples as webdataset's group_by_keys does."""
    sample = None
    for info in members:
        if info.isdir() or _META.match(info.name) or info.name.startswith("__"):
            continue
        match = _KEY_EXT.match(info.name)
        if match is None:
            continue
        key, ext = match[1], match[2].lower()
        if sample is None or sample.key != key:
            if sample is not None:
                yield sample
            sample = _Sample(path, tar, key)
        if info.type in _HOSTILE or not info.isreg():
            what = _HOSTILE.get(info.type, f"of tar type {info.type!r}")
            sample.why = sample.why or f"tar member {info.name!r} is {what}: refused, not read"
        elif ext in sample.members:
            sample.why = sample.why or f"tar member {info.name!r}: a second .{ext} of the sample"
        sample.members[ext] = (info.offset_data, info.size)
    if sample is not None:
        yield sample


def _read_small(blob: Blob, sample: _Sample, limit: int) -> None:
    """Read every member but the image; set `why` where the sample cannot be packed."""
    image = next((ext for ext in IMAGE_EXTENSIONS if ext in sample.members), None)
    if image is None:
        sample.why = f"no image member (.{', .'.join(IMAGE_EXTENSIONS[:4])}, ...)"
        return
    for ext, (offset, size) in sample.members.items():
        most = limit if ext == image else MAX_MEMBER_BYTES
        if size > most:
            sample.why = f"tar member .{ext} of {size:,} bytes is over-long (over {most:,})"
            return
        if ext != image:
            sample.data[ext] = blob.pread(size, offset)
    sample.members = {image: sample.members[image]}


# ---- samples -> items --------------------------------------------------------------------------


def _dataset(root: Storage, samples: list[_Sample], options: PackOptions) -> Dataset:
    good = [s for s in samples if s.why is None]
    present = {ext for s in good for ext in s.data}
    label = next((ext for ext in LABEL_EXTENSIONS if ext in present), None)
    if label is None and options.classes is not None:
        raise SourceError(f"{root.path()}: no sample has a .cls member for --classes to name")
    taken = {*BUILTIN_NAMES, LABEL}
    members = {ext: _free(ext, taken, "member/") for ext in sorted(present - {label, JSON})}
    parsed = [_json(s) if JSON in present else {} for s in good]
    columns, warnings = _json_features(parsed, taken)
    features = {members[ext]: Feature("bytes", text=ext == TEXT) for ext in members}
    features.update({name: feature for _, (name, feature) in sorted(columns.items())})
    items, skipped, top = [], [(f"{s.tar}:{s.key}", s.why) for s in samples if s.why], -1
    for sample, value in zip(good, parsed, strict=True):
        key = f"{sample.tar}:{sample.key}"
        try:
            number = _label(sample.data.get(label), options.classes) if label else None
            fields = {members[ext]: _member(ext, sample.data.get(ext, b"")) for ext in members}
            fields.update(_json_values(value, columns))
        except _Bad as e:
            skipped.append((key, str(e)))
            continue
        top = max(top, -1 if number is None else number)
        ((offset, size),) = sample.members.values()
        items.append(Item(key, number, sample.path, size, offset, fields))
    classes = options.classes or tuple(str(i) for i in range(top + 1)) if label else None
    return Dataset(TarSource.name, root, Schema.build(classes, features), {"train": tuple(items)},
                   skipped=tuple(skipped), warnings=tuple(warnings))  # fmt: skip


class _Bad(Exception):
    """A sample that cannot be packed (why)."""


def _free(name: str, taken: set[str], prefix: str) -> str:
    """`name`, or prefix + name where a feature has it; taken from then on."""
    name = prefix + name if name in taken else name
    taken.add(name)
    return name


def _label(data: bytes | None, classes: tuple[str, ...] | None) -> int:
    text = (data or b"").strip()
    if not text.isdigit() or len(text) > 18:
        raise _Bad(f"label {text[:20]!r} is not a class number (decimal, from 0)")
    number = int(text)
    if number >= MAX_CLASSES:  # classes "0".."max" are made: a stray huge label is no class
        raise _Bad(f"label {number} is over the {MAX_CLASSES:,} classes a dataset may have")
    if classes is not None and number >= len(classes):
        raise _Bad(f"label {number} is not one of the {len(classes)} classes of --classes")
    return number


def _member(ext: str, data: bytes) -> str | bytes:
    if ext != TEXT:
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _Bad(".txt is not UTF-8 text") from None


def _json(sample: _Sample) -> dict | None:
    """A sample's .json as an object; None (noted in `why`) when it is not one."""
    try:
        value = json.loads(sample.data.get(JSON, b"{}"))
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, dict):
        sample.why = ".json is not a JSON object"
        return None
    return value


def _json_features(
    parsed: list[dict | None], taken: set[str]
) -> tuple[dict[str, tuple[str, Feature]], list[str]]:
    """field -> (feature name, type) of each json field the schema can carry, and warnings
    for the ones it cannot (nested objects, numbers some samples lack)."""
    from shardpack.sources.tables.kinds import infer, kind_of  # numpy: not for --help

    objects = [value for value in parsed if value is not None]
    counts: dict[str, Counter] = {}
    for value in objects:
        for field, v in value.items():
            counts.setdefault(field, Counter())[kind_of(v, False)] += 1
    columns, warnings = {}, []
    for field, count in sorted(counts.items()):
        count[None] += len(objects) - sum(count.values())
        bad = next((k.why for k in count if k is not None and k.bad), None)
        feature = infer(count, False) if bad is None else None
        if feature is not None and not feature.shape and not feature.text and count[None]:
            bad = f"no value in {count[None]} samples"
        if bad is not None:
            warnings.append(f"json field {field!r} left out: it holds {bad}")
            continue
        columns[field] = (_free(field, taken, "json/"), feature)
    return columns, warnings


def _json_values(value: dict | None, columns: dict[str, tuple[str, Feature]]) -> dict:
    """One sample's json fields as the schema types them."""
    from shardpack.sources.tables.kinds import fits, kind_of  # numpy: not for pack --help

    if value is None:
        raise _Bad(".json is not a JSON object")
    fields = {}
    for field, (name, feature) in columns.items():
        v = value.get(field)
        kind = kind_of(v, False)
        if kind is None:
            fields[name] = "" if feature.text and not feature.shape else ()
        elif not fits(kind, feature):
            raise _Bad(f"json field {field!r} holds {v!r:.40}, not as the other samples")
        elif feature.shape:
            fields[name] = tuple(v)
        else:
            fields[name] = int(v) if feature.dtype == "int64" else v
    return fields


SOURCE = TarSource()
