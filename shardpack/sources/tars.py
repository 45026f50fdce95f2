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

import errno
import functools
import io
import json
import os
import posixpath
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, NamedTuple

from shardpack.errors import ImageError, Option, SourceError, is_store_refusal, os_error_fix
from shardpack.options import PackOptions
from shardpack.schema import BUILTIN_NAMES, LABEL, Feature, Schema
from shardpack.sources.braces import expand, has_braces
from shardpack.sources.classlist import MAX_CLASSES
from shardpack.sources.openfiles import kept_open
from shardpack.sources.scanprogress import listed
from shardpack.sources.source import Dataset, Item, Source, a_link, cannot_read
from shardpack.sources.tables.files import SUFFIXES as MANIFEST_SUFFIXES
from shardpack.storage import Blob, Storage, storage_at

if TYPE_CHECKING:
    import tarfile

IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "gif", "tif", "tiff", "ppm", "pgm")
LABEL_EXTENSIONS = ("cls", "cls2", "label")
TEXT, JSON = "txt", "json"
# A member the scan reads whole (a caption, a json, a mask) is small; refuse a trap.
MAX_MEMBER_BYTES = 16 * 2**20
# A pax or GNU long-name header tarfile reads whole: a name and a few attributes.
MAX_HEADER_BYTES = 2**20
# The small members the scan keeps for every sample (captions, json, masks): what the tars
# store, so a hostile tar costs its own size at most; past this many bytes in all, refused.
MAX_KEPT_BYTES = 4 * 2**30
_BLOCK = 512  # a tar header, and the unit members are padded to
# Blocks past an early end tried as headers before the count of what it lost stops (32 MiB
# of what is no tar: a second or two).
_MAX_LOST_TRIES = 2**16
# webdataset's tar_file_iterator: metadata members skipped; base_plus_ext: key and extension.
_META = r"__[^/]*__($|/)"
_KEY_EXT = r"^((?:.*/|)[^.]+)[.]([^/]*)$"
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
            return parent, None, expand(base, where, "tars", _PASS)
        if kind == "dir":
            entries = sorted(root.entry_names())  # names alone: a size is a stat a file
            # hidden files skipped, as by every folder source: macOS leaves `._x.tar` (no tar)
            # beside each tar it copies to a disk of another kind
            tars = [name for name, is_dir in entries if not is_dir and name.endswith(".tar")
                    and not name.startswith(".")]  # fmt: skip
            # beside folders, tars are the source's only when asked: a class folder may hold one
            if tars and (options.source == self.name or not any(d for _, d in entries)):
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
            header = blob.pread(_BLOCK, item.position - _BLOCK)
            data = blob.pread(item.size, item.position)
        except OSError as e:
            raise ImageError(item.key, f"cannot read its tar ({e.strerror or e})") from None
        if len(data) != item.size:
            raise ImageError(item.key, "the tar ends inside the image (truncated since listed)")
        tar = item.path or os.path.basename(root.path())
        if not _heads(header, item.key[len(tar) + 1 :], item.size):
            raise ImageError(item.key, f"{root.path(item.path)}: changed since the scan (no "
                                       f"header of this sample's image of {item.size:,} bytes at "
                                       f"byte {item.position - _BLOCK:,}); pack again")  # fmt: skip
        return data

    def item_files(self, items: Iterable[Item]) -> Iterator[tuple[str, int]]:
        return iter(())  # members are read a piece at a time, not as whole files


def _pattern(where: str) -> bool:
    """Whether SRC is a brace pattern of tars: one of manifest files is a manifest's."""
    base = where.rsplit("/", 1)[-1]
    return has_braces(base) and not base.lower().endswith(MANIFEST_SUFFIXES)


def _heads(header: bytes, key: str, size: int) -> bool:
    """Whether a tar header is still the one the scan found before a sample's image: a
    regular member of `size` bytes named as sample `key` (one a tar repeats: `key#n`). Its
    fields are read as tarfile's frombuf reads them, but only these three (frombuf reads all:
    tens of microseconds an image)."""
    import tarfile  # the scan of a tar imported it (~2 ms): a folder pack never does

    regular = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE)
    if len(header) != _BLOCK or header[156:157] not in regular:
        return False
    field = header[124:136]
    if field[0] & 0x80:  # base-256, as GNU writes sizes of 8 GiB and more; 0xff: negative
        stated = -1 if field[0] == 0xFF else int.from_bytes(field[1:], "big")
    else:
        try:
            stated = int(field.split(b"\0", 1)[0].strip() or b"0", 8)
        except ValueError:
            return False
    if stated != size:
        return False
    name = header[:100].split(b"\0", 1)[0]
    if header[345]:  # a ustar prefix
        name = header[345:500].split(b"\0", 1)[0] + b"/" + name
    return _named(name.decode(tarfile.ENCODING, "surrogateescape"), key)


