"""A manifest file streamed (a list too large to hold): one pass that counts its rows and the
kinds of its columns' values, holding no row; then any range of its rows read back as chunks
for the same conversion (convert.convert_rows) as a file read whole.

A row is what the whole-file readers give a line or number to: a Parquet row, or a JSONL line
that is not blank (an object, or a bad line, which converts to a bad row). JSONL is read in
blocks of whole lines; the pass keeps each block's first row, line and byte offset (`marks`),
so a range is read from the block it starts in, not from the file's start.
"""

from __future__ import annotations

import bisect
import io
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO

from shardpack.errors import SourceError
from shardpack.sources.scanprogress import listed
from shardpack.sources.tables import chunks
from shardpack.sources.tables.chunks import Chunk, open_table
from shardpack.sources.tables.jsonl_reader import jsonl_chunks
from shardpack.sources.tables.kinds import BOOL, FLOAT, INT, TEXT, Kind, survey
from shardpack.sources.tables.parquet_reader import (
    _REWRITE,
    check_schema,
    open_parquet,
    parquet_chunks,
    parquet_errors,
    parquet_names,
    read_group,
    written_slices,
)
from shardpack.storage import Storage


@dataclass(frozen=True)
class FileRows:
    """One file of a streamed list as its scan found it: what a range of it is read by."""

    path: str  # the file, as messages name it (a path or URL)
    size: int  # its bytes at the scan: a file changed since is refused by name
    rows: int
    # JSONL: (rows before, lines before, byte offset) of each block; Parquet: each row group's
    # rows before it (the footer's), as (rows before, 0, group)
    marks: tuple[tuple[int, int, int], ...]


@dataclass
class Surveyed:
    """What the scan's pass learned of one file: its rows, and its columns' kinds."""

    file: FileRows
    names: list[str]  # the columns, in order of first appearance
    counts: dict[str, Counter]  # column -> the kinds of its values (kinds.survey)
    numbers: frozenset[str]  # Parquet: the columns its schema types as numbers
    # column -> the first row (or line) with no value in it
    first_missing: dict[str, int]


def survey_file(
    table: Storage, read: Callable[[str, list[str]], list[str]] | None = None
) -> Surveyed:
    """Count a manifest file's rows and survey its columns in one pass, a chunk at a time;
    `read`: the columns to read of a Parquet file's (its path, its column names), the others
    not read (None: all).

    Raises:
        SourceError: it cannot be read, or is malformed (as read_manifest says).
    """
    path = table.path()
    with open_table(table) as f:
        size = f.seek(0, io.SEEK_END)
        f.seek(0)
        if path.lower().endswith(".parquet"):
            columns = None if read is None else read(path, parquet_names(path, f))
            typed = _schema_typed(path, f, size, columns)
            if typed is not None:
                return typed
            f.seek(0)
            return _survey(path, size, parquet_chunks(path, f, columns), _group_marks(path, f))
        marks: list[tuple[int, int, int]] = []
        return _survey(path, size, _jsonl_blocks(path, f, marks), marks)


def _survey(path: str, size: int, found: Iterator[Chunk], marks: list) -> Surveyed:
    """Survey the chunks as they come: every column's kinds, with the rows before a column's
    first appearance (JSONL) counted missing in it."""
    names: dict[str, None] = {}
    counts: dict[str, Counter] = {}
    first_missing: dict[str, int] = {}
    numbers: frozenset[str] = frozenset()
    rows, problems = 0, []  # the first line that is no row, for a file of no row
    for chunk in found:
        numbers |= chunk.numbers
        problems = problems or chunk.problems[:1]
        for name in chunk.columns:
            if name not in names and chunk.lines:
                names[name] = None
                counts[name] = Counter({None: rows}) if rows else Counter()
                if rows:
                    first_missing[name] = 0
        for name, counted in survey([chunk], tuple(names), csv_text=False).items():
            counts[name].update(counted)
            if counted[None] and name not in first_missing:
                values = chunk.columns.get(name)
                first_missing[name] = next(
                    (line for i, line in enumerate(chunk.lines)
                     if values is None or values[i] is None or values[i] == ""),
                    chunk.lines[0],
                )  # fmt: skip
        rows += len(chunk.lines) + len(chunk.problems)
        listed(len(chunk.lines))
    if not names:
        raise chunks.no_rows(path, problems)
    file = FileRows(path, size, rows, tuple(marks))
    return Surveyed(file, list(names), counts, numbers, first_missing)


