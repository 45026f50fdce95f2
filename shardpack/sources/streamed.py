"""A list too large to hold: a folder or pattern of Parquet/JSONL manifest files packed with
no shuffle or a window shuffle is streamed, as img2dataset streams its input shards.

The scan holds no row: it counts each file's rows and surveys its columns' kinds (one pass,
tables/ranges.py), and the split is a `StreamedRows` of counts. The plan cuts each file into
`RowRange`s (file, first row, count); a worker reads its range and converts it with the same
code as a manifest read whole (convert_rows, then manifest._items), so no process holds more
than a shard's rows. A bad row becomes an item whose read is refused with the row's file, line
and reason, so the worker skips it (or, --on-error fail, stops) as it does a bad image.

A list with a `label` or `split` column, a CSV file, --split or --dedup is read whole (their
class list, splits and copies need every row).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from shardpack.errors import Option, SourceError
from shardpack.options import PackOptions
from shardpack.schema import Feature, Schema
from shardpack.sources.manifest import (
    BOXES,
    DEFAULT_SPLIT,
    KIND,
    SOURCE,
    _box_columns,
    _boxes_taken_by_name,
    _Glob,
    _items,
    box_names,
    chosen_columns,
)
from shardpack.sources.source import Dataset, Item, Source
from shardpack.sources.tables.files import manifest_file, row_unit
from shardpack.storage import Storage, storage_at
from shardpack.storage.imageroot import ImageRoot
from shardpack.storage.locations import absolute
from shardpack.storage.srcfiles import RefusedFile
from shardpack.storage.urlpolicy import FetchPolicy

if TYPE_CHECKING:
    from shardpack.sources.tables.columns import Layout
    from shardpack.sources.tables.ranges import FileRows, Surveyed

# The formats a list streams from: a row count without reading rows (Parquet's footer), or
# lines counted in blocks (JSONL). CSV's quoted cells may hold newlines: it is read whole.
STREAMED_SUFFIXES = (".parquet", ".jsonl")

# An item of a bad row reads from this path followed by the row's reason: its read is refused
# with that reason (a NUL is in no file name or URL a row may give).
BAD_ROW = "\0bad row\0"


def scan_streamed(
    root: Storage,
    source: Source,
    found: object,
    options: PackOptions,
    storage_options: Mapping[str, object] | None,
) -> Dataset | None:
    """What SRC (`root`, recognised by `source` as `found`) holds, streamed, where it streams:
    many manifest files given as a folder or a pattern, each Parquet or JSONL, packed without
    the global shuffle, with nothing asked that needs every row; else None."""
    if source is not SOURCE or options.shuffle_kind == "global":
        return None
    if options.split is not None or options.dedup != "none" or options.grow != "none":
        return None
    if isinstance(found, _Glob):
        found = found.manifests(storage_options)
    elif root.kind() != "dir" or manifest_file(root) is not None:
        return None  # one manifest file, or a folder's metadata file
    if not all(split is None and t.path().lower().endswith(STREAMED_SUFFIXES)
               for split, t in found):  # fmt: skip
        return None
    return _scan(found, options, storage_options)


class _Typed(NamedTuple):
    """What manifest._box_columns reads of a manifest: its name and columns."""

    path: str
    columns: dict[str, Feature]


def _scan(
    manifests: Sequence[tuple[None, Storage]],
    options: PackOptions,
    storage_options: Mapping[str, object] | None,
) -> Dataset | None:
    """The list as one split of counted rows; None when its first file has a label or split
    column (the list is then read whole).

    Raises:
        SourceError: a file cannot be read, its columns differ from the first file's, or a
            column of numbers lacks a value.
    """
    from shardpack.sources.tables.columns import Layout  # a streamed list's alone
    from shardpack.sources.tables.ranges import survey_file  # numpy: not for pack --help

    given = (options.path_column, options.label_column, options.path_suffix,
             chosen_columns(options), box_names(options))  # fmt: skip

    def read(path: str, names: list[str]) -> list[str]:  # a Parquet file's columns to read
        return Layout.of(path, names, *given).read

    surveys = [survey_file(table, read) for _, table in manifests]
    first = surveys[0]
    layout = Layout.of(first.file.path, first.names, *given)
    if layout.label is not None or layout.has_split:
        return None
    columns = _columns(first, layout)
    for surveyed in surveys[1:]:
        other = Layout.of(surveyed.file.path, surveyed.names, *given)
        if (other.path, other.label, other.has_split, _columns(surveyed, other)) != (
            layout.path, None, False, columns,
        ):  # fmt: skip
            raise SourceError(f"{surveyed.file.path}: its columns differ from "
                              f"{first.file.path}'s; give every file of the list the same "
                              "columns")  # fmt: skip
    boxes = _box_columns(_Typed(first.file.path, columns), options.box_columns)
    base = absolute(options.root or posixpath.dirname(first.file.path))
    images = StreamedImages(storage_at(base, storage_options), storage_options,
                            FetchPolicy.of(options, storage_options))  # fmt: skip
    typed = {name: BOXES if name in boxes else f for name, f in columns.items()}
    features = {layout.feature(name): f for name, f in typed.items()}
    rows = StreamedRows(
        tuple(s.file for s in surveys), tuple(t for _, t in manifests), images, layout,
        columns, boxes,
    )  # fmt: skip
    return Dataset(
        KIND,
        images,
        Schema.build(None, features),
        {DEFAULT_SPLIT: rows},  # type: ignore[dict-item]  # counted, read by range
        warnings=(*layout.warnings, *_boxes_taken_by_name(typed, boxes)),
    )


def _columns(surveyed: Surveyed, layout: Layout) -> dict[str, Feature]:
    """The extra columns' types from the survey; a column of numbers missing a value refused
    (a scalar feature holds one in every record, as read_manifest refuses it)."""
    from shardpack.sources.tables.kinds import infer  # numpy: not for pack --help

    columns = {name: infer(surveyed.counts[name], False) for name in layout.extras}
    path = surveyed.file.path
    for name, feature in columns.items():
        missing = surveyed.counts[name][None]
        number = not (feature.text or feature.shape)
        if missing and (number or (name in surveyed.numbers and missing == surveyed.file.rows)):
            unit = row_unit(path)
            more = f" and {missing - 1} more {unit}s" if missing > 1 else ""
            raise SourceError(f"{path}: column {name!r} has no value on {unit} "
                              f"{surveyed.first_missing[name]}{more}; a column of numbers (or "
                              "true/false) needs one in every row: fill it in, or leave the "
                              "column out (", Option("columns"), " names those to "
                              "keep)")  # fmt: skip
    return columns


class StreamedImages(ImageRoot):
    """A streamed list's ImageRoot: a bad row's item (BAD_ROW) is refused with its reason."""

    def read(self, name: str, limit: int) -> bytes:
        _refuse_bad_row(name)
        return super().read(name, limit)

    def read_stamped(self, name: str, limit: int) -> tuple[bytes, tuple[int, int] | None]:
        _refuse_bad_row(name)
        return super().read_stamped(name, limit)

    def stamp(self, name: str) -> tuple[int, int] | None:
        return None if name.startswith(BAD_ROW) else super().stamp(name)

    def stamps(self, names: Iterable[str]) -> list[tuple[int, int] | None]:
        names = list(names)
        got = iter(super().stamps([name for name in names if not name.startswith(BAD_ROW)]))
        return [None if name.startswith(BAD_ROW) else next(got) for name in names]


def _refuse_bad_row(name: str) -> None:
    """Raise RefusedFile with a bad row's reason, where `name` is a bad row's item (BAD_ROW)."""
    if name.startswith(BAD_ROW):
        raise RefusedFile(name[len(BAD_ROW) :])


class StreamedRows:
    """A streamed list's one split: each file's rows counted, none held; `len` is their sum,
    and the plan cuts it into RowRanges. Iterating it reads every row (nothing in a pack does)."""

    def __init__(
        self,
        files: tuple[FileRows, ...],
        tables: tuple[Storage, ...],
        images: ImageRoot,
        layout: Layout,
        columns: dict[str, Feature],
        boxes: Mapping[str, str],
    ) -> None:
        self.files, self.tables, self.images = files, tables, images
        self.layout, self.columns, self.boxes = layout, columns, dict(boxes)

    def __len__(self) -> int:
        return sum(file.rows for file in self.files)

    def __iter__(self) -> Iterator[Item]:
        for number, file in enumerate(self.files):
            yield from RowRange(self, number, 0, file.rows)

    def release(self) -> None:
        """Let go of the Parquet row group this process holds for the next range."""
        from shardpack.sources.tables.ranges import forget_groups  # numpy: workers only

        forget_groups()

    def read(self, number: int, first: int, count: int) -> tuple[list[Item], list[int]]:
        """The items of rows first to first + count of file `number`, a bad row's an item
        refused at its read (BAD_ROW), in file order; and each item's line (Parquet: row)."""
        from shardpack.sources.tables.convert import convert_rows  # numpy: workers only
        from shardpack.sources.tables.ranges import range_chunks  # numpy: workers only
        from shardpack.sources.tables.reader import Manifest  # numpy: workers only

        file, table = self.files[number], self.tables[number]
        found = list(range_chunks(table, file, first, count, self.layout.read))
        base, layout, columns = self.images.root, self.layout, self.columns
        rows, bad, _ = convert_rows(found, file.path, base, layout, columns, None, False)
        read = Manifest(
            file.path, base, layout.path, columns, None, False, rows, bad, renamed=layout.renamed
        )
        refused = [(b.line, b.path, b.reason) if b.path else (b.line, b.where, b.why)
                   for b in bad]  # fmt: skip
        made = [(line, item) for item, _, line in
                _items(read, self.images, "", None, None, refused, None, self.boxes)]  # fmt: skip
        made += [(line, Item(key, None, BAD_ROW + why, 0)) for line, key, why in refused]
        made.sort(key=lambda pair: pair[0])
        if len(made) != count:
            raise SourceError(f"{file.path}: holds {len(made):,} rows from {row_unit(file.path)} "
                              f"{first} where the scan counted {count:,}; pack again")  # fmt: skip
        return [item for _, item in made], [line for line, _ in made]


