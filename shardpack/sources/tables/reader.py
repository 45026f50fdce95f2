"""read_manifest: a manifest's columns typed over the whole file, then its rows converted."""

from __future__ import annotations

import dataclasses
import json
import os
from collections import Counter
from collections.abc import Iterator, Mapping
from typing import BinaryIO

from shardpack.errors import Option, SourceError
from shardpack.schema import Feature
from shardpack.sources.scanprogress import listed
from shardpack.sources.tables.cells import CSV_FLOAT, CSV_INT
from shardpack.sources.tables.chunks import Chunk, open_table
from shardpack.sources.tables.columns import Layout, column_names
from shardpack.sources.tables.convert import BadRow, Row, convert_rows, describe
from shardpack.sources.tables.csv_reader import csv_chunks
from shardpack.sources.tables.files import METADATA_FILES, manifest_file, row_unit
from shardpack.sources.tables.jsonl_reader import jsonl_chunks
from shardpack.sources.tables.kinds import LabelInfo, infer, infer_label, survey
from shardpack.sources.tables.parquet_reader import (
    pandas_index,
    pandas_index_warning,
    parquet_chunks,
    parquet_names,
)
from shardpack.storage import Storage, storage_at
from shardpack.storage.locations import absolute


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A manifest's rows with their typed columns."""

    path: str  # the manifest file: a path or URL
    root: str  # the folder (a path or URL) relative image paths are under
    path_column: str
    columns: dict[str, Feature]  # the extra features, by name in sorted order
    label: LabelInfo | None  # None: no label column (an unlabeled dataset)
    has_split: bool
    rows: list[Row]
    bad: list[BadRow]  # in file order
    warnings: tuple[str, ...] = ()  # for the user, one line each
    # (column, feature) of each column whose feature is named otherwise (--columns)
    renamed: tuple[tuple[str, str], ...] = ()

    def fields(self, row: Row) -> dict[str, object]:
        """A row's extra values by feature name."""
        return dict(zip(map(self.feature, self.columns), row.values, strict=True))

    def feature(self, column: str) -> str:
        """The name of an extra column's feature."""
        return dict(self.renamed).get(column, column)


def read_manifest(
    src: Storage | str | os.PathLike,
    *,
    path_column: str | None = None,
    root: str | os.PathLike | None = None,
    label_column: str | None = None,
    path_suffix: str | None = None,
    storage_options: Mapping[str, object] | None = None,
    classes_pinned: bool = False,
    columns: dict[str, str] | None = None,
    boxes: tuple[str, ...] = (),
) -> Manifest:
    """Read a manifest: infer each column's type, then check and convert every row.

    Args:
        src: a .csv, .tsv, .jsonl or .parquet file, or a folder holding one metadata file: a
            local path, a URL, or a Storage rooted at either.
        path_column: the column naming each image; None finds the one of PATH_COLUMNS present.
        root: the folder (a path or URL) relative image paths are under; None: the
            manifest's folder.
        label_column: the column of labels; None: `label`, where there is one.
        path_suffix: written after each image path (".jpg" for a column of file ids).
        storage_options: options for the filesystem of a URL `src`.
        classes_pinned: whether --classes gives the class list (a warning then says so).
        columns: column -> feature name of the extra columns to keep (--columns); None:
            every column. A Parquet file's others are not read; a CSV's or JSONL's are
            dropped as soon as its rows are parsed, untyped.
        boxes: the box columns (--box-columns), kept with `columns`.

    Raises:
        SourceError: no manifest there, it cannot be read, is not UTF-8, has no image column,
            a column with a built-in feature's name, a malformed line or a quote never closed,
            a number column missing a value, or no rows.
        StorageError: a URL's filesystem package is missing.
    """
    src = storage_at(src, storage_options)
    table = manifest_file(src)
    if table is None:
        raise SourceError(
            f"{src.path()}: no such manifest; pass a .csv, .tsv, .jsonl or .parquet file, or "
            f"a folder holding one of {', '.join(METADATA_FILES)}"
        )
    path = table.path()
    suffix = path.lower().rpartition(".")[2]
    csv_text = suffix in ("csv", "tsv")  # every value is a text cell, typed by its spelling
    given = (path_column, label_column, path_suffix, columns, boxes)
    chunks, layout = _read(table, path, suffix, given)
    typed = (*layout.extras, layout.label) if layout.label is not None else layout.extras
    counts = survey(chunks, typed, csv_text)
    columns = {n: infer(counts[n], csv_text) for n in layout.extras}
    _check_filled(path, chunks, columns, counts)
    as_text = _numbers_as_text(path, chunks, columns) if csv_text else ()  # convert frees chunks
    label = None
    if layout.label is not None:
        inferred = infer_label(counts[layout.label], csv_text)
        label = dataclasses.replace(inferred, column=layout.label)
    base = os.path.dirname(path) if root is None else os.fspath(root)  # a URL's too
    base = absolute(base)
    rows, bad, label_values = convert_rows(chunks, path, base, layout, columns, label, csv_text)
    return Manifest(
        path=path,
        root=base,
        path_column=layout.path,
        columns=columns,
        label=None if label is None else dataclasses.replace(label, values=label_values),
        has_split=layout.has_split,
        renamed=layout.renamed,
        rows=rows,
        bad=bad,
        warnings=(
            *layout.warnings,
            *(_numbers_as_names(path, label_values, classes_pinned) if csv_text and label else ()),
            *(_lists_as_names(path, label_values) if csv_text and label else ()),
            *as_text,
        ),
    )


