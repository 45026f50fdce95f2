"""The Hugging Face Parquet source: a dataset as the Hub keeps it, Parquet files with the image
bytes inside (an `image` column of the `datasets` Image type, struct<bytes, path>), split by
the files' names (hflayout), class names from the `huggingface` schema metadata and every
other column a feature (hfcolumns).

The scan reads each file a row group at a time, every column but the image's: an item keeps
its file, row and small fields. A worker reads the image column of the row group an item lies
in (a few kept at once), from a file whose size and mtime are still the scan's, and hands the
bytes on as they are; a row holding only a path reads that file under SRC (or --root, an
absolute path where it lies under --root), as any image file.
"""

from __future__ import annotations

import bisect
import hashlib
import itertools
import posixpath
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

from shardpack.errors import ImageError, Option, SourceError, printable
from shardpack.options import PackOptions
from shardpack.schema import LABEL, Feature, Schema
from shardpack.sources.hflayout import SUFFIX, data_files, hub_named
from shardpack.sources.openfiles import OpenFiles
from shardpack.sources.scanprogress import listed
from shardpack.sources.source import Dataset, Item, Source, read_image_file
from shardpack.storage import Storage, storage_at
from shardpack.storage.locations import relative_to, stays_under

if TYPE_CHECKING:
    from shardpack.sources.hfcolumns import Columns

KIND = "hf"
# A row group is read whole (its small columns at scan, its image column in a worker), bounded
# by MAX_ROW_GROUP_BYTES as it decodes (far beyond the 100 image rows a group `datasets` writes).
_REWRITE = "datasets: to_parquet(batch_size=100)"  # how to write smaller row groups
KEEP_FILES = 8  # Parquet files a worker keeps open
# What to do about a row holding only an image's path (datasets keeps the path it was given
# until the bytes are embedded: push_to_hub embeds them, to_parquet does not).
_EMBED = (
    "embed the images in the file (datasets: embed_table_storage, as push_to_hub does), "
    "place them at that path under SRC, or pass --root FOLDER they are under"
)
# The row groups' image columns a worker keeps: a dataset of up to this much a worker reads
# each row group once a shard, shuffled or not; beyond it, a shuffled shard reads a row group
# again for a row of it met after others pushed it out.
KEPT_GROUP_BYTES = 256 << 20
# An item's position is its row, and above ROW_BITS 22 bits of its file's size and mtime at the
# scan: a worker refuses a file rewritten since (rows in another order would give each record
# another row's image under its own label). 2**40 rows are far past any dataset.
ROW_BITS = 40


class HfSource(Source):
    """Parquet files written by `datasets` (or shaped as they write them)."""

    name = "hf"
    kinds = (KIND,)
    described = "a Hugging Face Parquet dataset"
    splits_from = "its Parquet files, named by split"
    own_options = ("root",)  # the folder rows' image paths are under

    def recognise(
        self, root: Storage, options: PackOptions
    ) -> tuple[Storage, dict[str, list[str]] | None] | None:
        """(SRC, split -> its files); (the file, None) when SRC is a Parquet file."""
        required = options.source == self.name
        if root.kind() == "dir":
            files = data_files(root, required)
            if files is None:
                if required:
                    raise SourceError(
                        f"{root.path()}: no Parquet files found; expected "
                        "data/{split}-00000-of-00001.parquet, {split}/*.parquet, "
                        "{config}/{split}/*.parquet or README.md configs naming them"
                    )
                return None
            first = root.child(next(iter(files.values()))[0])
        elif root.path().lower().endswith(SUFFIX):
            files, first = None, root
        else:
            return None
        try:
            parquet = _open(first)
        except SourceError:
            if required or (files is not None and hub_named(files)):
                raise  # the Hub's own layout: no other source reads it, whatever is wrong
            return None  # not ours to refuse: a manifest or a stray file (--source hf says why)
        from shardpack.sources.hfcolumns import columns_of  # numpy: not for pack --help

        try:  # a file with an image column is ours: what is wrong with it is said, not passed on
            columns = columns_of(parquet.schema_arrow, first.path(), required)
        finally:
            parquet.close(force=True)
        return None if columns is None else (root, files)

    def scan(
        self,
        found: tuple[Storage, dict[str, list[str]] | None],
        options: PackOptions,
        storage_options: Mapping[str, object] | None,
    ) -> Dataset:
        root, files = found
        if options.classes is not None:
            raise SourceError(f"{root.path()}: a Hugging Face dataset brings its class names "
                              "(ClassLabel); drop ", Option("classes"))  # fmt: skip
        if options.root is not None and storage_at(options.root, storage_options).kind() != "dir":
            raise SourceError(Option("root", options.root), ": not a folder; pass the folder "
                              "the rows' image paths are relative to")  # fmt: skip
        if files is None:  # a Parquet file: the items' paths are under its folder
            folder, _, name = root.root.rstrip("/").rpartition("/")
            root, files = storage_at(folder or "/", storage_options), {"train": [name]}
        return scan_hf(root, files, options.shuffle)

    def load(self, item: Item, root: Storage, options: PackOptions, cache: dict) -> bytes:
        return load(item, root, options, cache)

    def item_files(self, items: Iterable[Item]) -> Iterator[tuple[str, int]]:
        return iter(())  # a row group's images are read together, by load