class RowRange:
    """A shard's rows: `count` rows of file `number` of a StreamedRows from row `first`, as the
    items they make (StreamedRows.read), read where first iterated and kept there (a worker
    holds its shard's); `seed` not None permutes them by (seed, the shard's index)."""

    def __init__(
        self,
        rows: StreamedRows,
        number: int,
        first: int,
        count: int,
        seed: int | None = None,
        shard: int = 0,
    ) -> None:
        self.rows, self.number, self.first, self.count = rows, number, first, count
        self.seed, self.shard = seed, shard
        self._items: list[Item] | None = None
        self._lines: list[int] = []

    def __getstate__(self) -> dict:  # pickled to a worker unread
        return {**self.__dict__, "_items": None, "_lines": []}

    def __len__(self) -> int:
        return self.count

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items())

    def __getitem__(self, at: int) -> Item:
        return self.items()[at]

    @property
    def file(self) -> FileRows:
        return self.rows.files[self.number]

    def items(self) -> list[Item]:
        """The range's items, in the shard's order."""
        if self._items is None:
            items, lines = self.rows.read(self.number, self.first, self.count)
            if self.seed is not None:
                import numpy as np  # numpy: not for pack --help

                order = np.random.default_rng([self.seed, self.shard]).permutation(self.count)
                items, lines = [items[i] for i in order], [lines[i] for i in order]
            self._items, self._lines = items, lines
        return self._items

    def lines_of(self, keys: Iterable[str]) -> dict[str, tuple[str, int]]:
        """(file name, line or row) of the items of these keys: read again, not kept."""
        wanted = set(keys)
        kept = self._items
        items, lines = self.rows.read(self.number, self.first, self.count)
        self._items = kept
        name = posixpath.basename(self.file.path)
        return {item.key: (name, line) for item, line in zip(items, lines, strict=True)
                if item.key in wanted}  # fmt: skip

    def names_urls(self) -> bool:
        """Whether a row of the range names an http(s) URL (its image, read again, not kept)."""
        items, _ = self.rows.read(self.number, self.first, self.count)
        web = self.rows.images.web_url
        return any(not i.path.startswith(BAD_ROW) and web(i.path) is not None for i in items)

    def forget(self) -> None:
        """Let go of the items read (the parent's, once merge has looked at them)."""
        self._items, self._lines = None, []
