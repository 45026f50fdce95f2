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
the dataset's root, a storage.imageroot.ImageRoot, reads each image from where its path says,
through storages made with the same options; an object's size comes from a listing of its
folder. An http(s) URL takes no request at scan (its size is imageroot.URL_BYTES, a guess
for the planner): the workers fetch each shard's URLs many at a time (storage.fetch), in the
plan's order. A URL of a scheme but http(s), file://, local:// and object stores' (ftp://,
sftp://, ...) is refused by name. A URL list (a file any of whose rows names an http(s) URL;
streamed, a shard's range) is a stranger's: its rows naming anything else are refused unread.
"""

from __future__ import annotations

import dataclasses
import errno
import fnmatch
import os
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from shardpack.errors import Option, OptionError, SourceError
from shardpack.options import SPLIT_NAMES, PackOptions, box_column, check_positive, column_entry
from shardpack.schema import BOX_NAMES, Feature, Schema
from shardpack.sources.braces import expand, has_braces
from shardpack.sources.classlist import check_class_count, check_class_name
from shardpack.sources.folder import IMAGE_EXTENSIONS, few, folder_entries
from shardpack.sources.nearmisses import pinned_apart
from shardpack.sources.source import NO_FIELDS, Dataset, Item, RowFields, Source
from shardpack.sources.tables.files import (
    METADATA_FILES,
    SUFFIXES,
    compressed_list,
    line_name,
    manifest_file,
)
from shardpack.storage import Storage, storage_at
from shardpack.storage.imageroot import ImageRoot, ImageSizes, ImageUnusable, UrlRows, missing_root
from shardpack.storage.locations import is_relative, normal
from shardpack.storage.urlpolicy import MOST_TIMEOUT_S, FetchPolicy, is_web_url

if TYPE_CHECKING:
    import numpy as np

    from shardpack.sources.tables.kinds import LabelInfo
    from shardpack.sources.tables.reader import Manifest

KIND = "manifest"
DEFAULT_SPLIT = "train"
# The longest --path-suffix: an extension, or a name's end and one (`_mask.png`).
MAX_SUFFIX_CHARS = 64


def is_manifest_name(path: str) -> bool:
    """Whether a file's name says it is a manifest (.csv, .tsv, .jsonl, .parquet)."""
    return path.lower().endswith(SUFFIXES)


class ManifestSource(Source):
    """A table of image paths with labels and typed columns; found by --source auto only."""

    name = "manifest"
    kinds = (KIND,)
    described = "a manifest table"
    splits_from = "its split column, or split folders"
    choosable = False
    own_options = (
        "path_column", "label_column", "path_suffix", "root", "retries", "allow_private_urls",
        "ignore_opt_out", "user_agent", "url_threads", "per_host", "url_deadline", "box_columns",
        "columns",
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

    def check_options(self, options: PackOptions) -> None:
        """--retries of 0 or more, --url-threads and --per-host of 1 or more, --url-deadline of
        seconds above 0 and at most a day, --user-agent printable ASCII, each --box-columns
        entry NAME or NAME:FORMAT, each --columns entry NAME or NAME=FEATURE naming each column
        once, a --label-column other than the --path-column, and a --path-suffix that names no
        folder."""
        if options.retries < 0:
            raise OptionError(Option("retries"), f" must be 0 or more, got: {options.retries!r}")
        for option in ("url_threads", "per_host"):
            check_positive(option, getattr(options, option))
        if not 0 < options.url_deadline <= MOST_TIMEOUT_S:  # (a NaN is neither)
            raise OptionError(Option("url_deadline"), " must be a number of seconds above 0, at "
                              f"most {MOST_TIMEOUT_S}, got: {options.url_deadline!r}")  # fmt: skip
        agent = options.user_agent
        if agent is not None and not (agent.isascii() and agent.isprintable()):
            # an HTTP header: past ASCII or with a line break, every URL failed as 'bad answer'
            raise OptionError(Option("user_agent"), " must be printable ASCII (it is sent as an "
                              f"HTTP header), got: {agent!r}")  # fmt: skip
        formats: dict[str, str] = {}
        for entry in options.box_columns or ():
            name, fmt = box_column(entry)
            if formats.setdefault(name, fmt) != fmt:  # the last was taken, unsaid
                raise OptionError(Option("box_columns"), f" names column {name!r} twice, as "
                                  f"{formats[name]} and {fmt}; name it once, in its "
                                  "format")  # fmt: skip
        chosen_columns(options)
        if options.label_column is not None and options.label_column == options.path_column:
            raise OptionError(Option("label_column", options.label_column), " names the column "
                              "of image paths; pass the column of labels")  # fmt: skip
        suffix = options.path_suffix
        if suffix is not None and (not suffix or len(suffix) > MAX_SUFFIX_CHARS
                                   or any(c in suffix for c in "/\\\0")):  # fmt: skip
            raise OptionError(Option("path_suffix"), " is what follows each path in the file "
                              f"names (.jpg), up to {MAX_SUFFIX_CHARS} characters and no '/', "
                              f"got: {suffix!r}")  # fmt: skip

    def scan(
        self,
        found: list[tuple[str | None, Storage]] | _Glob,
        options: PackOptions,
        storage_options: Mapping[str, object] | None,
    ) -> Dataset:
        if isinstance(found, _Glob):
            found = found.manifests(storage_options)
        return scan_manifest(found, options, storage_options)


def chosen_columns(options: PackOptions) -> dict[str, str] | None:
    """Column -> feature name of each --columns entry, in their order; None: every column.

    Raises:
        OptionError: an entry is not NAME or NAME=FEATURE, or names a column twice.
    """
    if options.columns is None:
        return None
    entries = [column_entry(entry) for entry in options.columns]
    names = [name for name, _ in entries]
    twice = next((name for name in names if names.count(name) > 1), None)
    if twice is not None:
        raise OptionError(Option("columns"), f" names column {twice!r} twice; name it once")
    return dict(entries)


def box_names(options: PackOptions) -> tuple[str, ...]:
    """The columns --box-columns names."""
    return tuple(box_column(entry)[0] for entry in options.box_columns or ())


class _Glob(NamedTuple):
    """SRC as a pattern of manifest files in one folder (`lists/part-*.parquet`), or a brace
    pattern of them as webdataset writes one of tars (`lists/part-{00000..00009}.parquet`)."""

    where: str

    def manifests(self, storage_options: Mapping[str, object] | None) -> list[tuple[None, Storage]]:
        """(None, each manifest file the pattern names), in name order (a brace pattern's:
        in its own order, every one of them there).

        Raises:
            SourceError: the folder cannot be listed, or the pattern names no file (a brace
                pattern: a file that is not there).
        """
        folder, _, pattern = self.where.rpartition("/")
        parent = storage_at(folder or ".", storage_options)
        files = {name for name, is_dir in folder_entries(parent) if not is_dir}
        if has_braces(pattern):
            names = expand(pattern, self.where, "files", "pass a folder of manifest files or a "
                           "pattern of them (lists/part-*.parquet)")  # fmt: skip
            if (absent := next((name for name in names if name not in files), None)) is not None:
                raise SourceError(f"{self.where}: names {absent}, which is not a file in "
                                  f"{parent.path()}; check the pattern")  # fmt: skip
            return [(None, parent.child(name)) for name in names]
        names = [name for name in files if name[:1] != "." and fnmatch.fnmatchcase(name, pattern)]
        if not names:
            raise SourceError(f"{self.where}: names no file; check the pattern")
        return [(None, parent.child(name)) for name in sorted(names)]


def _is_glob(where: str) -> bool:
    """Whether SRC is a pattern of manifest files: `*`, `?` or `[`, or braces, in its last part,
    which ends in a manifest's extension (a URL's `?` is its query: not a pattern)."""
    base = where.rsplit("/", 1)[-1]
    patterned = any(c in base for c in "*?[") or has_braces(base)
    return is_manifest_name(base) and patterned and "://" not in base


def manifest_folder(root: Storage) -> list[tuple[None, Storage]] | None:
    """(None, each manifest file) of a folder holding nothing else (no subfolder; names starting
    with '.' or '_', as Spark's _SUCCESS, aside), in name order: the files are one manifest, as
    img2dataset takes a folder of URL lists; None for any other folder."""
    visible = [(n, is_dir) for n, is_dir in folder_entries(root) if n[:1] not in "._"]
    if visible and all(not is_dir and compressed_list(n) for n, is_dir in visible):
        first, where = visible[0][0], root.path()
        tool, kind = compressed_list(first), first.rpartition(".")[2]
        raise SourceError(f"{where}: holds compressed lists ({first}, ...): shardpack reads "
                          ".csv, .tsv and .jsonl lists as they are; decompress them in place "
                          f"({tool} {where}/*.{kind}), then pass the folder")  # fmt: skip
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
    _check_root(options.root, manifests[0][1])
    tables = [(split, _read_table(manifest, options, storage_options))
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
        raise SourceError(f"{first.path}: no row names a usable image{first_bad}",
                          *_elsewhere(skipped, options, base))  # fmt: skip
    columns = {name: BOXES if name in boxes else f for name, f in first.columns.items()}
    features = {first.feature(name): f for name, f in columns.items()}
    schema = Schema.build(classes, features, multi_label=bool(label and label.multi))
    images.rows = rows.done()
    by_name = options.classes is not None and label.kind == "names"  # (else indices of it)
    return Dataset(
        KIND,
        images,
        schema,
        {split: tuple(items) for split, items in splits.items()},
        skipped=tuple(skipped),  # the first is what --on-error fail names
        warnings=(
            *(w for _, table in tables for w in table.warnings),
            *_boxes_taken_by_name(columns, boxes),
            *(pinned_apart(label.values, options.classes, labels=True) if by_name else ()),
        ),
    )


def _boxes_taken_by_name(columns: Mapping[str, Feature], declared: Mapping[str, str]) -> list[str]:
    """A warning for each column of rows of 4 that its name alone makes boxes (BOX_NAMES):
    [ymin, xmin, ymax, xmax] normalised is assumed, and another order would be moved wrongly."""
    return [f"column {name!r} is taken as boxes [ymin, xmin, ymax, xmax] normalised to the "
            "image (TFDS's order) by its name, and moved with the pixels; if it holds another "
            f"order, declare it: --box-columns {name}:xyxy (or xywh, cxcywh)"
            for name in BOX_NAMES
            if name in columns and name not in declared and columns[name].row == 4]  # fmt: skip


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
    """(item, the row's split, its line) of each usable row, the table's rows consumed (each
    freed as its item is made); a row that is not goes to `bad` (where any row names an
    http(s) URL, each naming anything else: the table is a URL list); `seen`: the paths of
    the manifest's files read before, to refuse one listed in two; `boxes`: the box columns'
    formats (_box_columns), their values taken to yxyx rows."""
    labels: dict = {}  # a row's label -> its class indices, once per distinct label
    at = {table.feature(name): i for i, name in enumerate(table.columns)}  # every row's share it
    boxes_at = [(at[table.feature(name)], name, fmt) for name, fmt in (boxes or {}).items()]
    rows = table.rows
    sizes = ImageSizes(images, urls_only=images.lists_urls(row.path for row in rows))
    try:
        for number, row in enumerate(rows):
            rows[number] = None  # the Row goes as its Item comes: both are not held at once
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
                try:
                    size = sizes.of(path)
                except ImageUnusable as e:
                    raise _Bad(str(e)) from None
                values = row.values
                if boxes_at:
                    values = list(values)
                    for i, name, fmt in boxes_at:
                        values[i] = yxyx(name, values[i], fmt)
                    values = tuple(values)
                fields = RowFields(at, values) if at else NO_FIELDS
            except _Bad as e:
                bad.append((row.line, path, f"{line_name(table.path, row.line)}: {e}"))
                continue
            yield Item(path, value, path, size, fields=fields), row.split, row.line
    finally:
        rows.clear()
        sizes.close()


def _under(prefix: str, path: str) -> str:
    """A row's relative image path as under the folder above its split folder."""
    if not prefix or not is_relative(path):
        return path
    return normal(prefix + path)


def _folder_split(path: str) -> str | None:
    """The split folder a relative image path starts with (`test/cat/1.png`: test), else None."""
    first, slash, _ = path.partition("/")
    return first if slash and first in SPLIT_NAMES and is_relative(path) else None


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
        holds = "folder {} holds a metadata file" if len(found) == 1 else (
            "folders {} hold a metadata file each")  # fmt: skip
        raise SourceError(
            f"{root.path()}: its split {holds.format(few(found))} and {few(others)} none; "
            "give each split folder its own metadata file (Hugging Face "
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


def _elsewhere(skipped: list[tuple[str, str]], options: PackOptions, base: str) -> tuple:
    """The end of "no row names a usable image" where every row's image is missing under the
    manifest's folder: most likely the manifest lists them with Windows' separator, names them
    without their extension (a column of ids: --path-suffix) or relative to a folder inside
    (--root), was moved away from its images, or lists them relative to another folder."""
    missing = os.strerror(errno.ENOENT)
    if not skipped or not all(missing in r for _, r in skipped):
        return ()
    if any("\\" in key for key, _ in skipped):  # a list written on Windows: imgs\a.jpg
        return ("; its paths are written with '\\' between folders, as on Windows: write them "
                "with '/'",)  # fmt: skip
    if (found := _found_near(skipped[0][0], options.path_suffix, base)) is not None:
        return found  # (--path-suffix .JPG: of ids, where the reason says the file's case)
    if options.root is not None or not all(r.endswith(missing) for _, r in skipped):
        return ()  # a reason naming the file as the disk spells it: no other folder to guess
    return ("; its paths were read under ", base, ": if they are relative to another folder, "
            "pass ", Option("root"), " with that folder")  # fmt: skip


# Where a row's missing image is looked for, to say how to name it: the extensions tried after
# its path, and the most folders inside the manifest's tried as --root.
_TRIED_SUFFIXES = (*sorted(IMAGE_EXTENSIONS), *(e.upper() for e in sorted(IMAGE_EXTENSIONS)))
_TRIED_FOLDERS = 16
# The most columns of a manifest with no image column whose first value is looked for so.
_TRIED_COLUMNS = 4


def _found_near(key: str, suffix: str | None, base: str) -> tuple | None:
    """How to name the first row's missing image where a file is found for it with an image
    extension after its path (--path-suffix) or in a folder inside `base` (--root), or both;
    None where none is (_file_near)."""
    if (found := _file_near(key, suffix, base)) is None:
        return None
    name, options = found
    stem = key[: -len(suffix)] if suffix and key.endswith(suffix) else key
    return (f"; {stem + (suffix or '')} is no file there, but {name} is: pass ", *options)


def _file_near(key: str, suffix: str | None, base: str, *, as_is: bool = False) -> tuple | None:
    """The file under `base` that `key` names with an image extension after it (--path-suffix)
    or in a folder inside (--root), or both (or as it is: `as_is`), and those options (text
    and Option parts); None where none is, the path climbs out of `base`, or `base` is a web
    URL (on a store each look is a request: a few hundred at most, on a run that stops
    anyway)."""
    if not is_relative(key) or key in ("", "..") or key.startswith("../") or is_web_url(base):
        return None
    root = storage_at(base)
    stem = key[: -len(suffix)] if suffix and key.endswith(suffix) else key
    inside = [name for name, is_dir in folder_entries(root) if is_dir][:_TRIED_FOLDERS]
    for folder in ("", *inside):
        for ending in ("", *_TRIED_SUFFIXES):
            name = posixpath.join(folder, stem + ending) if folder else stem + ending
            if (as_is or (folder, ending) != ("", suffix or "")) and root.lexists(name):
                told: list = []
                if folder:
                    told += [Option("root", posixpath.join(base, folder)), " "]
                if ending != (suffix or ""):
                    told.append(Option("path_suffix", ending))
                return name, tuple(told)
    return None


def _read_table(manifest: Storage, options: PackOptions, storage_options) -> Manifest:
    """read_manifest of one manifest with the options; where it has no image column, the
    column whose first value names an image under its folder (or --root) is said to pass."""
    from shardpack.sources.tables.columns import NoImageColumn  # a folder's pack reads none
    from shardpack.sources.tables.reader import read_manifest  # numpy: not for pack --help

    try:
        return read_manifest(manifest, path_column=options.path_column, root=options.root,
                             label_column=options.label_column, path_suffix=options.path_suffix,
                             storage_options=storage_options,
                             classes_pinned=options.classes is not None,
                             columns=chosen_columns(options), boxes=box_names(options))  # fmt: skip
    except NoImageColumn as e:
        parent = manifest.parent()
        base = options.root or (parent.path() if parent is not None else None)
        named = [(column, str(value)) for column, value in e.first.items()
                 if isinstance(value, str | int) and not isinstance(value, bool)]  # fmt: skip
        for column, value in named[:_TRIED_COLUMNS] if base is not None else ():
            if (found := _file_near(value, options.path_suffix, base, as_is=True)) is not None:
                name, told = found
                raise SourceError(f"{e.head}, but column {column!r} names the images ({name}): "
                                  "pass ", Option("path_column", column),
                                  *((" ", *told) if told else ())) from None  # fmt: skip
        raise


def _check_root(root: str | None, manifest: Storage) -> None:
    """Refuse a --root on this disk that is not a folder, before the manifest is read: else
    every relative row is a missing file and the run ends in "no row names a usable image".
    Where a folder of its name lies beside the manifest, say that one (`--root train` given
    from another folder than the manifest's is taken from the current folder)."""
    if root is None or (what := missing_root(root)) is None:
        return
    beside, name = manifest.parent(), os.path.basename(root.rstrip("/"))
    if beside is not None and name and beside.kind(name) == "dir":
        raise SourceError(Option("root", root), f": {what} (a relative one is taken from the "
                          "current folder, not the manifest's); pass ",
                          Option("root", beside.path(name)))  # fmt: skip
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
        check_class_count(len(info.values), f"{path}, column {info.column!r}", "its names")
        for name in info.values:  # as a folder's: one line each in TFDS's label.labels.txt
            check_class_name(name, f"{path}, column {info.column!r}")
        return tuple(info.values)
    top = max(info.values, default=-1)
    check_class_count(top + 1, f"{path}, column {info.column!r}", f"integer labels up to {top:,}")
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


SOURCE = ManifestSource()
