"""The manifest source: a table of images (shardpack.sources.tables reads it) as items with fields.

Labels become class indices: class names sorted (or in --classes order), integers as they are
(indexing --classes when given, else classes named "0", "1", ...); a list of labels makes a
multi-label dataset. The `split` column assigns splits; else, as Hugging Face's ImageFolder, split
folders do (SRC/<split>/metadata.*, or a metadata file's paths under SRC/<split>/); else one split,
"train". Each image
file is stat'ed at scan, following links like a folder scan but only to a regular file; a row
whose file is missing or not a regular file, or whose class is not in --classes, is skipped
with its manifest line, like every other bad row.

Image paths may also be URLs (s3://bucket/key), and the manifest and its root may be URLs too:
ImageRoot reads each image from where its path says, through storages made with the same
options; an object's size comes from a listing of its folder. An http(s) URL takes no request
at scan (its size is URL_BYTES, a guess for the planner): the workers fetch each shard's URLs
many at a time (storage.fetch), in the plan's order. A URL of a scheme but http(s), file://,
local:// and object stores' (ftp://, sftp://, ...) is refused by name.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import os
import posixpath
import stat
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, NamedTuple

from shardpack.errors import Option, SourceError
from shardpack.options import SPLIT_NAMES, PackOptions, box_column
from shardpack.schema import Feature, Schema
from shardpack.sources.classlist import check_class_count, check_class_name
from shardpack.sources.folder import few, folder_entries
from shardpack.sources.source import NO_FIELDS, Dataset, Item, Source
from shardpack.sources.tables.files import (
    METADATA_FILES,
    SUFFIXES,
    line_name,
    manifest_file,
)
from shardpack.storage import Blob, Entry, Storage, is_url, storage_at
from shardpack.storage.locations import joined, normal
from shardpack.storage.srcfiles import not_regular
from shardpack.storage.urlpolicy import FetchPolicy, is_web_url, refused_scheme

if TYPE_CHECKING:
    import numpy as np

    from shardpack.sources.tables.kinds import LabelInfo
    from shardpack.sources.tables.reader import Manifest
    from shardpack.storage.fetch import Fetcher, Prefetch

KIND = "manifest"
DEFAULT_SPLIT = "train"
# What the planner takes an http(s) URL's image to weigh, unfetched: a guess at a web photo's
# size (img2dataset's 10,000 a shard would be ~1 GB of originals); 1,024 make a 128MiB shard.
URL_BYTES = 128 << 10


def is_manifest_name(path: str) -> bool:
    """Whether a file's name says it is a manifest (.csv, .tsv, .jsonl, .parquet)."""
    return path.lower().endswith(SUFFIXES)


class ManifestSource(Source):
    """A table of image paths with labels and typed columns; found by --source auto only."""

    name = "manifest"
    kinds = (KIND,)
    described = "a manifest table"
    choosable = False
    own_options = (
        "path_column", "root", "retries", "allow_private_urls", "ignore_opt_out", "user_agent",
        "url_threads", "per_host", "box_columns",
    )  # fmt: skip

    def recognise(
        self, root: Storage, options: PackOptions
    ) -> list[tuple[str | None, Storage]] | None:
        """The manifest file SRC is or holds (metadata.csv/.jsonl/.parquet), as (None, a
        Storage rooted at the file: see manifest_file); else the metadata file of each split
        folder (Hugging Face ImageFolder's SRC/<split>/metadata.*) as (split, its Storage)."""
        found = manifest_file(root)
        if found is not None:
            return [(None, found)]
        if root.kind() == "dir":
            return split_manifests(root) or manifest_folder(root)
        if _is_glob(root.path()):
            return _Glob(root.path())
        return None

    def takes_path(self, where: str) -> bool:
        return _is_glob(where)

    def scan(
        self,
        found: list[tuple[str | None, Storage]] | _Glob,
        options: PackOptions,
        storage_options: Mapping[str, object] | None,
    ) -> Dataset:
        if isinstance(found, _Glob):
            found = found.manifests(storage_options)
        return scan_manifest(found, options, storage_options)