def _named(name: str, key: str) -> bool:
    """Whether a header's name is one of sample `key`'s members (one a tar repeats: `key#n`):
    in full, or the stand-in a pax or GNU header leaves for a long or non-ASCII name (cut at
    100 bytes, `?` for each character that is not ASCII)."""
    import tarfile  # the scan of a tar imported it

    if (
        name.startswith(key)
        and name[len(key) : len(key) + 1] == "."
        and "/" not in name[len(key) :]
    ):
        return True  # key, then an extension: a key's base name holds no dot
    if (again := re.fullmatch(r"(.*)#\d+", key)) is not None and _named(name, again[1]):
        return True
    stored = name.encode(tarfile.ENCODING, "surrogateescape")
    for form in (key, key.encode("ascii", "replace").decode()):
        whole = f"{form}.".encode(tarfile.ENCODING, "surrogateescape")
        if stored.startswith(whole) or (len(stored) >= 100 and whole.startswith(stored)):
            return True
    return False


class _Sample:
    """One sample's members: extension -> (data offset, size), and the small ones' bytes."""

    __slots__ = ("data", "dotted", "key", "members", "path", "tar", "why")

    def __init__(self, path: str, tar: str, key: str) -> None:
        self.path, self.tar, self.key, self.why = path, tar, key, None  # tar: path, or its name
        self.members: dict[str, tuple[int, int]] = {}
        self.data: dict[str, bytes] = {}
        self.dotted: str | None = None  # its first image named with a dot in its key


def scan_tars(root: Storage, names: list[str], options: PackOptions) -> Dataset:
    """Every sample of the tars `names` in `root`, in order."""
    from shardpack import images  # numpy: not for pack --help

    limit, kept = images.max_file_bytes(options.max_pixels), [0]
    samples: list[_Sample] = []
    for name in names:
        found = _read_tar(root, name, limit, kept)
        samples += found
        listed(len(found))
    return _dataset(root, samples, options)


def _read_tar(root: Storage, name: str, limit: int, kept: list[int]) -> list[_Sample]:
    """The samples of one tar: headers read, small members' bytes kept (`kept`: the bytes kept
    so far, over every tar)."""
    path = root.path(name)
    try:
        blob = root.open(name)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link, not followed: where it leads
            raise a_link(root, name) from None
        # a store's refusal: what to check; else not a tar to read
        fix = os_error_fix(e) if is_store_refusal(e) else _PASS
        raise SourceError(f"{path}: cannot open ({e.strerror or e}); {fix}") from None
    with blob:
        try:
            return _samples(blob, name, path, limit, kept)
        except OSError as e:  # a store that lists the tar but refuses its bytes, a disk's EIO
            raise cannot_read(path, e) from None


def _samples(blob: Blob, name: str, path: str, limit: int, kept: list[int]) -> list[_Sample]:
    """_read_tar's samples of the open tar."""
    samples = list(_group(_members(blob, path), name, name or os.path.basename(path)))
    for sample in samples:
        if sample.why is None:
            kept[0] += _read_small(blob, sample, limit)
        if kept[0] > MAX_KEPT_BYTES:
            raise SourceError(f"{path}: the tars' members but the images (captions, json, "
                              f"...) come to over {MAX_KEPT_BYTES:,} bytes, which the scan "
                              "holds in memory; pack fewer tars at once")  # fmt: skip
    return samples


class _End(NamedTuple):
    """Where a tar ends early (before its end-of-archive blocks or its last byte), and why."""

    offset: int
    why: str
    lost: str  # how many samples' headers lie past it ("at least 3" where the count stopped)