def _open(file: Storage):
    """A Parquet file (a Storage rooted at it) as pyarrow's ParquetFile, opened without
    following a link; close(force=True) closes it (pyarrow closes a file it was handed only
    so)."""
    from shardpack.sources.tables.chunks import open_table  # an hf SRC's alone: not at start
    from shardpack.sources.tables.parquet_reader import open_parquet

    f = open_table(file)
    try:
        return open_parquet(file.path(), f)
    except SourceError:
        f.close()
        raise
    except Exception as e:  # pyarrow raises several types on a damaged file; one to the user
        f.close()
        raise SourceError(f"{file.path()}: not a readable Parquet file ({e})") from None


def _columns(file: Storage, required: bool) -> Columns | None:
    from shardpack.sources.hfcolumns import columns_of  # numpy: not for pack --help

    parquet = _open(file)
    try:
        return columns_of(parquet.schema_arrow, file.path(), required)
    finally:
        parquet.close(force=True)


def scan_hf(folder: Storage, files: dict[str, list[str]], shuffle: bool = False) -> Dataset:
    """List every row of each split's files as an item (its image left in the file); with
    `shuffle`, warn when the images outgrow what a worker keeps of them (KEPT_GROUP_BYTES).

    Raises:
        SourceError: a file is unreadable, has no image column, columns unlike the first's, a
            row group or file past parquet_reader's decoded limits, or no row at all.
    """
    from shardpack.sources.tables.parquet_reader import (  # an hf SRC's alone: not at start
        pandas_index,
        pandas_index_warning,
    )

    first = next(iter(files.values()))[0]
    columns = _columns(folder.child(first), required=True)
    features, ragged = columns.features, columns.ragged
    splits: dict[str, list[Item]] = {}
    skipped: list[tuple[str, str]] = []
    for split, names in files.items():
        for name in names:
            items = splits.setdefault(split, [])
            columns, features, ragged = _scan_file(
                folder, name, columns, (features, ragged), items, skipped
            )
    if not any(splits.values()):
        first_bad = f"; the first: {skipped[0][1]}" if skipped else ""
        raise SourceError(f"{folder.path()}: no row holds a usable image{first_bad}")
    warnings = [f"{folder.path(first)}: column {c!r} holds images too; only "
                f"{columns.image!r} is packed" for c in columns.left_out]  # fmt: skip
    if index := pandas_index(list(features)):
        leave_out = "or save the dataset after datasets' remove_columns"
        warnings.append(pandas_index_warning(folder.path(first), index, leave_out))
    stored = sum(item.size for items in splits.values() for item in items)
    if shuffle and stored > KEPT_GROUP_BYTES:
        warnings.append(
            f"{folder.path()}: shuffled, each shard reads the row groups its images lie in, and "
            f"the {stored / 2**20:,.0f} MiB of images outgrow the {KEPT_GROUP_BYTES >> 20} MiB a "
            "worker keeps: the files are read up to once per shard; --no-shuffle reads them "
            "once (shuffle when reading instead)"
        )
    return Dataset(
        KIND,
        folder,
        Schema.build(columns.classes, features, multi_label=columns.multi_label),
        {split: tuple(items) for split, items in splits.items() if items},
        skipped=tuple(skipped),
        warnings=tuple(warnings),
    )