class _Glob(NamedTuple):
    """SRC as a pattern of manifest files in one folder (`lists/part-*.parquet`)."""

    where: str

    def manifests(self, storage_options: Mapping[str, object] | None) -> list[tuple[None, Storage]]:
        """(None, each manifest file the pattern names), in name order.

        Raises:
            SourceError: the folder cannot be listed, or the pattern names no file.
        """
        folder, _, pattern = self.where.rpartition("/")
        parent = storage_at(folder or ".", storage_options)
        files = [name for name, is_dir in folder_entries(parent) if not is_dir]
        names = [name for name in files if name[:1] != "." and fnmatch.fnmatchcase(name, pattern)]
        if not names:
            raise SourceError(f"{self.where}: names no file; check the pattern")
        return [(None, parent.child(name)) for name in sorted(names)]


def _is_glob(where: str) -> bool:
    """Whether SRC is a pattern of manifest files: `*`, `?` or `[` in its last part, which ends
    in a manifest's extension (a URL's `?` is its query: not a pattern)."""
    base = where.rsplit("/", 1)[-1]
    return is_manifest_name(base) and any(c in base for c in "*?[") and "://" not in base


def manifest_folder(root: Storage) -> list[tuple[None, Storage]] | None:
    """(None, each manifest file) of a folder holding nothing else (no subfolder; names starting
    with '.' or '_', as Spark's _SUCCESS, aside), in name order: the files are one manifest, as
    img2dataset takes a folder of URL lists; None for any other folder."""
    visible = [(n, is_dir) for n, is_dir in folder_entries(root) if n[:1] not in "._"]
    if not visible or any(is_dir or not is_manifest_name(n) for n, is_dir in visible):
        return None
    return [(None, root.child(name)) for name, _ in visible]


def scan_manifest(
    manifests: Sequence[tuple[str | None, Storage]],
    options: PackOptions,
    storage_options: Mapping[str, object] | None = None,
) -> Dataset:
    """List manifests' rows as items: paths, labels by one class list, splits and fields.

    Args:
        manifests: (split, the Storage rooted at a manifest file): one with split None (a
            manifest file, or a folder's metadata file), or one per split folder (Hugging Face
            ImageFolder's SRC/<split>/metadata.*), as ManifestSource.recognise finds them.
        options: the class list, path column, --root and on-error policy.
        storage_options: options for the filesystem of --root or of image URLs.

    Raises:
        SourceError: --root is not a folder, a manifest cannot be read (see read_manifest),
            split folders' manifests disagree on their columns, or no row is usable.
    """
    from shardpack.sources.tables.reader import read_manifest  # numpy: not for pack --help

    _check_root(options.root)
    tables = [(split, read_manifest(manifest, path_column=options.path_column, root=options.root,
                                    storage_options=storage_options,
                                    classes_pinned=options.classes is not None))
              for split, manifest in manifests]  # fmt: skip
    first = tables[0][1]
    boxes = _box_columns(first, options.box_columns)
    label = _one_label(tables)
    classes = _classes(first.path, label, options.classes)
    position = None if classes is None else {name: i for i, name in enumerate(classes)}
    # relative paths under the folder above the split folders: keys stay unique across splits
    per_split = tables[0][0] is not None and options.root is None
    base = posixpath.dirname(first.root) if per_split else first.root  # a URL's too
    images = ImageRoot(storage_at(base, storage_options), storage_options,
                       FetchPolicy.of(options, storage_options))  # fmt: skip
    splits: dict[str, list[Item]] = {}
    skipped: list[tuple[str, str]] = []
    # several files of one manifest (a folder of them): an image listed in two is refused in
    # the second, as one listed twice in a file is
    seen: set[str] | None = set() if len(tables) > 1 and not per_split else None
    rows = UrlRows()
    for number, (split, table) in enumerate(tables):
        prefix = f"{split}/" if per_split else ""
        by_folder = split is None and _split_by_folder(table)
        # a row without a usable path is known by its line, which its reason need not repeat
        bad = [(b.line, _under(prefix, b.path), b.reason) if b.path else (b.line, b.where, b.why)
               for b in table.bad]  # fmt: skip
        rows.file(table.path)
        for item, row_split, line in _items(table, images, prefix, label, position, bad, seen,
                                            boxes):  # fmt: skip
            default = _folder_split(item.path) if by_folder else DEFAULT_SPLIT
            splits.setdefault(split or row_split or default, []).append(item)
            if is_web_url(item.key):
                rows.add(number, item.key, line)
        skipped += [(key, reason) for _, key, reason in sorted(bad)]  # in manifest order
    if not splits:
        first_bad = f"; the first: {skipped[0][0]}: {skipped[0][1]}" if skipped else ""
        raise SourceError(f"{first.path}: no row names a usable image{first_bad}")
    columns = {name: BOXES if name in boxes else f for name, f in first.columns.items()}
    schema = Schema.build(classes, columns, multi_label=bool(label and label.multi))
    images.rows = rows.done()
    return Dataset(
        KIND,
        images,
        schema,
        {split: tuple(items) for split, items in splits.items()},
        skipped=tuple(skipped),  # the first is what --on-error fail names
        warnings=tuple(w for _, table in tables for w in table.warnings),
    )