def _members(blob: Blob, path: str) -> Iterator[tarfile.TarInfo | _End]:
    """The tar's members, headers only (tarfile seeks over each member's data), then an _End
    where the tar ends early. The walk must move forward: a member of negative size would send
    tarfile back to its own header for ever, so each header must lie past the last one."""
    import tarfile  # ~2 ms at start: only a tar's scan reads one

    tar, at, why = None, 0, None  # at: where the next header lies
    try:
        tar = tarfile.open(fileobj=_Headers(blob), mode="r:")  # noqa: SIM115
        while (info := tar.next()) is not None:
            tar.members.clear()  # tarfile keeps every header it read
            if info.size < 0 or tar.offset <= info.offset:
                why = f"member {info.name!r} has a size of {info.size:,} bytes"
            elif not info.issparse() and info.offset_data + info.size > blob.size:
                why = f"member {info.name!r} runs past the end of the file (cut)"
            if why is not None:
                break
            at = tar.offset
            yield info
        else:
            why = _stopped(blob, at)
    except (tarfile.TarError, UnicodeError, ValueError, OverflowError, IndexError) as e:
        if tar is None:
            raise SourceError(f"{path}: is not a tar file ({e}); {_PASS}") from None
        # a last member whose padding is missing is whole: tarfile finds no byte before `at`
        why = f"an unreadable header ({e})" if at < blob.size else None
    if why is not None:
        yield _End(at, why, _lost(blob, at + _BLOCK))


def _stopped(blob: Blob, at: int) -> str | None:
    """Why tarfile found no header at `at`: None at the file's end or an end-of-archive block,
    else what is there instead (a cut or damaged header: tarfile stops without a word)."""
    import tarfile  # _members imported it

    block = blob.pread(_BLOCK, at)
    if not block or block == bytes(_BLOCK):
        return None
    if len(block) < _BLOCK:
        return "cut inside a header"
    try:
        tarfile.TarInfo.frombuf(block, tarfile.ENCODING, "surrogateescape")
    except (tarfile.HeaderError, UnicodeError, ValueError, OverflowError) as e:
        return f"a damaged header ({e})"
    return "a header tarfile stops at"


def _lost(blob: Blob, at: int) -> str:
    """How many samples' headers lie from `at` on (each block tried as a header, the data of
    each found jumped over): what an early end loses. Every step moves on at least a block;
    past _MAX_LOST_TRIES blocks that are no header, the count is a lower bound."""
    import tarfile  # _members imported it

    samples, last, tries = 0, None, 0
    key_ext = re.compile(_KEY_EXT)  # once a call, not a block (re keeps it compiled)
    while at + _BLOCK <= blob.size:
        if tries == _MAX_LOST_TRIES:
            return f"at least {samples:,}"
        try:
            info = tarfile.TarInfo.frombuf(blob.pread(_BLOCK, at), tarfile.ENCODING,
                                           "surrogateescape")  # fmt: skip
        except (tarfile.HeaderError, UnicodeError, ValueError, OverflowError):
            at, tries = at + _BLOCK, tries + 1
            continue
        at += _BLOCK + max(0, info.size + _BLOCK - 1) // _BLOCK * _BLOCK
        key = key_ext.match(info.name) if info.isreg() else None
        if key is not None and key[1] != last:
            samples, last = samples + 1, key[1]
    return f"{samples:,}"


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


@functools.cache
def _hostile() -> dict[bytes, str]:
    """The tar member types refused, by what they are."""
    import tarfile  # _members imported it

    return {
        tarfile.SYMTYPE: "a symbolic link",
        tarfile.LNKTYPE: "a hard link",
        tarfile.CHRTYPE: "a device",
        tarfile.BLKTYPE: "a device",
        tarfile.FIFOTYPE: "a FIFO",
    }


