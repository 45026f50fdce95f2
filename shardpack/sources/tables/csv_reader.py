"""CSV and TSV manifests as chunks: the csv module over bounded UTF-8 lines."""

from __future__ import annotations

import csv
import itertools
import os
import shlex
from collections.abc import Iterator
from typing import BinaryIO

from shardpack.errors import Option, SourceError
from shardpack.sources.folder import IMAGE_EXTENSIONS
from shardpack.sources.tables import chunks
from shardpack.sources.tables.cells import MAX_TEXT_CHARS
from shardpack.sources.tables.chunks import MAX_LINE_BYTES, Chunk, check_names, text_lines


def csv_chunks(path: str, f: BinaryIO, delimiter: str) -> Iterator[Chunk]:
    lines = _Lines(text_lines(path, f), delimiter == TAB)
    # a TSV's quote that no CSV writer writes so is text (_raw): strict tells it apart
    reader = csv.reader(lines, delimiter=delimiter, strict=delimiter == TAB)
    records = _csv_records(path, reader, lines, delimiter)
    header = next(records, None)
    if header is None:
        raise SourceError(f"{path}: is empty; the first line must name the columns")
    _check_separator(path, header, delimiter)
    _check_header(path, header, delimiter)
    check_names(path, header)
    end = reader.line_num
    while batch := list(itertools.islice(records, chunks.CHUNK_ROWS)):
        before, end = end, reader.line_num
        if end - before == len(batch) and set(map(len, batch)) == {len(header)}:
            yield _csv_chunk(header, list(range(before + 1, end + 1)), batch, [])
        else:  # blank lines, quoted newlines or rows of another width among them
            yield _csv_uneven(header, before, batch)


# What a table saved elsewhere separates its cells with (a spreadsheet in a locale whose decimal
# point is a comma writes ';'), and how to make it one shardpack reads.
_OTHER_SEPARATORS = {",": "rename it .csv", "\t": "rename it .tsv", ";": None, "|": None}


def _check_separator(path: str, header: list[str], delimiter: str) -> None:
    """Refuse a header read as one column that another separator splits into several: every
    row would be one cell, and the column names one name holding them all."""
    if len(header) != 1:
        return
    kind, between = ("TSV", "tabs") if delimiter == "\t" else ("CSV", "commas")
    for other, fix in _OTHER_SEPARATORS.items():
        if other != delimiter and other in header[0]:
            fix = fix or f"save it with {between} between cells"
            raise SourceError(f"{path}: its first line {header[0]!r} is one column: its cells "
                              f"are separated by {other!r}, and a {kind} file's by "
                              f"{delimiter!r}; {fix}")  # fmt: skip


def _check_header(path: str, header: list[str], delimiter: str) -> None:
    """Refuse a first line that is a row, not column names: a cell of it is a URL (CC3M's and
    CC12M's TSV lists have no header line, and img2dataset's docs add one) or an image's file
    (`images/1.jpg<TAB>cat`: Caffe's lists, a script's), which the column names would hold."""
    if (url := next((cell for cell in header if "://" in cell), None)) is not None:
        names = ["url" if "://" in cell else "caption" for cell in header]
        line = delimiter.join(names) if len(set(names)) == len(names) else "url and caption, say"
        raise SourceError(f"{path}: its first line holds {url[:80]!r}, a row of the list, not "
                          f"the names of its columns; add a first line that names them "
                          f"({line!r}), then pass ", Option("path_column", "url"))  # fmt: skip
    if (file := next((cell for cell in header if _names_image(cell)), None)) is not None:
        names = ["path" if cell == file else "label" for cell in header]
        if len(names) > 2 or names.count("path") > 1:
            line = "path and label, say"
        else:
            line = delimiter.join(names)
        raise SourceError(f"{path}: its first line holds {file[:80]!r}, a row of the list, not "
                          f"the names of its columns; add a first line that names them "
                          f"({line!r})")  # fmt: skip


def _names_image(cell: str) -> bool:
    """Whether a cell names an image file by its extension (`a/1.jpg`, `1.PNG`)."""
    return os.path.splitext(cell.strip())[1].lower() in IMAGE_EXTENSIONS


TAB = "\t"


class _Lines:
    """The file's lines, noting the last one taken, those taken since `mark` (a record's:
    bounded by the csv module's field limit; kept with `keep`, a TSV's) and whether the file
    has run out."""

    def __init__(self, lines: Iterator[str], keep: bool = False) -> None:
        self.lines, self.last, self.ended, self.keep = lines, "", False, keep
        self.taken: list[str] = []

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        try:
            self.last = next(self.lines)
        except StopIteration:
            self.ended = True
            raise
        if self.keep:
            self.taken.append(self.last)
        return self.last

    def mark(self) -> None:
        self.taken = []