def _items(
    table: Manifest,
    images: ImageRoot,
    prefix: str,
    label: LabelInfo | None,
    position: dict[str, int] | None,
    bad: list[tuple[int, str, str]],
    seen: set[str] | None = None,
    boxes: Mapping[str, str] | None = None,
) -> Iterator[tuple[Item, str | None, int]]:
    """(item, the row's split, its line) of each usable row; a row that is not goes to `bad`;
    `seen`: the paths of the manifest's files read before, to refuse one listed in two; `boxes`:
    the box columns' formats (_box_columns), their values taken to yxyx rows."""
    labels: dict = {}  # a row's label -> its class indices, once per distinct label
    names = tuple(table.columns)
    sizes = _Sizes(images)
    try:
        for row in table.rows:
            path = _under(prefix, row.path)
            try:
                value = None
                if position is not None:
                    value = labels.get(row.label)
                    if value is None:
                        value = labels[row.label] = _label(row.label, label, position)
                if seen is not None:
                    if path in seen:
                        raise _Bad(f"image {path} is listed in an earlier file too")
                    seen.add(path)
                size = sizes.of(path)
                fields = dict(zip(names, row.values, strict=True)) if names else NO_FIELDS
                for name, fmt in (boxes or {}).items():
                    fields[name] = yxyx(name, fields[name], fmt)
            except _Bad as e:
                bad.append((row.line, path, f"{line_name(table.path, row.line)}: {e}"))
                continue
            yield Item(path, value, path, size, fields=fields), row.split, row.line
    finally:
        sizes.close()


def _under(prefix: str, path: str) -> str:
    """A row's relative image path as under the folder above its split folder."""
    if not prefix or is_url(path) or os.path.isabs(path):
        return path
    return normal(prefix + path)


def _folder_split(path: str) -> str | None:
    """The split folder a relative image path starts with (`test/cat/1.png`: test), else None."""
    first, slash, _ = path.partition("/")
    return first if slash and first in SPLIT_NAMES and not is_url(path) else None


def _split_by_folder(table: Manifest) -> bool:
    """Whether a Hugging Face metadata file with no split column names its images in split
    folders (`train/...`, `test/...`): as `datasets` does, those folders are the splits.

    Raises:
        SourceError: some rows name images in split folders and others outside them.
    """
    if table.has_split or os.path.basename(table.path) not in METADATA_FILES:
        return False
    inside = next((row for row in table.rows if _folder_split(row.path)), None)
    if inside is None:
        return False
    outside = next((row for row in table.rows if not _folder_split(row.path)), None)
    if outside is not None:
        raise SourceError(
            f"{table.path}: names images in split folders ({line_name(table.path, inside.line)}:"
            f" {inside.path}) and outside them ({line_name(table.path, outside.line)}: "
            f"{outside.path}); move every image into a split folder, or add a split column"
        )
    return True