def _schema_typed(
    path: str, f: BinaryIO, size: int, columns: list[str] | None = None
) -> Surveyed | None:
    """A Parquet file typed by its footer alone, no row read, where that types it as a
    survey would: every column text, a number or a boolean as written (a list column, an
    unsigned 64-bit one, a column of nulls, or a number column with a null or without null
    counts in its statistics: None, surveyed instead). Each column's kinds are counted as
    all of its type, the nulls as missing."""
    import pyarrow as pa

    with parquet_errors(path):
        parquet = open_parquet(path, f)
        numbers = check_schema(path, parquet, columns)
        meta = parquet.metadata
        counts: dict[str, Counter] = {}
        for j, field in enumerate(parquet.schema.to_arrow_schema()):
            if columns is not None and field.name not in columns:
                continue
            kind = _scalar_kind(field.type, pa)
            nulls = [_nulls(meta.row_group(g).column(j)) for g in range(meta.num_row_groups)]
            if kind is None or None in nulls or (kind is not TEXT and sum(nulls)):
                return None
            counted = Counter({kind: meta.num_rows - sum(nulls), None: sum(nulls)})
            counts[field.name] = +counted  # no zero counts: they would name a kind
    if not meta.num_rows:
        raise SourceError(f"{path}: holds no rows; add one row per image")
    listed(meta.num_rows)
    file = FileRows(path, size, meta.num_rows, tuple(_group_marks(path, f)))
    return Surveyed(file, list(counts), counts, numbers, {})


def _scalar_kind(t, pa) -> Kind | None:
    """The kind every value of a Parquet column of this type has (its nulls aside); None
    where values of the type differ in kind (lists) or may be out of range (uint64)."""
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return TEXT
    if pa.types.is_boolean(t):
        return BOOL
    if pa.types.is_integer(t) and not pa.types.is_uint64(t):
        return INT
    if pa.types.is_floating(t):
        return FLOAT  # a float64 beyond float32's range is a bad row when converted
    return None


def _nulls(column) -> int | None:
    """A column chunk's null count from its statistics; None where it has none."""
    stats = column.statistics
    return stats.null_count if stats is not None and stats.has_null_count else None


def _group_marks(path: str, f: BinaryIO) -> list[tuple[int, int, int]]:
    """Each row group's (rows before it, 0, its number), from the footer."""
    meta = open_parquet(path, f).metadata
    marks, before = [], 0
    for group in range(meta.num_row_groups):
        marks.append((before, 0, group))
        before += meta.row_group(group).num_rows
    return marks


def _jsonl_blocks(
    path: str,
    f: BinaryIO,
    marks: list[tuple[int, int, int]],
    first: tuple[int, int, int] = (0, 0, 0),
) -> Iterator[Chunk]:
    """A JSONL file's chunks, read a block of whole lines at a time from the block `first`
    marks (rows before, lines before, offset); each block's mark is added to `marks`, and
    each chunk's problems (bad lines) stay rows of it."""
    rows, lines, offset = first
    f.seek(offset)
    while block := f.read(chunks.READ_BYTES):
        if not block.endswith(b"\n"):
            block += f.readline(chunks.MAX_LINE_BYTES + 1)  # as text_blocks reads it
        marks.append((rows, lines, offset))
        for chunk in jsonl_chunks(path, io.BytesIO(block), lines):
            rows += len(chunk.lines) + len(chunk.problems)
            yield chunk
        lines += block.count(b"\n") + (not block.endswith(b"\n"))
        offset += len(block)