def _group(members: Iterator[tarfile.TarInfo | _End], path: str, tar: str) -> Iterator[_Sample]:
    """Members grouped into samples as webdataset's group_by_keys does; an early end as a
    sample that says so."""
    hostile = _hostile()
    meta, key_ext = re.compile(_META), re.compile(_KEY_EXT)  # once a tar, not a member
    sample = None
    for info in members:
        if isinstance(info, _End):
            if sample is not None:
                yield sample
            sample = _Sample(path, tar, f"@{info.offset}")
            sample.why = (f"the tar ends early at byte {info.offset:,}: {info.why}; what "
                          f"follows is lost (samples found past it: {info.lost}; WebDataset's "
                          "reader stops there too); rewrite the tar")  # fmt: skip
            break
        if info.isdir() or meta.match(info.name):  # `__key__`, `__x__/...`: not `__0001.jpg`
            continue
        match = key_ext.match(info.name)
        if match is None:
            continue
        key, ext = match[1], match[2].lower()
        if sample is None or sample.key != key:
            if sample is not None:
                yield sample
            sample = _Sample(path, tar, key)
        if info.type in hostile or not info.isreg():
            what = hostile.get(info.type, f"of tar type {info.type!r}")
            sample.why = sample.why or f"tar member {info.name!r} is {what}: refused, not read"
        elif info.issparse():  # its stated size is not what the tar stores after its header
            sample.why = sample.why or f"tar member {info.name!r} is sparse: refused, not read"
        elif ext in sample.members:
            sample.why = sample.why or f"tar member {info.name!r}: a second .{ext} of the sample"
        if sample.dotted is None and _dotted_image(ext):
            sample.dotted = info.name
        sample.members[ext] = (info.offset_data, info.size)
    if sample is not None:
        yield sample


def _read_small(blob: Blob, sample: _Sample, limit: int) -> int:
    """Read every member but the image; set `why` where the sample cannot be packed. Returns
    the bytes kept."""
    image = next((ext for ext in IMAGE_EXTENSIONS if ext in sample.members), None)
    if image is None:
        sample.why = _no_image(sample)
        return 0
    for ext, (offset, size) in sample.members.items():
        most = limit if ext == image else MAX_MEMBER_BYTES
        if size > most:
            sample.why = f"tar member .{ext} of {size:,} bytes is over-long (over {most:,})"
            sample.data.clear()
            return 0
        if ext != image:
            sample.data[ext] = blob.pread(size, offset)
    sample.members = {image: sample.members[image]}
    return sum(map(len, sample.data.values()))


def _dotted_image(ext: str) -> bool:
    """Whether a member's extension as webdataset takes it is an image's behind a dot of the
    name's (s.0001.jpg: key s, extension 0001.jpg)."""
    return "." in ext and ext.rpartition(".")[2] in IMAGE_EXTENSIONS


def _no_image(sample: _Sample) -> str:
    """The skip reason of a sample without an image member; where its images' names hold a
    dot before their extension, how webdataset took them, and how to name them."""
    if sample.dotted is None:
        return f"no image member (.{', .'.join(IMAGE_EXTENSIONS[:4])}, ...)"
    name = sample.dotted
    ext = name[len(sample.key) + 1 :].lower()  # as webdataset's group_by_keys takes it
    folder, base = posixpath.split(name)
    stem, _, last = base.rpartition(".")
    renamed = posixpath.join(folder, f"{stem.replace('.', '_')}.{last}")
    more = sum(map(_dotted_image, sample.members)) - 1
    also = f", as are {more:,} more of its images" if more else ""
    return (f"no image member as WebDataset reads it: member {name!r} is key {sample.key!r} "
            f"with extension {ext!r} (WebDataset ends a key at the first dot of the member's "
            f"name){also}; rename the members <key>.<extension> with no dot in the key, such "
            f"as {renamed!r}")  # fmt: skip


# ---- samples -> items --------------------------------------------------------------------------


def _dataset(root: Storage, samples: list[_Sample], options: PackOptions) -> Dataset:
    good = [s for s in samples if s.why is None]
    present = {ext for s in good for ext in s.data}
    label = next((ext for ext in LABEL_EXTENSIONS if ext in present), None)
    if label is None and options.classes is not None:
        raise SourceError(f"{root.path()}: no sample has a .cls member for ", Option("classes"),
                          " to name")  # fmt: skip
    taken = {*BUILTIN_NAMES, LABEL}
    members = {ext: _free(ext, taken, "member/") for ext in sorted(present - {label, JSON})}
    parsed = [_json(s) if JSON in present else {} for s in good]
    columns, warnings = _json_features(parsed, taken)
    features = {members[ext]: Feature("bytes", text=ext == TEXT) for ext in members}
    features.update({name: feature for _, (name, feature) in sorted(columns.items())})
    keys, repeated = _keys(samples)
    items, skipped, top = [], [(keys[id(s)], s.why) for s in samples if s.why], -1
    for sample, value in zip(good, parsed, strict=True):
        key = keys[id(sample)]
        try:
            number = _label(sample.data.get(label), options.classes, label) if label else None
            fields = {members[ext]: _member(ext, sample.data.get(ext, b"")) for ext in members}
            fields.update(_json_values(value, columns))
        except _Bad as e:
            skipped.append((key, str(e)))
            continue
        top = max(top, -1 if number is None else number)
        ((offset, size),) = sample.members.values()
        items.append(Item(key, number, sample.path, size, offset, fields))
    classes = options.classes or tuple(str(i) for i in range(top + 1)) if label else None
    if not present:  # images alone: maybe a tar of a folder tree, not WebDataset shards
        warnings += _folders_not_classes(good)
    return Dataset(TarSource.name, root, Schema.build(classes, features), {"train": tuple(items)},
                   skipped=tuple(skipped), warnings=(*repeated, *warnings))  # fmt: skip