def _one_label(tables: list[tuple[str | None, Manifest]]) -> LabelInfo | None:
    """The label column of all the manifests (one per split folder): the same kind in each, the
    labels of all; the same extra columns in each.

    Raises:
        SourceError: two split folders' manifests differ in their columns or kind of label.
    """
    first = tables[0][1]
    for split, table in tables:
        if split is not None and table.has_split:
            raise SourceError(f"{table.path}: has a split column, but its folder is split "
                              f"{split}; drop the column")  # fmt: skip
        if table.columns != first.columns or _label_kind(table) != _label_kind(first):
            each = "split folder's metadata file" if split is not None else "file of the list"
            raise SourceError(
                f"{table.path}: its columns or labels differ from {first.path}'s "
                f"({_differences(first, table)}); give every {each} the same columns"
            )
    if first.label is None:
        return None
    values = sorted(set().union(*(table.label.values for _, table in tables)))
    return dataclasses.replace(first.label, values=tuple(values))


def _differences(first: Manifest, table: Manifest) -> str:
    """How a manifest's columns and labels differ from the first's, in a few words."""
    ours, theirs = first.columns, table.columns
    said = [f"no {name!r} column" for name in sorted(set(ours) - set(theirs))]
    said += [f"a {name!r} column the first lacks" for name in sorted(set(theirs) - set(ours))]
    said += [f"its {name!r} column holds another type" for name in sorted(set(ours) & set(theirs))
             if ours[name] != theirs[name]]  # fmt: skip
    if _label_kind(table) != _label_kind(first):
        said.append("its labels are of another kind")
    return "; ".join(said[:3]) or "the columns' order"


def _label_kind(table: Manifest) -> tuple[str, bool] | None:
    """What a manifest's labels are: names or integers, one or a list a row; None: no label."""
    return None if table.label is None else (table.label.kind, table.label.multi)


def split_manifests(root: Storage) -> list[tuple[str, Storage]] | None:
    """(split, its metadata file) of each split folder of SRC, as `datasets`' ImageFolder takes
    SRC/train/metadata.jsonl and SRC/test/metadata.jsonl; None when no split folder holds one.

    Raises:
        SourceError: a split folder holds one and another folder of SRC does not.
    """
    folders = [name for name, is_dir in folder_entries(root) if is_dir and name[:1] != "."]
    found = {n: manifest_file(root.child(n)) for n in folders if n in SPLIT_NAMES}
    found = {split: manifest for split, manifest in found.items() if manifest is not None}
    if not found:
        return None
    others = [name for name in folders if name not in found]
    if others:
        raise SourceError(
            f"{root.path()}: its split folders {few(found)} hold a metadata file each and "
            f"{few(others)} none; give each split folder its own metadata file (Hugging Face "
            "ImageFolder), or move the others out of SRC"
        )
    return sorted(found.items())


class _Bad(Exception):
    """Why one row's item cannot be packed (caught per row)."""


# A declared box column's type in the schema: TFDS's boxes, float32 rows of 4.
BOXES = Feature("float32", (-1, 4))


def _box_columns(table: Manifest, declared: tuple[str, ...] | None) -> dict[str, str]:
    """Column -> format of each --box-columns entry, each a list of floats in the manifest.

    Raises:
        SourceError: the manifest has no such column, or one of other values than floats.
    """
    boxes = dict(box_column(entry) for entry in declared or ())
    for name in boxes:
        feature = table.columns.get(name)
        if feature is None:
            raise SourceError(f"{table.path}: ", Option("box_columns"), f" names {name!r}, which "
                              f"is none of its columns ({few(table.columns)}); name one of "
                              "those")  # fmt: skip
        if feature.dtype != "float32" or not feature.is_list or feature.row not in (None, 4):
            why = " (pixels? normalise them by the image size)" if feature.dtype == "int64" else ""
            raise SourceError(f"{table.path}: ", Option("box_columns"), f" column {name!r} holds "
                              f"{feature.dtype} {list(feature.shape)}{why}, not normalised "
                              "boxes (numbers, 4 a box); drop it from ",
                              Option("box_columns"))  # fmt: skip
    return boxes