def _scan_file(
    folder: Storage,
    name: str,
    columns: Columns,
    typed: tuple[dict[str, Feature], frozenset[str]],
    items: list[Item],
    skipped: list[tuple[str, str]],
) -> tuple[Columns, dict[str, Feature], frozenset[str]]:
    """Add one file's rows to `items` (bad ones to `skipped`); return the columns (a class list
    grown by this file's) and the features as settled."""
    # numpy: not for pack --help
    from shardpack.sources.hfcolumns import columns_of, joined, settle
    from shardpack.sources.tables.parquet_reader import held_groups, parquet_errors, written_slices

    features, ragged = typed
    path = folder.path(name)
    stamp = _stamp(folder, name) << ROW_BITS  # before the read: a rewrite during it is seen
    parquet = _open(folder.child(name))
    try:
        with parquet_errors(path):
            columns = joined(columns, columns_of(parquet.schema_arrow, path, required=True))
            if columns is None:
                raise SourceError(f"{path}: its columns differ from the first file's; pack the "
                                  "files with unlike columns apart")  # fmt: skip
            features = {n: replace(f, classes=columns.features[n].classes)  # as grown by joined
                        for n, f in features.items()}  # fmt: skip
            wanted = [n for n in parquet.schema_arrow.names if n != columns.image
                      and n not in columns.left_out and n not in columns.derived]  # fmt: skip
            row = 0
            for group, table in enumerate(held_groups(parquet, path, wanted, _REWRITE)):
                meta = parquet.metadata.row_group(group)
                size = _image_bytes(meta, columns.image) // max(meta.num_rows, 1)
                for part in written_slices(parquet, table, meta.num_rows):
                    values = part.to_pydict()
                    features, ragged = settle(features, ragged, values)
                    at = (size, stamp, row, part.num_rows)
                    _add_rows(name, columns, features, values, at, items, skipped)
                    row += part.num_rows
                listed(meta.num_rows)
    finally:
        parquet.close(force=True)
    return columns, features, ragged


def _add_rows(
    name: str,
    columns: Columns,
    features: dict[str, Feature],
    values: dict[str, list],
    at: tuple[int, int, int, int],
    items: list[Item],
    skipped: list[tuple[str, str]],
) -> None:
    """Add a slice's rows (`values`, column by column, features settled) to `items`, bad ones
    to `skipped`; `at`: each row's image size, the file's stamp, the slice's first row in the
    file and its number of rows."""
    # numpy: not for pack --help
    from shardpack.sources.hfcolumns import BadValue, convert, label_of

    size, stamp, first, count = at
    for i in range(count):
        row, key = first + i, f"{name}:{first + i}"
        try:
            label = (
                None
                if columns.classes is None
                else label_of(values[LABEL][i], columns.classes, columns.multi_label)
            )
            fields = {n: convert(n, f, values[n][i]) for n, f in features.items()}
        except BadValue as e:
            skipped.append((key, f"{name} row {row}: {e}"))
            continue
        items.append(Item(key, label, name, size, stamp | row, fields))