# How a manifest leaves out a column of pandas' index, but by writing the file without it.
_NOT_INDEX = "or pass --columns naming the columns to keep"


def _read(table: Storage, path: str, suffix: str, given: tuple) -> tuple[list[Chunk], Layout]:
    """The file's chunks, of the columns its layout (Layout.of `given`) reads: a Parquet
    file's others are not read (its footer names them), a CSV's or JSONL's dropped untyped."""
    with open_table(table) as f:
        layout = None
        if suffix == "parquet":
            layout = Layout.of(path, parquet_names(path, f), *given)
            if index := pandas_index(layout.extras):
                said = pandas_index_warning(path, index, _NOT_INDEX)
                layout = dataclasses.replace(layout, warnings=(*layout.warnings, said))
        chunks = []
        for chunk in _chunks(path, suffix, f, None if layout is None else layout.read):
            chunks.append(chunk)
            listed(len(chunk.lines))
    names = column_names(chunks, path)
    if layout is None:
        first = next(({n: v[0] for n, v in c.columns.items()} for c in chunks if c.lines), None)
        layout = Layout.of(path, names, *given, first=first)
        _drop_unread(chunks, layout)
    return chunks, layout


def _drop_unread(chunks: list[Chunk], layout: Layout) -> None:
    """Let go of the columns no row is made of (--columns left them out), before typing."""
    read = set(layout.read)
    for chunk in chunks:
        for name in [name for name in chunk.columns if name not in read]:
            del chunk.columns[name]


def _numbers_as_names(path: str, labels: tuple, classes_pinned: bool) -> tuple[str, ...]:
    """A warning when a CSV label column of mostly integers reads as class names: one cell
    that is not an integer makes every label a name (sorted as text, "10" before "2", or looked
    up by name in --classes), which silently changes what each number means. `labels` are the
    distinct labels, so "most" counts distinct values."""
    names = [v for v in labels if isinstance(v, str)]
    numbers = sum(1 for v in names if CSV_INT.match(v))
    other = next((v for v in names if not CSV_INT.match(v)), None)
    if other is None or numbers <= len(names) - numbers:
        return ()
    order = "each looked up by name in --classes" if classes_pinned else "sorted as text"
    return (f"{os.path.basename(path)}: its label column reads as class names, as "
            f"{describe(other)} is not an integer: its {numbers} distinct integer labels are "
            f"names too ({order}); if they are class numbers, fix the other labels",)  # fmt: skip