def yxyx(name: str, value: object, fmt: str) -> np.ndarray:
    """A box column's value (rows of 4 in `fmt`, options.BOX_FORMATS) as [ymin, xmin, ymax,
    xmax] rows, float32.

    Raises:
        _Bad: its numbers are not rows of 4.
    """
    import numpy as np  # numpy: not for pack --help

    rows = np.asarray(value, np.float32).reshape(-1)
    if rows.size % 4:
        raise _Bad(f"column {name!r} holds {rows.size} numbers, not boxes of 4")
    a, b, c, d = rows.reshape(-1, 4).T
    corners = {"yxyx": (a, b, c, d), "xyxy": (b, a, d, c), "xywh": (b, a, b + d, a + c),
               "cxcywh": (b - d / 2, a - c / 2, b + d / 2, a + c / 2)}[fmt]  # fmt: skip
    return np.stack(corners, axis=1).astype(np.float32)


def _check_root(root: str | None) -> None:
    """Refuse a --root on this disk that is not a folder, before the manifest is read: else
    every relative row is a missing file and the run ends in "no row names a usable image"."""
    if root is None or is_url(root) or os.path.isdir(root):
        return  # an object store's folder is a prefix: it need not exist as such
    what = "is not a folder" if os.path.exists(root) else "no such folder"
    raise SourceError(
        Option("root", root),
        f": {what}; pass the folder the manifest's image paths are relative to",
    )


def _classes(
    path: str, info: LabelInfo | None, pinned: tuple[str, ...] | None
) -> tuple[str, ...] | None:
    """The class list: None unlabeled; --classes as given; else names sorted, or "0".."max"."""
    if info is None:
        if pinned is not None:
            raise SourceError(f"{path}: has no label column for ", Option("classes"), " to name")
        return None
    if pinned is not None:
        return pinned
    if info.kind == "names":
        check_class_count(len(info.values), f"{path}, column 'label'", "its names")
        for name in info.values:  # as a folder's: one line each in TFDS's label.labels.txt
            check_class_name(name, f"{path}, column 'label'")
        return tuple(info.values)
    top = max(info.values, default=-1)
    check_class_count(top + 1, f"{path}, column 'label'", f"integer labels up to {top:,}")
    return tuple(str(i) for i in range(top + 1))


def _label(value, info: LabelInfo, position: dict[str, int]) -> int | tuple[int, ...]:
    """A row's label (a name, an integer, or a tuple of them) as class indices."""
    if info.multi:
        return tuple(_index(v, info, position) for v in value)
    return _index(value, info, position)


def _index(value, info: LabelInfo, position: dict[str, int]) -> int:
    if info.kind == "integers":
        if value >= len(position):
            raise _Bad(f"label {value} is not one of the {len(position)} classes of --classes")
        return value
    if value not in position:
        raise _Bad(f"class {value!r} is not in --classes")
    return position[value]


def _open_root(root: str) -> int | None:
    """The folder of relative image paths, open to stat them from (no path walk per image); None
    when it cannot be opened (each stat then reports why)."""
    try:
        return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None