def _csv_records(path: str, reader, lines: _Lines, delimiter: str) -> Iterator[list[str]]:
    """The reader's records. The csv module reads a quote that is never closed as a cell
    holding the rest of the file (to the end, or until the cell passes its size limit): either
    is one error naming the line the quote opens on, not rows cut short or "no rows". A row of
    one line with a cell past the limit (a scraped caption) is a row, its cell a bad value, as
    a JSONL line's is."""
    before, width = 0, None  # the line the last record ended on; the header's cells
    tsv = delimiter == TAB
    while True:
        lines.mark()
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            one, long = reader.line_num == before + 1, "field limit" in str(e)
            cells = _long_line(lines.last, delimiter) if long and one else None
            rows = _raw(lines.taken, width, one) if tsv and not long else None
            if rows is not None:  # a TSV's quote that CSV's quoting misread
                before, width = reader.line_num, len(rows[0]) if width is None else width
                yield from rows
                continue
            if cells is None and not (tsv and not long and lines.ended):
                raise _malformed(path, e, before, reader.line_num) from None
            cells = cells or [""]  # (a TSV's quote open to the end: said below)
        else:
            spans = reader.line_num > before + 1 and len(cells) != width
            if tsv and spans and (rows := _raw(lines.taken, width, False)) is not None:
                before = reader.line_num  # a quote that ran on into rows: a TSV's text
                yield from rows
                continue
        if lines.ended:  # the file ran out inside this record: its last cell's quote is open
            opens = before + 1 + sum(cell.count("\n") for cell in cells[:-1])
            raise SourceError(
                f"{path} line {opens}: a quote opens here and is never closed, so the "
                "rest of the file reads as one cell; close it (a quote inside a quoted "
                'cell is written "")'
            )
        before = reader.line_num
        width = len(cells) if width is None else width
        yield cells


def _raw(taken: list[str], width: int | None, one: bool) -> list[list[str]] | None:
    """The lines of a TSV record that CSV's quoting misread, each a row of its cells as
    written (a blank line: none), quotes and all: a record of one line whose quote closed
    before its cell's end (`"Hello" world`, as CC3M's and CC12M's unquoted TSVs hold
    captions: no CSV writer writes that), or one whose quote ran on past its line where each
    of its lines is a row of the header's width; else None (CSV's quoting stands)."""
    bare = [line.rstrip("\r\n") for line in taken]
    if any("\r" in line for line in bare):  # a line break of no kind a row is read by
        return None
    rows = [line.split(TAB) if line.strip("\r\n") else [] for line in bare]
    if one and len(rows) == 1:
        return rows
    if width is not None and rows and all(len(row) in (0, width) for row in rows):
        return rows
    return None


def _long_line(line: str, delimiter: str) -> list[str] | None:
    """The cells of one line (at most MAX_LINE_BYTES) read past the csv module's field limit,
    or None where a quote in it is left open (its record would run on past the line)."""
    limit = csv.field_size_limit()
    try:  # the limit is the module's, process-wide: raised for this one bounded line only
        csv.field_size_limit(max(limit, MAX_LINE_BYTES))
        records = list(csv.reader([line], delimiter=delimiter))
    except csv.Error:
        return None
    finally:
        csv.field_size_limit(limit)
    if len(records) != 1 or any("\n" in cell or "\r" in cell for cell in records[0]):
        return None
    return records[0]


def _malformed(path: str, e: csv.Error, before: int, line: int) -> SourceError:
    """The error of a file the csv module cannot read on from `line` (its record began after
    line `before`)."""
    if "new-line character seen in unquoted field" in str(e):  # a lone \r inside a line
        return SourceError(
            f"{path} line {line}: a carriage return (\\r) inside the line, outside quotes, as "
            "an edit of a Windows (CRLF) file leaves it (sed 's/$/,x/' writes after the \\r); "
            f"remove them (sed -i 's/\\r//g' {shlex.quote(path)}), then pack it again"
        )
    if "field limit" not in str(e):
        return SourceError(f"{path} line {line}: malformed CSV ({e}); check its quoting")
    return SourceError(
        f"{path} line {before + 1}: malformed CSV (a cell of the row on this line runs past "
        f"{MAX_TEXT_CHARS} characters, to line {line}); check its quoting: is a quote never "
        "closed?"
    )


def _csv_uneven(header: list[str], before: int, records: list[list[str]]) -> Chunk:
    """A chunk of records some of which are not one line of a row each, after line `before`."""
    lines, rows, problems = [], [], []
    end = before
    for cells in records:
        start = end + 1
        end = start + sum(cell.count("\n") for cell in cells)  # a record's quoted newlines
        if len(cells) == len(header):
            lines.append(start)
            rows.append(cells)
        elif cells:  # not a blank line
            problems.append((start, f"has {len(cells)} cells, the header has {len(header)}"))
    return _csv_chunk(header, lines, rows, problems)


def _csv_chunk(header: list[str], lines: list[int], rows: list[list[str]], problems) -> Chunk:
    columns = dict(zip(header, zip(*rows, strict=True), strict=True)) if rows else {}
    return Chunk(lines, columns, problems)