def _stamp(folder: Storage, name: str) -> int:
    """22 bits of a file's size and modification time (its size alone on a store that gives no
    stamp), as the scan and each worker see it."""
    try:
        seen = folder.stamp(name) or (folder.size(name), 0)
    except OSError as e:
        raise SourceError(f"{folder.path(name)}: cannot read ({e.strerror or e})") from None
    digest = hashlib.blake2b(repr(seen).encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") >> 10


def _image_bytes(meta, image: str) -> int:
    """The image column's bytes in a row group, as stored (its leaves image.bytes/.path)."""
    prefix = f"{image}."
    return sum(
        meta.column(j).total_compressed_size
        for j in range(meta.num_columns)
        if meta.column(j).path_in_schema.startswith(prefix)
    )


# ---- in the workers --------------------------------------------------------------------------


class _File:
    """One Parquet file open in a worker, with where each row group starts."""

    def __init__(self, folder: Storage, name: str) -> None:
        from shardpack.sources.hfcolumns import columns_of  # numpy: not for pack --help

        self.stamp = _stamp(folder, name)
        self.parquet = _open(folder.child(name))
        self.path = folder.path(name)
        self.image = columns_of(self.parquet.schema_arrow, self.path, required=True).image
        meta = self.parquet.metadata
        self.starts = list(itertools.accumulate(
            (meta.row_group(g).num_rows for g in range(meta.num_row_groups)), initial=0
        ))  # fmt: skip

    def locate(self, row: int) -> tuple[int, int]:
        """(the row group holding a row, the row's place in it)."""
        group = bisect.bisect_right(self.starts, row) - 1
        if not 0 <= group < len(self.starts) - 1:
            raise IndexError(f"no row {row}")
        return group, row - self.starts[group]

    def images(self, group: int):
        """A row group's image column (pyarrow's), read whole."""
        from shardpack.sources.tables.parquet_reader import read_group  # _open imported it

        table, _ = read_group(self.parquet, self.path, group, [self.image], _REWRITE)
        return table.column(0)

    def close(self) -> None:
        self.parquet.close(force=True)


_ROWS = (1 << ROW_BITS) - 1  # an item position's row


class FileChanged(SourceError):
    """A Parquet file rewritten between the scan and a worker's read."""


class _Rows:
    """A worker's open Parquet files, and the image columns of the row groups it read last (up
    to KEPT_GROUP_BYTES): a shuffled shard draws its rows from all over the files."""

    def __init__(self, folder: Storage) -> None:
        self.files: OpenFiles[_File] = OpenFiles(lambda name: _File(folder, name), KEEP_FILES)
        self.groups: OrderedDict[tuple[str, int], object] = OrderedDict()
        self.kept = 0

    def image(self, name: str, position: int) -> dict | None:
        """The row at an item's `position` in file `name`: its image struct {"bytes": ...,
        "path": ...}, or None.

        Raises:
            FileChanged: the file's size or mtime is not the scan's.
        """
        file = self.files.get(name)
        if position >> ROW_BITS != file.stamp:
            raise FileChanged(f"{file.path}: changed since the scan (its size or modification "
                              "time differs), so its rows may no longer be those listed; "
                              "pack again")  # fmt: skip
        group, offset = file.locate(position & _ROWS)
        column = self.groups.get((name, group))
        if column is None:
            while self.groups and self.kept > KEPT_GROUP_BYTES:
                self.kept -= self.groups.popitem(last=False)[1].nbytes
            column = self.groups[name, group] = file.images(group)
            self.kept += column.nbytes
        self.groups.move_to_end((name, group))
        return column[offset].as_py()


def load(item: Item, root: Storage, options: PackOptions, cache: dict) -> bytes:
    """An item's image bytes from its row, as stored; or the file its row names, under SRC (or
    --root).

    Raises:
        ImageError: the row has no image, the path it names is not a file under SRC (or
            --root), or its file is gone.
        SourceError: its Parquet file changed since the scan.
    """
    rows = cache.get(KIND)
    if rows is None:
        rows = cache[KIND] = _Rows(root)
    where = f"{item.path} row {item.position & _ROWS}"
    try:
        image = rows.image(item.path, item.position)
    except FileChanged:
        raise
    except (SourceError, IndexError, OSError, ValueError) as e:  # pyarrow's: OSError, ValueError
        raise ImageError(item.key, f"{where}: cannot read it ({e}); was it changed?") from None
    data, path = image.get("bytes") if image else None, image.get("path") if image else None
    if data:
        return data
    if not path:
        raise ImageError(item.key, f"{where}: no image (neither bytes nor a path)")
    base = "SRC" if options.root is None else "--root"
    if options.root is not None:
        root = cache.get("hf.root") or cache.setdefault("hf.root", storage_at(options.root))
        if path.startswith("/"):  # datasets keeps the absolute path it was given: under --root?
            path = relative_to(posixpath.normpath(path), root.root)
    if not stays_under(path):
        raise ImageError(item.key, f"{where}: holds no image bytes, only the path "
                         f"'{printable(path)}', which is not a file under {base}; "
                         f"{_embed(path)}")  # fmt: skip
    try:
        return read_image_file(item._replace(path=path), root, options)
    except ImageError as e:
        raise ImageError(item.key, f"{where}: holds no image bytes, only the path "
                         f"'{printable(path)}' ({base}/{printable(path)}: {e.reason}); "
                         f"{_EMBED}") from None  # fmt: skip


def _embed(path: str) -> str:
    """What to do about a row naming `path`, not under SRC or --root: an absolute path's own
    folder is one --root reads it under."""
    if not path.startswith("/") or "\0" in path:
        return _EMBED
    return (f"embed the images in the file (datasets: embed_table_storage, as push_to_hub "
            f"does), or pass --root with a folder it is under: "
            f"--root {printable(posixpath.dirname(posixpath.normpath(path)))}")  # fmt: skip


SOURCE = HfSource()