def _image_size(root: str, path: str, root_fd: int | None) -> int:
    """The size of the image file at path (under root unless absolute); links are followed, but
    only to a regular file."""
    try:
        st = (
            os.stat(path, dir_fd=root_fd)
            if root_fd is not None
            else os.stat(os.path.join(root, path))
        )
    except OSError as e:
        raise _Bad(f"image {os.path.join(root, path)}: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise _Bad(f"image {os.path.join(root, path)}: {not_regular(st.st_mode)}")
    return st.st_size


class ImageRoot(Storage):
    """Where a manifest's images are read from (the reading half of a Storage): a relative
    path under the manifest's root folder (or --root), or an absolute path or URL through a
    storage made for its folder with the same options; an http(s) URL is fetched under the
    FetchPolicy given (storage.fetch). Pickles for the workers."""

    def __init__(
        self,
        base: Storage,
        options: Mapping[str, object] | None = None,
        policy: FetchPolicy | None = None,
    ) -> None:
        self.base = base
        self.options = dict(options or {})
        self.policy = policy or FetchPolicy()
        self.root = base.root
        self._climbs = is_url(base.root)  # "../x" under a URL: resolved in the URL
        self._web = is_web_url(base.root)  # relative paths are URLs too
        self._elsewhere: dict[str, Storage] = {}  # folder -> its storage
        self._fetcher: Fetcher | None = None  # made where first needed: threads, locks
        self.rows: UrlRows | None = None  # the scan's: where each URL was listed

    def __getstate__(self) -> dict:  # (the rows are the packing process's: no worker's)
        return {**self.__dict__, "_fetcher": None, "_elsewhere": {}, "rows": None}

    def rows_of(self, urls: Iterable[str]) -> dict[str, tuple[str, int]]:
        """(manifest file name, line or row) of each of these http(s) URL items the scan
        listed ({} in a process the root was pickled to)."""
        return {} if self.rows is None else self.rows.of(urls)

    def __repr__(self) -> str:
        return f"ImageRoot({self.base!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ImageRoot) and (other.base, other.options) == (
            self.base,
            self.options,
        )

    def __hash__(self) -> int:
        return hash(self.base)

    def web_url(self, name: str) -> str | None:
        """The http(s) URL an image path names (itself, or under an http(s) root), else None."""
        if is_web_url(name):
            return name
        if not self._web:
            return None
        url = joined(self.root, name)
        return url if is_web_url(url) else None

    def fetcher(self) -> Fetcher:
        """This process's Fetcher of image URLs."""
        if self._fetcher is None:
            from shardpack.storage.fetch import Fetcher  # the network stack: workers only

            self._fetcher = Fetcher(self.policy)
        return self._fetcher

    def where(self, name: str) -> tuple[Storage, str]:
        """The storage an image path is read from, and its name there."""
        if self._climbs and (name == ".." or name.startswith("../")):
            name = normal(f"{self.root}/{name}")  # an object store has no "..": climb here
        if is_url(name):
            folder, _, file = name.rpartition("/")
        elif os.path.isabs(name):
            folder, file = os.path.split(name)
        else:
            return self.base, name
        storage = self._elsewhere.get(folder)
        if storage is None:
            storage = self._elsewhere[folder] = storage_at(folder, self.options)
        return storage, file

    def path(self, name: str = "") -> str:
        if name and (url := self.web_url(name)) is not None:
            return url
        storage, name = self.where(name)
        return storage.path(name)

    def local_path(self, name: str = "") -> str | None:
        if name and self.web_url(name) is not None:
            return None
        storage, name = self.where(name)
        return storage.local_path(name)

    def kind(self, name: str = "") -> str | None:
        storage, name = self.where(name)
        return storage.kind(name)

    def read(self, name: str, limit: int) -> bytes:
        if (url := self.web_url(name)) is not None:
            return self.fetcher().get(url, limit)
        storage, name = self.where(name)
        return storage.read(name, limit)

    @contextmanager
    def reading(self, files: Iterable[tuple[str, int]], limit: int) -> Iterator[Storage]:
        """Itself, reading the http(s) URLs among `files` ahead, many at a time (Prefetch)."""
        urls = (url for name, _ in files if (url := self.web_url(name)) is not None)
        first = next(urls, None)
        if first is None:
            yield self
            return
        from shardpack.storage.fetch import Prefetch  # the network stack: workers only

        ahead = Prefetch(self.fetcher(), itertools.chain((first,), urls), limit)
        try:
            yield _Ahead(self, ahead)
        finally:
            ahead.close()
            self._fetcher = None  # its connections are closed

    def open(self, name: str) -> Blob:
        storage, name = self.where(name)
        return storage.open(name)