def _lists_as_names(path: str, labels: tuple) -> tuple[str, ...]:
    """A warning when CSV labels look like JSON lists (`["cat","dog"]`): a CSV cell is one
    class name, so each list would be a class of its own."""
    listed = next((v for v in labels if isinstance(v, str) and _json_list(v)), None)
    if listed is None:
        return ()
    return (f"{os.path.basename(path)}: label {describe(listed)} looks like a list of labels, "
            "but a CSV label is one class name (each list is a class of its own); multi-label "
            "needs JSONL or Parquet, whose label can hold a list",)  # fmt: skip


def _json_list(cell: str) -> bool:
    """Whether a CSV cell spells a JSON list: `["cat", "dog"]`, `[3, 7]`."""
    if not cell.startswith("[") or not cell.endswith("]"):
        return False
    try:
        return isinstance(json.loads(cell), list)
    except ValueError:
        return False


# Past this many cells that are not numbers, a text column is taken as meant to be text.
_FEW_TEXT_CELLS = 10


def _numbers_as_text(
    path: str, chunks: list[Chunk], columns: dict[str, Feature]
) -> tuple[str, ...]:
    """A warning for each CSV column of numbers made text by a few cells (`n/a`, `1,5`): one
    cell that is not a number makes the whole column text, every number in it a string."""
    warnings = []
    for name, feature in columns.items():
        if not feature.text or feature.shape:
            continue
        numbers, texts, first = 0, 0, None
        for chunk in chunks:
            for line, cell in zip(chunk.lines, chunk.columns.get(name, ()), strict=False):
                if not cell:
                    continue
                if CSV_INT.match(cell) or CSV_FLOAT.match(cell):
                    numbers += 1
                    continue
                texts += 1
                first = first or (line, cell)
            if texts > _FEW_TEXT_CELLS:
                break
        if first is not None and numbers > texts and texts <= _FEW_TEXT_CELLS:
            line, cell = first
            warnings.append(
                f"{os.path.basename(path)}: column {name!r} reads as text, as {describe(cell)} "
                f"on line {line} is not a number: its {numbers} number cells are text too; if "
                f"it is a number column, fix the {texts} other cell{'s' * (texts > 1)}"
            )
    return tuple(warnings)


def _check_filled(
    path: str, chunks: list[Chunk], columns: dict[str, Feature], counts: dict[str, Counter]
) -> None:
    """Refuse a number column that some rows leave empty (or a Parquet number column with no
    value at all): a scalar feature holds one value in every record, and no number is made up,
    so each of those rows could only be dropped, which silently loses an optional column's
    rows (59 of 60 where one row says "iscrowd": 1)."""
    declared = set().union(*(chunk.numbers for chunk in chunks))
    for name, feature in columns.items():
        missing = counts[name][None]
        if not missing:
            continue
        number = not feature.text and not feature.shape
        if not number and not (name in declared and missing == sum(counts[name].values())):
            continue
        first = next(_missing_lines(chunks, name))
        unit = row_unit(path)
        more = f" and {missing - 1} more {unit}s" if missing > 1 else ""
        raise SourceError(
            f"{path}: column {name!r} has no value on {unit} {first}{more}; a column of "
            "numbers (or true/false) needs one in every row: fill it in, or leave the column out (",
            Option("columns"),
            " names those to keep)",
        )


def _missing_lines(chunks: list[Chunk], name: str) -> Iterator[int]:
    """The lines (or Parquet rows) whose value in the column is missing, in file order."""
    for chunk in chunks:
        values = chunk.columns.get(name)
        if values is None:  # no record of the chunk has it (JSONL)
            yield from chunk.lines
            continue
        for line, value in zip(chunk.lines, values, strict=True):
            if value is None or value == "":
                yield line


# ---- opening and records ---------------------------------------------------------------------


def _chunks(
    path: str, suffix: str, f: BinaryIO, columns: list[str] | None = None
) -> Iterator[Chunk]:
    """The file's rows, read once from the start, a chunk at a time (Parquet: of `columns`,
    None: all)."""
    if suffix == "parquet":
        return parquet_chunks(path, f, columns)
    if suffix == "jsonl":
        return jsonl_chunks(path, f)
    return csv_chunks(path, f, "\t" if suffix == "tsv" else ",")