def range_chunks(
    table: Storage, file: FileRows, first: int, count: int, columns: list[str] | None = None
) -> Iterator[Chunk]:
    """Rows first to first + count of a file the scan surveyed, as chunks (bad JSONL lines
    among their problems), in file order; of a Parquet file's, `columns` only (None: all).

    Raises:
        SourceError: the file changed since the scan (its size), or cannot be read.
    """
    with open_table(table) as f:
        if f.seek(0, io.SEEK_END) != file.size:
            raise SourceError(f"{file.path}: changed since the scan ({file.size:,} bytes then); "
                              "pack again")  # fmt: skip
        starts = [mark[0] for mark in file.marks]
        mark = file.marks[max(0, bisect.bisect_right(starts, first) - 1)]
        if file.path.lower().endswith(".parquet"):
            yield from _parquet_range(file, f, mark[2], first, count, columns)
        else:
            yield from _rows_between(_jsonl_blocks(file.path, f, [], mark), mark[0], first, count)


def _rows_between(found: Iterator[Chunk], row: int, first: int, count: int) -> Iterator[Chunk]:
    """Of chunks whose rows start at row `row`, the rows first to first + count."""
    end = first + count
    for chunk in found:
        rows = sorted([(line, i) for i, line in enumerate(chunk.lines)] +
                      [(line, -1 - i) for i, (line, _) in enumerate(chunk.problems)])  # fmt: skip
        taken = rows[max(0, first - row) : max(0, end - row)]
        row += len(rows)
        if taken:
            keep = [i for _, i in taken if i >= 0]
            columns = {name: [values[i] for i in keep] for name, values in chunk.columns.items()}
            problems = [chunk.problems[-1 - i] for _, i in taken if i < 0]
            yield Chunk([chunk.lines[i] for i in keep], columns, problems, chunk.numbers)
        if row >= end:
            return


def _parquet_range(
    file: FileRows, f: BinaryIO, group: int, first: int, count: int, columns: list[str] | None
):
    """The Parquet rows first to first + count (of `columns`; None: all), read a row group at
    a time from `group` (each bounded as a whole file's are)."""
    path = file.path
    with parquet_errors(path):
        parquet = open_parquet(path, f)
        names = columns if columns is not None else parquet.schema_arrow.names
        numbers = check_schema(path, parquet, columns)
        row, end = file.marks[group][0], first + count
        while row < end and group < parquet.num_row_groups:
            table = _held_group(parquet, file, group, columns)
            start = max(first, row)
            table = table.slice(start - row, min(end, row + table.num_rows) - start)
            for batch in written_slices(parquet, table, chunks.CHUNK_ROWS):
                columns = dict(zip(names, (c.to_pylist() for c in batch.columns), strict=True))
                yield Chunk(list(range(start, start + batch.num_rows)), columns, [], numbers)
                start += batch.num_rows
            row += parquet.metadata.row_group(group).num_rows
            group += 1


# The row group a process read last: (file, size, group) and its table. A row group holds many
# shards' ranges (pyarrow writes up to 1M rows a group, a shard takes 1,024), and reading it is
# most of a range's cost (1M URLs and captions: ~1.3 s), so a worker that takes the next range
# of the same group reads it once; one group at a time, bounded by MAX_ROW_GROUP_BYTES.
_held: list = [None, None]


def _held_group(parquet, file: FileRows, group: int, columns: list[str] | None):
    """Row group `group` of the file (of `columns`), read once for consecutive ranges in it."""
    key = (file.path, file.size, group, None if columns is None else tuple(columns))
    if _held[0] != key:
        _held[:] = [None, None]  # the last one goes before the next is read
        _held[:] = [key, read_group(parquet, file.path, group, columns, _REWRITE)[0]]
    return _held[1]


def forget_groups() -> None:
    """Let go of the row group held (once no more range is to be read here)."""
    _held[:] = [None, None]