class UrlRows:
    """Where a manifest listed each http(s) URL item: its file and line (or Parquet row), for
    failures.jsonl. Kept as sorted 64-bit hashes of the URLs beside their lines, 20 bytes a
    URL where a dict takes ~100; two URLs of one hash name no row."""

    def __init__(self) -> None:
        self.names: list[str] = []  # each manifest file's name
        self._hashes, self._lines, self._files = array("q"), array("q"), array("i")
        self._sorted: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def file(self, path: str) -> None:
        """The next manifest file's rows follow."""
        self.names.append(posixpath.basename(path))

    def add(self, file: int, url: str, line: int) -> None:
        self._hashes.append(hash(url))
        self._lines.append(line)
        self._files.append(file)

    def done(self) -> UrlRows | None:
        """Sorted for look-ups (None: no URL was listed)."""
        import numpy as np  # here: not for pack --help

        if not self._hashes:
            return None
        hashes = np.frombuffer(self._hashes, dtype=np.int64)
        order = np.argsort(hashes, kind="stable")
        self._sorted = (hashes[order], np.frombuffer(self._lines, dtype=np.int64)[order],
                        np.frombuffer(self._files, dtype=np.int32)[order])  # fmt: skip
        self._hashes, self._lines, self._files = array("q"), array("q"), array("i")
        return self

    def of(self, urls: Iterable[str]) -> dict[str, tuple[str, int]]:
        """(file name, line) of each URL listed once under its hash."""
        import numpy as np  # here: not for pack --help

        if self._sorted is None:
            return {}
        hashes, lines, files = self._sorted
        urls = list(urls)
        wanted = np.array([hash(url) for url in urls], dtype=np.int64)
        first = np.searchsorted(hashes, wanted, "left")
        last = np.searchsorted(hashes, wanted, "right")
        return {url: (self.names[files[i]], int(lines[i]))
                for url, i, j in zip(urls, first.tolist(), last.tolist(), strict=True)
                if j - i == 1}  # fmt: skip


class _Ahead:
    """An ImageRoot whose http(s) URLs are read from its Prefetch."""

    def __init__(self, images: ImageRoot, ahead: Prefetch) -> None:
        self.images, self.ahead = images, ahead

    def read(self, name: str, limit: int) -> bytes:
        if (url := self.images.web_url(name)) is not None:
            return self.ahead.read(url, limit)
        return self.images.read(name, limit)

    def __getattr__(self, attribute: str):
        return getattr(self.images, attribute)


class _Sizes:
    """Each image's size at scan: a file on a disk stat'ed (links followed, but only to a
    regular file); an object's from the listing of its folder (a request a folder, not one an
    image)."""

    def __init__(self, images: ImageRoot) -> None:
        self.images = images
        root = images.base.local_path()
        self.root_fd = _open_root(root) if root is not None else None
        self.listings: dict[tuple[str, str], dict[str, Entry] | str] = {}

    def of(self, path: str) -> int:
        if self.images.web_url(path) is not None:
            return URL_BYTES  # no request a row: the worker's read bounds it
        if (why := refused_scheme(path)) is not None:
            raise _Bad(f"image {path}: {why}")
        storage, name = self.images.where(path)
        if (root := storage.local_path()) is not None:
            fd = self.root_fd if storage is self.images.base else None
            return _image_size(root, name, fd)
        if not storage.lists_sizes:
            try:
                return storage.size(name)
            except OSError as e:
                raise _Bad(f"image {storage.path(name)}: {e.strerror or e}") from None
        folder, _, file = name.rpartition("/")
        listing = self.listings.get((storage.root, folder))
        if listing is None:
            try:
                listing = {entry.name: entry for entry in storage.listdir(folder)}
            except FileNotFoundError:
                listing = {}
            except OSError as e:
                listing = f"cannot list its folder ({e})"
            self.listings[storage.root, folder] = listing
        entry = listing if isinstance(listing, str) else listing.get(file)
        if entry is None or isinstance(entry, str):
            raise _Bad(f"image {storage.path(name)}: {entry or 'No such file or directory'}")
        if entry.is_dir:
            raise _Bad(f"image {storage.path(name)}: {not_regular(stat.S_IFDIR)}")
        return entry.size

    def close(self) -> None:
        if self.root_fd is not None:
            os.close(self.root_fd)


SOURCE = ManifestSource()