def _folders_not_classes(samples: list[_Sample]) -> list[str]:
    """A warning where samples of images alone (no label, no other member) lie in two or more
    folders: a tar of class folders packs unlabeled, its folders taken for no class."""
    folders = sorted({posixpath.dirname(s.key) for s in samples} - {""})
    if len(folders) < 2:
        return []
    shown = ", ".join(f"{f}/" for f in folders[:3]) + (", ..." if len(folders) > 3 else "")
    return [f"no sample has a label (.cls); its images lie in {len(folders):,} folders ({shown}): "
            "if the folders are classes, extract the tar (tar xf) and pack the folder they are "
            "in, whose class folders give the labels"]  # fmt: skip


def _keys(samples: list[_Sample]) -> tuple[dict[int, str], list[str]]:
    """id(sample) -> its item key, `<tar>:<key>`; a key met again later in its tar (webdataset
    reads each such run of members as a sample of its own) gets `#2`, `#3`, ... so that no two
    items share a key (a dedup would take them for one), and a warning names them."""
    keys: dict[int, str] = {}
    taken: set[str] = set()
    counts: Counter[str] = Counter()
    again = []
    for sample in samples:
        base = f"{sample.tar}:{sample.key}"
        n = counts[base] = counts[base] + 1  # per key: one key repeated costs no search
        key = base if n == 1 else f"{base}#{n}"
        while key in taken:  # a key of the tar's own spelled like that
            n = counts[base] = n + 1
            key = f"{base}#{n}"
        if key != base:
            again.append(key)
        taken.add(key)
        keys[id(sample)] = key
    if not again:
        return keys, []
    return keys, [f"{len(again):,} samples repeat a key met before in their tar (WebDataset's "
                  f"reader reads them apart): kept apart as {', '.join(again[:3])}"
                  f"{', ...' if len(again) > 3 else ''}"]  # fmt: skip


class _Bad(Exception):
    """A sample that cannot be packed (why)."""


def _free(name: str, taken: set[str], prefix: str) -> str:
    """`name`, or prefix + name where a feature has it; taken from then on."""
    name = prefix + name if name in taken else name
    taken.add(name)
    return name


def _label(data: bytes | None, classes: tuple[str, ...] | None, ext: str) -> int:
    if data is None:  # (it said: label b'' is not a class number)
        raise _Bad(f"no .{ext} member, which other samples hold: give each sample its label")
    text = data.strip()
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


def _json(sample: _Sample) -> dict | str:
    """A sample's .json as an object; else why it is none (_json_values skips it so)."""
    try:
        value = json.loads(sample.data.get(JSON, b"{}"))
    except RecursionError:
        return ".json is nested too deeply to read"
    except ValueError:  # UnicodeDecodeError included
        return ".json is not JSON text"
    return value if isinstance(value, dict) else ".json is not a JSON object"


def _json_features(
    parsed: list[dict | str], taken: set[str]
) -> tuple[dict[str, tuple[str, Feature]], list[str]]:
    """field -> (feature name, type) of each json field the schema can carry, and warnings
    for the ones it cannot (nested objects, numbers some samples lack)."""
    from shardpack.sources.tables.kinds import infer, kind_of  # numpy: not for --help

    objects = [value for value in parsed if isinstance(value, dict)]
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


def _json_values(value: dict | str, columns: dict[str, tuple[str, Feature]]) -> dict:
    """One sample's json fields as the schema types them (`value`: _json's)."""
    from shardpack.sources.tables.kinds import fits, kind_of  # numpy: not for pack --help

    if isinstance(value, str):
        raise _Bad(value)
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
