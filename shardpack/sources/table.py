"""Reading a manifest: a table (CSV, TSV, JSONL, Parquet) of image paths, labels and typed values.

A manifest names one image per row in its path column, optionally a `label` (a class name, an
integer, or a list of either for a multi-label dataset) and a `split`; every other column becomes
a feature of the same name, typed over the whole column:

- numbers: int64 when every value is an integer or a boolean, else float32;
- text: bytes holding UTF-8 (`Feature("bytes", text=True)`);
- lists (JSONL, Parquet): of numbers -> (-1,) int64/float32; of text -> (-1,) text; of k-long
  number lists (boxes, keypoints) -> (-1, k), stored flat.

The file is read twice, streaming: the first pass infers each column's type, the second converts
and checks every row. A row that cannot be stored (no path, a value of another type, a ragged box
list, an integer beyond int64) becomes a `BadRow` naming its line, for the caller's error policy;
a file that cannot be a manifest (or a number column with a missing value) raises `SourceError`.

Typing rules that make the same table give the same rows in every format:
- A CSV/TSV cell is read as JSON would read it: an integer when it is written like a JSON
  integer (`-?(0|[1-9][0-9]*)`, so `007` stays text), a float when written like a JSON number
  with a fraction or exponent (`2.0` is a float, as `json` and `pyarrow` read it) or as Python's
  or JSON's nan/inf, a boolean for true/false (any case). A column with any other cell is text,
  and then every cell is its text (CSV cannot tell a number from text that looks like one).
- In JSONL and Parquet a column is typed by its values, not by the file's declared types. Where
  values of different kinds meet (text and numbers, scalars and lists, boxes of 4 and of 5
  values), the column takes the kind most rows hold and the other rows are bad rows.
- Missing values (an empty CSV cell, a JSON null or absent key, a Parquet null): text -> "",
  a list -> empty, a single label -> a bad row. A number column missing a value anywhere (or a
  Parquet number column with no value at all) is refused before any row is converted: no number
  is made up, and a column that is optional in the file does not silently drop the rows that
  leave it out (a scalar feature holds one value in every record; see shardpack.schema).
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import functools
import io
import itertools
import json
import operator
import os
import posixpath
import re
import struct
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import BinaryIO, NamedTuple

import numpy as np

from shardpack.errors import SourceError, shortened
from shardpack.schema import BUILTIN_NAMES, LABEL, Feature
from shardpack.storage import Blob, Storage, is_url, storage_at

SUFFIXES = (".csv", ".tsv", ".jsonl", ".parquet")
METADATA_FILES = ("metadata.csv", "metadata.jsonl", "metadata.parquet")  # Hugging Face ImageFolder
PATH_COLUMNS = ("path", "image", "file", "file_name", "filename")
SPLIT = "split"

# A JSONL or CSV line longer than this is not a manifest row: COCO's most crowded image (~90
# boxes) is ~4 KB as JSON; a long caption ~2 KB. The bound keeps a file without newlines (a
# binary renamed .jsonl) from being read into memory whole.
MAX_LINE_BYTES = 1 << 20
# A text value longer than this (a path, a caption, a class name) is a bad row. It equals the
# csv module's own field limit, so a CSV cell beyond it stops the read as a malformed file.
MAX_TEXT_CHARS = 131_072
# Parquet is read one row group at a time; refuse a row group that would take more memory than
# any sane manifest needs at once (pyarrow writes up to 1M rows a group by default; the 1M-row
# table of benchmarks/manifest_scale.py is 67 MB uncompressed).
MAX_ROW_GROUP_BYTES = 1 << 30
# Rows read and typed a column at a time (a Parquet batch; CSV/JSONL lines): C-speed checks
# over a column in place of Python code per cell, and a bounded transient per chunk.
CHUNK_ROWS = 16_384
READ_BYTES = 1 << 20  # CSV/JSONL are read and decoded this much (and the rest of a line) at once

_INT64 = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_F32 = struct.Struct("<f")
# JSON's number grammar: the rule a CSV cell is typed by, so that CSV and JSONL agree.
_CSV_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_CSV_FLOAT = re.compile(
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z|-?(?:nan|inf|infinity)\Z", re.I
)
_CSV_BOOLS = {"true": True, "false": False}
# The same spellings over a whole column of cells joined by newlines (_joined): a column all of
# one kind is typed and converted by one regex and C conversions. An integer here has at most
# 18 digits, so it is always within int64; longer ones take the cell-by-cell way.
_INT_CELL = r"-?(?:0|[1-9][0-9]{0,17})"
_FLOAT_CELL = (
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)|-?(?:nan|inf|infinity)"
)
_INTS = re.compile(rf"{_INT_CELL}(?:\n{_INT_CELL})*")
_INTS_OR_EMPTY = re.compile(rf"(?:{_INT_CELL})?(?:\n(?:{_INT_CELL})?)*")
_FLOATS_OR_EMPTY = re.compile(rf"(?:{_FLOAT_CELL})?(?:\n(?:{_FLOAT_CELL})?)*", re.I)
_NUMBER = rf"{_INT_CELL}|{_FLOAT_CELL}"
_NUMBERS = re.compile(rf"(?:{_NUMBER})(?:\n(?:{_NUMBER}))*", re.I)
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+\Z")  # shard file names are {name}-{split}.tfrecord-...


@dataclasses.dataclass(frozen=True)
class LabelInfo:
    """What the `label` column holds, for mapping labels to class indices."""

    kind: str  # "names" (class names as text) or "integers"
    multi: bool  # each row holds a list of labels (possibly empty)
    values: tuple  # sorted distinct labels over the good rows: str names or int values


class Row(NamedTuple):
    """One good row. A NamedTuple, not a dataclass: a million of them must stay small."""

    line: int  # CSV/JSONL line (1 = first line) or Parquet row (0 = first row)
    # the image path or URL as written (normalized); relative ones are under Manifest.root
    path: str
    label: str | int | tuple | None  # a name or integer; a tuple of them if multi; None: unlabeled
    split: str | None  # None when the manifest has no split column
    values: tuple  # one per Manifest.columns, in that order (int, float, str, tuple, ndarray)


class BadRow(NamedTuple):
    """A row that cannot be stored, where it is and why."""

    line: int
    path: str  # "" when the row has no usable path
    where: str  # the row, as messages name it (line_name)
    why: str

    @property
    def reason(self) -> str:
        """Why, naming the row: "labels.csv line 7: ..."."""
        return f"{self.where}: {self.why}"


def line_name(path: str, line: int) -> str:
    """How messages name a manifest's line: "labels.csv line 7", lines counted from 1 as editors
    show them; a Parquet file's row: "shots.parquet row 0", counted from 0 as pandas and pyarrow
    index rows."""
    return f"{os.path.basename(path)} {_unit(path)} {line}"


def _unit(path: str) -> str:
    """What a manifest's rows are called in messages: a Parquet file's rows, others' lines."""
    return "row" if path.lower().endswith(".parquet") else "line"


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

    def fields(self, row: Row) -> dict[str, object]:
        """A row's extra values by column name."""
        return dict(zip(self.columns, row.values, strict=True))


def manifest_file(
    src: Storage | str | os.PathLike, storage_options: Mapping[str, object] | None = None
) -> Storage | None:
    """The manifest SRC is (a .csv/.tsv/.jsonl/.parquet file) or holds (metadata.*): a Storage
    rooted at that file (read it as read("") or open("")); None when there is none.

    Raises:
        SourceError: SRC is a file of another kind, or a folder holding several metadata files.
        StorageError: a URL's filesystem package is missing.
    """
    src = storage_at(src, storage_options)
    if src.kind() == "dir":
        found = [n for n in METADATA_FILES if _present(src, n)]
        if len(found) > 1:
            raise SourceError(
                f"{src.path()}: holds {' and '.join(found)}; keep one metadata file, or pass "
                "the one to pack as SRC"
            )
        return src.child(found[0]) if found else None
    if not _present(src):
        return None
    if not src.path().lower().endswith(SUFFIXES):
        raise SourceError(
            f"{src.path()}: is a file of unknown kind; pass a folder of images, or a manifest "
            f"ending in {', '.join(SUFFIXES)}"
        )
    return src


def _present(src: Storage, name: str = "") -> bool:
    """Whether something is at `name`; on a disk a link counts unfollowed (kind() follows it),
    so that reading it refuses it by name, not as a missing file."""
    if (path := src.local_path(name)) is not None:
        return os.path.lexists(path)
    return src.kind(name) is not None


def read_manifest(
    src: Storage | str | os.PathLike,
    *,
    path_column: str | None = None,
    root: str | os.PathLike | None = None,
    storage_options: Mapping[str, object] | None = None,
    classes_pinned: bool = False,
) -> Manifest:
    """Read a manifest: infer each column's type, then check and convert every row.

    Args:
        src: a .csv, .tsv, .jsonl or .parquet file, or a folder holding one metadata file: a
            local path, a URL, or a Storage rooted at either.
        path_column: the column naming each image; None finds the one of PATH_COLUMNS present.
        root: the folder (a path or URL) relative image paths are under; None: the
            manifest's folder.
        storage_options: options for the filesystem of a URL `src`.
        classes_pinned: whether --classes gives the class list (a warning then says so).

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
    with _open(table) as f:
        chunks = list(_chunks(path, suffix, f))
    layout = _Layout.of(path, _names(chunks, path), path_column)
    typed = (*layout.extras, LABEL) if layout.labelled else layout.extras
    counts = _survey(chunks, typed, csv_text)
    columns = {n: _infer(counts[n], csv_text) for n in layout.extras}
    _check_filled(path, chunks, columns, counts)
    label = _infer_label(counts[LABEL], csv_text) if layout.labelled else None
    base = os.path.dirname(path) if root is None else os.fspath(root)  # a URL's too
    base = base if is_url(base) else os.path.abspath(base)
    rows, bad, label_values = _convert(chunks, path, base, layout, columns, label, csv_text)
    return Manifest(
        path=path,
        root=base,
        path_column=layout.path,
        columns=columns,
        label=None if label is None else dataclasses.replace(label, values=label_values),
        has_split=layout.has_split,
        rows=rows,
        bad=bad,
        warnings=(
            _numbers_as_names(path, label_values, classes_pinned) if csv_text and label else ()
        ),
    )


def _numbers_as_names(path: str, labels: tuple, classes_pinned: bool) -> tuple[str, ...]:
    """A warning when a CSV label column of mostly integers reads as class names: one cell
    that is not an integer makes every label a name (sorted as text, "10" before "2", or looked
    up by name in --classes), which silently changes what each number means. `labels` are the
    distinct labels, so "most" counts distinct values."""
    names = [v for v in labels if isinstance(v, str)]
    numbers = sum(1 for v in names if _CSV_INT.match(v))
    other = next((v for v in names if not _CSV_INT.match(v)), None)
    if other is None or numbers <= len(names) - numbers:
        return ()
    order = "each looked up by name in --classes" if classes_pinned else "sorted as text"
    return (f"{os.path.basename(path)}: its label column reads as class names, as "
            f"{_describe(other)} is not an integer: its {numbers} distinct integer labels are "
            f"names too ({order}); if they are class numbers, fix the other labels",)  # fmt: skip


def _check_filled(
    path: str, chunks: list[_Chunk], columns: dict[str, Feature], counts: dict[str, Counter]
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
        unit = _unit(path)
        more = f" and {missing - 1} more {unit}s" if missing > 1 else ""
        raise SourceError(
            f"{path}: column {name!r} has no value on {unit} {first}{more}; a column of "
            "numbers (or true/false) needs one in every row: fill it in, or drop the column"
        )


def _missing_lines(chunks: list[_Chunk], name: str) -> Iterator[int]:
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


def _open(table: Storage) -> BinaryIO:
    """Open a manifest for reading without following a link; refuse anything but a file."""
    path = table.path()
    try:
        blob = table.open("")  # a disk's: O_NOFOLLOW, and O_NONBLOCK so a FIFO never blocks
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SourceError(
                f"{path}: is a symbolic link; shardpack does not follow links it did not make: "
                "pass the file it points to"
            ) from None
        if e.errno == errno.EINVAL:
            raise SourceError(f"{path}: is not a regular file; pass a manifest file") from None
        why = e.strerror or e
        raise SourceError(f"{path}: cannot open ({why}); check its permissions") from None
    return io.BufferedReader(_BlobFile(blob), READ_BYTES)


class _BlobFile(io.RawIOBase):
    """A Blob as a file object (read, readline, seek) for the CSV/JSON readers and pyarrow."""

    def __init__(self, blob: Blob) -> None:
        self.blob, self.at = blob, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.blob.pread(len(buffer), self.at)
        buffer[: len(data)] = data
        self.at += len(data)
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self.at = offset + (0, self.at, self.blob.size)[whence]
        return self.at

    def tell(self) -> int:
        return self.at

    def close(self) -> None:
        if not self.closed:
            self.blob.close()
        super().close()


class _Chunk(NamedTuple):
    """Up to CHUNK_ROWS consecutive rows of the file, held as columns of their raw values."""

    lines: list[int]  # each row's line (CSV/JSONL, 1 = first) or row (Parquet, 0 = first)
    columns: dict[str, Sequence]  # name -> the rows' values (None where a JSONL key is absent)
    problems: list[tuple[int, str]]  # (line, why) of the lines that are not rows
    numbers: frozenset[str] = frozenset()  # Parquet: the columns the file types as numbers


def _chunks(path: str, suffix: str, f: BinaryIO) -> Iterator[_Chunk]:
    """The file's rows, read once from the start, a chunk at a time."""
    if suffix == "parquet":
        return _parquet_chunks(path, f)
    if suffix == "jsonl":
        return _jsonl_chunks(path, f)
    return _csv_chunks(path, f, "\t" if suffix == "tsv" else ",")


def _lines(path: str, f: BinaryIO) -> Iterator[str]:
    """The file's lines as text (split at "\\n" only, as readline does), each bounded and
    checked to be UTF-8; read and decoded a block of whole lines at a time."""
    return itertools.chain.from_iterable(_blocks(path, f))


def _blocks(path: str, f: BinaryIO) -> Iterator[list[str]]:
    n = 0  # lines before this block
    while block := f.read(READ_BYTES):
        if not block.endswith(b"\n"):
            block += f.readline(MAX_LINE_BYTES + 1)  # the rest of the last line, bounded
        parts = block.split(b"\n")
        # Every part but the last ended in "\n", which counts towards the line's bytes.
        if max(map(len, parts)) >= MAX_LINE_BYTES:
            sizes = [len(p) + 1 for p in parts[:-1]] + [len(parts[-1])]
            long = next((i for i, size in enumerate(sizes) if size > MAX_LINE_BYTES), None)
            if long is not None:
                raise SourceError(
                    f"{path} line {n + long + 1}: longer than {MAX_LINE_BYTES} bytes; a "
                    "manifest row is far shorter: is this really a manifest?"
                )
        try:
            text = block.decode("utf-8")
        except UnicodeDecodeError as e:
            line = n + block.count(b"\n", 0, e.start) + 1
            start = block.rfind(b"\n", 0, e.start) + 1
            raise SourceError(
                f"{path} line {line}: not UTF-8 text (byte {e.start - start + 1} of the line); "
                "save the manifest as UTF-8"
            ) from None
        if not n:
            text = text.removeprefix("\ufeff")  # a BOM, as Excel writes
        lines = text.split("\n")
        last = lines.pop()  # "" when the block ends with a newline
        lines = [line + "\n" for line in lines]
        if last:
            lines.append(last)
        n += len(lines)
        yield lines


def _csv_chunks(path: str, f: BinaryIO, delimiter: str) -> Iterator[_Chunk]:
    ended: list[bool] = []  # set once the reader has taken the file's last line
    reader = csv.reader(_noting_end(_lines(path, f), ended), delimiter=delimiter)
    records = _csv_records(path, reader, ended)
    header = next(records, None)
    if header is None:
        raise SourceError(f"{path}: is empty; the first line must name the columns")
    _check_names(path, header)
    end = reader.line_num
    while batch := list(itertools.islice(records, CHUNK_ROWS)):
        before, end = end, reader.line_num
        if end - before == len(batch) and set(map(len, batch)) == {len(header)}:
            yield _csv_chunk(header, list(range(before + 1, end + 1)), batch, [])
        else:  # blank lines, quoted newlines or rows of another width among them
            yield _csv_uneven(header, before, batch)


def _noting_end(lines: Iterator[str], ended: list[bool]) -> Iterator[str]:
    yield from lines
    ended.append(True)


def _csv_records(path: str, reader, ended: list[bool]) -> Iterator[list[str]]:
    """The reader's records. The csv module reads a quote that is never closed as a cell
    holding the rest of the file (to the end, or until the cell passes its size limit): either
    is one error naming the line the quote opens on, not rows cut short or "no rows"."""
    before = 0  # the line the last record ended on
    try:
        for cells in reader:
            if ended:  # the file ran out inside this record: its last cell's quote is open
                opens = before + 1 + sum(cell.count("\n") for cell in cells[:-1])
                raise SourceError(
                    f"{path} line {opens}: a quote opens here and is never closed, so the "
                    "rest of the file reads as one cell; close it (a quote inside a quoted "
                    'cell is written "")'
                )
            before = reader.line_num
            yield cells
    except csv.Error as e:
        if "field limit" not in str(e):
            raise SourceError(
                f"{path} line {reader.line_num}: malformed CSV ({e}); check its quoting"
            ) from None
        raise SourceError(
            f"{path} line {before + 1}: malformed CSV (a cell of the row on this line runs past "
            f"{MAX_TEXT_CHARS} characters, to line {reader.line_num}); check its quoting: is a "
            "quote never closed?"
        ) from None


def _csv_uneven(header: list[str], before: int, records: list[list[str]]) -> _Chunk:
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


def _csv_chunk(header: list[str], lines: list[int], rows: list[list[str]], problems) -> _Chunk:
    columns = dict(zip(header, zip(*rows, strict=True), strict=True)) if rows else {}
    return _Chunk(lines, columns, problems)


def _jsonl_chunks(path: str, f: BinaryIO) -> Iterator[_Chunk]:
    lines, records, problems = [], [], []
    n = 0
    for block in _blocks(path, f):
        for text in block:
            n += 1
            body = text.strip(_JSON_SPACE)
            try:  # json's C scanner as json.loads calls it, less its Python (1/3 of the time)
                record, end = _SCAN(body, 0)
            except (StopIteration, ValueError, RecursionError):
                record, end = None, -1
            if end != len(body) or type(record) is not dict:
                if not text.strip():
                    continue  # a blank line
                record = _json_line(text)
                if isinstance(record, str):  # a bad row, like any other: skipped or fatal
                    problems.append((n, record))
                    continue
            lines.append(n)
            records.append(record)
            if len(records) == CHUNK_ROWS:
                yield _jsonl_chunk(lines, records, problems)
                lines, records, problems = [], [], []
    yield _jsonl_chunk(lines, records, problems)


def _json_line(text: str) -> dict | str:
    """A line decoded as one JSON object, or why it is not one."""
    try:
        record = _JSON.decode(text)
    except (ValueError, RecursionError) as e:
        why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
        return f'not valid JSON ({why}); a line is one object like {{"file_name": "a.jpg"}}'
    if not isinstance(record, dict):
        return f'holds a JSON {type(record).__name__}, not an object like {{"file_name": "a.jpg"}}'
    return record


def _jsonl_chunk(lines: list[int], records: list[dict], problems: list[tuple[int, str]]) -> _Chunk:
    """Records as columns: every key any of them has, in order of first appearance."""
    names = dict.fromkeys(k for keys in dict.fromkeys(map(tuple, records)) for k in keys)
    columns = {n: list(map(dict.get, records, itertools.repeat(n))) for n in names}
    return _Chunk(lines, columns, problems)


class _HugeInt(int):
    """An integer literal too long for int64, kept as a marker (by _JSON: see _SCAN)."""


def _json_int(text: str) -> int:
    return int(text) if len(text) <= 20 else _HugeInt(0)


_JSON = json.JSONDecoder(parse_int=_json_int)
# Integers parsed in C: Python refuses a literal of over 4,300 digits (so none takes long),
# and then _json_line reads the line again with _JSON, which marks it a _HugeInt.
_SCAN = json.JSONDecoder().scan_once
_JSON_SPACE = " \t\n\r"  # the whitespace JSON allows around a value


def _parquet_chunks(path: str, f: BinaryIO) -> Iterator[_Chunk]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SourceError(
            f"{path}: reading Parquet needs pyarrow: pip install shardpack[parquet]"
        ) from None
    try:
        parquet = pq.ParquetFile(f)
        names = parquet.schema_arrow.names
        _check_names(path, names)
        for field in parquet.schema_arrow:
            if not _arrow_supported(field.type):
                raise SourceError(
                    f"{path}: column {field.name!r} is of Parquet type {field.type}; shardpack "
                    "reads numbers, booleans, strings and (nested) lists of them: convert it "
                    "or drop the column"
                )
        for i in range(parquet.num_row_groups):
            size = parquet.metadata.row_group(i).total_byte_size
            if size > MAX_ROW_GROUP_BYTES:
                raise SourceError(
                    f"{path}: row group {i} holds {size} bytes (over {MAX_ROW_GROUP_BYTES}); "
                    "rewrite it with smaller row groups (pyarrow: row_group_size=100_000)"
                )
        numbers = frozenset(f.name for f in parquet.schema_arrow if _arrow_number(f.type))
        row = 0
        for batch in parquet.iter_batches(batch_size=CHUNK_ROWS):
            columns = dict(zip(names, (c.to_pylist() for c in batch.columns), strict=True))
            yield _Chunk(list(range(row, row + batch.num_rows)), columns, [], numbers)
            row += batch.num_rows
        # Arrow's allocator keeps the pages it freed; hand them back before the packer forks.
        pa.default_memory_pool().release_unused()
    except SourceError:
        raise
    except Exception as e:  # pyarrow raises several types on a damaged file; one to the user
        raise SourceError(f"{path}: not a readable Parquet file ({e})") from None


def _arrow_number(t) -> bool:
    """Whether a Parquet column's type is a number or boolean (a scalar, not a list)."""
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _arrow_number(t.value_type)
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def _arrow_supported(t) -> bool:
    import pyarrow as pa

    if pa.types.is_dictionary(t):
        return _arrow_supported(t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _arrow_supported(t.value_type)
    return any(
        check(t)
        for check in (
            pa.types.is_integer,
            pa.types.is_floating,
            pa.types.is_boolean,
            pa.types.is_string,
            pa.types.is_large_string,
            pa.types.is_null,
        )
    )


def _check_names(path: str, names: list[str]) -> None:
    if "" in names or len(set(names)) != len(names):
        raise SourceError(
            f"{path}: the columns {names!r} include an empty or repeated name; give every "
            "column its own name"
        )


# ---- which column is what --------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Layout:
    path: str
    labelled: bool
    has_split: bool
    extras: tuple[str, ...]  # sorted

    @classmethod
    def of(cls, manifest: str, names: list[str], path_column: str | None) -> _Layout:
        _check_names(manifest, names)  # JSONL's keys: CSV and Parquet headers are checked first
        found = ", ".join(names) or "none"
        if path_column is not None:
            if path_column not in names:
                raise SourceError(
                    f"{manifest}: has no column {path_column!r} (columns: {found}); pass the "
                    "column that names each image as --path-column"
                )
        else:
            candidates = [n for n in PATH_COLUMNS if n in names]
            if len(candidates) != 1:
                which = "no image column" if not candidates else "several image columns"
                raise SourceError(
                    f"{manifest}: {which} (columns: {found}); name the column of image paths "
                    f"one of {', '.join(PATH_COLUMNS)}, or pass it as --path-column"
                )
            path_column = candidates[0]
        extras = tuple(sorted(n for n in names if n not in (path_column, LABEL, SPLIT)))
        for name in extras:
            if name in BUILTIN_NAMES:
                raise SourceError(
                    f"{manifest}: column {name!r} has the name of a built-in feature "
                    f"({', '.join(BUILTIN_NAMES)}); rename the column"
                )
        return cls(path_column, LABEL in names, SPLIT in names, extras)


def _names(chunks: list[_Chunk], path: str) -> list[str]:
    """The column names in order of first appearance (in JSONL a key may first come late)."""
    names: dict[str, None] = {}
    for chunk in chunks:
        if chunk.lines:
            names.update(dict.fromkeys(chunk.columns))
    if not names:
        raise SourceError(f"{path}: holds no rows; add one row per image")
    return list(names)


def _survey(chunks: list[_Chunk], names: tuple[str, ...], csv_text: bool) -> dict[str, Counter]:
    """First step: the kinds of values in each named column, counted over every chunk."""
    counts = {name: Counter() for name in names}
    for chunk in chunks:
        for name in names:
            values = chunk.columns.get(name)
            if values:
                counts[name].update(_column_kinds(values, csv_text))
            elif chunk.lines:  # no record of this chunk has the key (JSONL): missing in each
                counts[name][None] += len(chunk.lines)
    return counts


def _column_kinds(values: Sequence, csv_text: bool) -> Counter:
    """The kinds of a column's values, counted; at C speed where all are of one kind.

    In CSV one text cell makes the column text (_majority, _infer_label), so counting stops there.
    """
    counts = _uniform_kinds(values, csv_text)
    if counts is not None:
        return counts
    counts = Counter()
    for value in values:
        kind = _kind(value, csv_text)
        if csv_text and kind == "text":
            return Counter(text=1)
        counts[kind] += 1
    return counts


def _uniform_kinds(values: Sequence, csv_text: bool) -> Counter | None:
    """The counts of a column all of one kind (or missing), checked a column at a time; or None."""
    n = len(values)
    if csv_text:
        joined = _joined(values)
        if joined is None:
            return None
        empty = values.count("")
        if _INTS_OR_EMPTY.fullmatch(joined):
            return _counted("int", n - empty, empty)
        if _FLOATS_OR_EMPTY.fullmatch(joined):
            floats = list(map(float, filter(None, values)))
            return _counted("float", n - empty, empty) if _float32s(floats) is not None else None
        return None
    types = set(map(type, values))
    if types == {str}:
        empty = values.count("")
        return _counted("text", n - empty, empty) if _short(values) else None
    if types == {int}:
        return Counter(int=n) if _INT64[0] <= min(values) and max(values) <= _INT64[1] else None
    if types == {bool}:
        return Counter(bool=n)
    if types == {float}:
        return Counter(float=n) if _float32s(values) is not None else None
    return None


def _counted(kind: str, n: int, missing: int) -> Counter:
    """Counts without zeros: a kind counted 0 times would still name a family in _majority."""
    return Counter({k: c for k, c in ((kind, n), (None, missing)) if c})


def _joined(cells: Sequence[str]) -> str | None:
    """CSV cells a line each, for one regex over the column; None if a cell spans lines."""
    joined = "\n".join(cells)
    return joined if joined.count("\n") == len(cells) - 1 else None


def _short(texts: Sequence[str]) -> bool:
    return max(map(len, texts), default=0) <= MAX_TEXT_CHARS


def _float32s(numbers: Sequence) -> list[float] | None:
    """Numbers rounded to float32 as Python floats (as _F32 rounds one); None if one is beyond
    float32's range (and not infinite: inf and nan are float32 values)."""
    array = np.array(numbers, dtype=np.float64)
    if np.any((np.abs(array) > _FLOAT32_MAX) & ~np.isinf(array)):
        return None
    return array.astype(np.float32).tolist()


# ---- kinds of values and column types --------------------------------------------------------
# A kind is None (missing), "bool", "int", "float", "text", ("list", elem) with elem one of
# bool/int/float/text/empty, ("grid", k, elem) for a list of k-long number lists, or
# ("bad", reason) for a value no column can hold.


def _kind(value, csv_text: bool):
    if value is None or value == "":
        return None
    if type(value) is not str:
        return _value_kind(value)
    if len(value) > MAX_TEXT_CHARS:
        return ("bad", f"a text of {len(value)} characters (over {MAX_TEXT_CHARS})")
    return _csv_kind(value) if csv_text else "text"


def _csv_kind(cell: str):
    """A CSV cell's kind by its spelling, in JSON's grammar (plus Python's nan/inf, True)."""
    if cell[0] in _NUMBER_STARTS:
        if _CSV_INT.match(cell):
            return "int" if len(cell) <= 20 and _INT64[0] <= int(cell) <= _INT64[1] else _HUGE
        if _CSV_FLOAT.match(cell):
            return _float_kind(float(cell))
    elif len(cell) <= 9:  # a word: only these few short ones are not text
        lowered = cell.lower()
        if lowered in _CSV_BOOLS:
            return "bool"
        if lowered in ("nan", "inf", "infinity"):
            return "float"
    return "text"


_NUMBER_STARTS = frozenset("-0123456789")


def _is_bad(kind) -> bool:
    return isinstance(kind, tuple) and kind[0] == "bad"


_HUGE = ("bad", "an integer beyond the int64 range")
_FLOAT_RANGE = ("bad", "a number beyond the float32 range")


def _float_kind(x: float):
    return "float" if not abs(x) > _FLOAT32_MAX or abs(x) == float("inf") else _FLOAT_RANGE


def _value_kind(value):
    """The kind of a JSON or Parquet value other than None and str."""
    t = type(value)
    if t is bool:
        return "bool"
    if t is int:
        return "int" if _INT64[0] <= value <= _INT64[1] else _HUGE
    if t is _HugeInt:
        return _HUGE
    if t is float:
        return _float_kind(value)
    if t is list:
        return _list_kind(value)
    return ("bad", "a JSON object" if t is dict else f"a {t.__name__}")


def _list_kind(values: list):
    if not values:
        return ("list", "empty")
    kinds = {_item_kind(v) for v in values}
    if len(kinds) == 1 or kinds <= _NUMBER_KINDS:
        elem = _join(kinds)
        if elem in _NUMBER_KINDS or elem == "text":
            return ("list", elem)
        if elem == "list":
            return _grid_kind(values)
    bad = next((k for k in kinds if _is_bad(k)), None)
    return bad or ("bad", "a list mixing " + " and ".join(sorted(map(str, kinds))))


def _item_kind(value):
    """The kind of one element of a list: a number, text, a (nested) list, or bad."""
    t = type(value)
    if t is list:
        return "list"
    if t is str:
        return "text" if len(value) <= MAX_TEXT_CHARS else _kind(value, csv_text=False)
    if value is None:
        return ("bad", "a list holding null")
    return _value_kind(value)  # a number, or bad (an object)


def _grid_kind(rows: list[list]):
    lengths = {len(r) for r in rows}
    if len(lengths) != 1 or 0 in lengths:
        return ("bad", f"a ragged list of lists (lengths {sorted(lengths)})")
    kinds = {_item_kind(v) for r in rows for v in r}
    if not kinds <= _NUMBER_KINDS:
        bad = next((k for k in kinds if _is_bad(k)), None)
        return bad or ("bad", "lists of lists holding other than numbers")
    return ("grid", lengths.pop(), _join(kinds))


_NUMBER_KINDS = frozenset({"bool", "int", "float"})


def _join(kinds: set) -> str:
    """Numbers widen (bool < int < float); any other set has one member, returned."""
    if kinds <= _NUMBER_KINDS:
        return "float" if "float" in kinds else "int" if "int" in kinds else "bool"
    return next(iter(kinds))


def _family(kind):
    """Kinds that a column of one type holds together: numbers, text, a list type, a k."""
    if kind in _NUMBER_KINDS:
        return "number"
    if kind == "text":
        return "text"
    if kind[0] == "list":
        return "text list" if kind[1] == "text" else "number list"
    return ("grid", kind[1])  # a "bad" kind never reaches here


_FAMILY_ORDER = {"number": 0, "text": 1, "number list": 2, "text list": 3}


def _majority(counts: Counter, csv_text: bool):
    """The family most values fall in (ties: the first in _FAMILY_ORDER, then smaller k).

    In CSV any cell is also text, so a column with one text cell is text.
    """
    families: Counter = Counter()
    for kind, n in counts.items():
        if kind is not None and not _is_bad(kind) and kind != ("list", "empty"):
            families[_family(kind)] += n
    if csv_text and "text" in families:
        return "text"
    if not families:
        return "number list" if counts[("list", "empty")] else "text"
    return min(
        families,
        key=lambda f: (-families[f], _FAMILY_ORDER.get(f, 4), f[1] if f[0] == "grid" else 0),
    )


def _elements(counts: Counter, family) -> set:
    """The element kinds of the family's values (numbers: the scalar kinds themselves)."""
    out = set()
    for kind in counts:
        if kind is None or _is_bad(kind) or kind == ("list", "empty"):
            continue
        if _family(kind) == family:
            out.add(kind if family == "number" else kind[-1])
    return out


def _infer(counts: Counter, csv_text: bool) -> Feature:
    """The type of an extra column (lists that are all empty: float32)."""
    family = _majority(counts, csv_text)
    if family == "text":
        return Feature("bytes", text=True)
    if family == "text list":
        return Feature("bytes", (-1,), text=True)
    elements = _elements(counts, family)
    dtype = "float32" if "float" in elements or not elements else "int64"
    if family == "number":
        return Feature(dtype)
    if family == "number list":
        return Feature(dtype, (-1,))
    return Feature(dtype, (-1, family[1]))


def _infer_label(counts: Counter, csv_text: bool) -> LabelInfo:
    """Single or multi label (the kind most rows hold), of class names or integers.

    In CSV a label spelled as anything but an integer makes the column's labels names.
    """
    scalars = sum(n for k, n in counts.items() if isinstance(k, str))
    lists = sum(n for k, n in counts.items() if isinstance(k, tuple) and k[0] == "list")
    multi = lists > scalars
    if multi:
        return _label_info(counts[("list", "int")] > counts[("list", "text")], multi)
    ints = counts["int"]
    names = sum(n for k, n in counts.items() if k in ("text", "float", "bool"))
    if csv_text:
        return _label_info(names == 0 and ints > 0, multi)
    return _label_info(ints > counts["text"], multi)


def _label_info(integers: bool, multi: bool) -> LabelInfo:
    return LabelInfo("integers" if integers else "names", multi, ())  # values: by _convert


# ---- second pass: converting rows ------------------------------------------------------------


def _convert(
    chunks: list[_Chunk],
    path: str,
    root: str,
    layout: _Layout,
    columns: dict[str, Feature],
    label: LabelInfo | None,
    csv_text: bool,
) -> tuple[list[Row], list[BadRow], tuple]:
    """Second step: each row checked and converted, or a BadRow; and the labels seen.

    Each chunk is converted a column at a time and then dropped, so the raw cells and the rows
    made of them are not all held at once. A row's reason is the first check it fails, in the
    order path, label, split, then the columns. `root`: the folder relative paths are under.
    """
    rows: list[Row] = []
    bad: list[BadRow] = []
    seen: dict[str, int] = {}  # the file (_file_keys) -> first line, to refuse one listed twice
    interned: dict[str, str] = {}  # labels of multi-label rows, shared by every row that holds them
    labels: set = set()
    unit = _unit(path)
    for at, chunk in enumerate(chunks):
        chunks[at] = None  # type: ignore[call-overload]  # its cells go once its rows are made
        bad.extend(BadRow(line, "", line_name(path, line), why) for line, why in chunk.problems)
        n = len(chunk.lines)
        if not n:
            continue
        raw = chunk.columns
        missing = [None] * n  # a column no record of this chunk has (JSONL)
        paths, failed = _image_paths(raw.get(layout.path, missing), layout.path)
        failures = [failed]
        values = [None] * n
        if label is not None:
            one = functools.partial(_label, label=label, csv_text=csv_text, interned=interned)
            values, failed = _each(raw.get(LABEL, missing), one, cached=not label.multi)
            failures.append(failed)
        splits = [None] * n
        if layout.has_split:
            splits, failed = _each(raw.get(SPLIT, missing), _split, cached=True)
            failures.append(failed)
        extras = []
        for column, feature in columns.items():
            converted, failed = _column_values(column, raw.get(column, missing), feature, csv_text)
            extras.append(converted)
            failures.append(failed)
        failed = {}
        for errors in reversed(failures):
            failed.update(errors)  # the earlier check's reason wins
        extra = zip(*extras, strict=True) if extras else itertools.repeat((), n)
        files = _file_keys(paths, root)
        if not failed and seen.keys().isdisjoint(files) and len(set(files)) == n:
            seen.update(zip(files, chunk.lines, strict=True))
            # tuple.__new__ makes each Row in C (Row(...) runs a Python __new__ per row).
            made = zip(chunk.lines, paths, values, splits, extra, strict=True)
            rows.extend(map(tuple.__new__, itertools.repeat(Row), made))
            good = values
        else:
            good = []
            for i, (line, image, file, value, split, fields) in enumerate(
                zip(chunk.lines, paths, files, values, splits, extra, strict=True)
            ):
                why = failed.get(i)
                if why is None and (first := seen.setdefault(file, line)) != line:
                    why = f"the same image as {unit} {first}"
                if why is None:
                    rows.append(Row(line, image, value, split, fields))
                    good.append(value)
                    continue
                shown = raw.get(layout.path, missing)[i]
                shown = shown if isinstance(shown, str) and len(shown) <= MAX_TEXT_CHARS else ""
                bad.append(BadRow(line, shown, line_name(path, line), why))
        if label is not None:
            labels.update(itertools.chain.from_iterable(good) if label.multi else good)
    bad.sort(key=operator.attrgetter("line"))  # the file's order: lines of rows and problems
    return rows, bad, tuple(sorted(labels))


def _each(values: Sequence, convert, cached: bool = False) -> tuple[list, dict[int, str]]:
    """convert(value) of each value, None where it raises _Bad; and row -> why for those.

    `cached`: once per distinct value (labels, splits: a few distinct values in a million
    rows), keyed by type too, since True == 1 == 1.0 but only 1 is an integer label.
    """
    out = None
    if cached:
        keys = list(zip(map(type, values), values, strict=True))
        try:
            done = {key: _attempt(convert, key[1]) for key in dict.fromkeys(keys)}
        except TypeError:  # a list among them: not hashable
            pass
        else:
            out = list(map(done.__getitem__, keys))
            if not any(type(result) is _Bad for result in done.values()):
                return out, {}
    if out is None:
        out = [_attempt(convert, value) for value in values]
    failed = {i: str(result) for i, result in enumerate(out) if type(result) is _Bad}
    for i in failed:
        out[i] = None
    return out, failed


def _attempt(convert, value):
    """convert(value), or the _Bad it raised."""
    try:
        return convert(value)
    except _Bad as e:
        return e


def _image_paths(values: Sequence, column: str) -> tuple[list[str], dict[int, str]]:
    """_image_path of each value; text columns of usable names are normalized at once."""
    usable = set(map(type, values)) == {str} and _short(values) and "" not in values
    joined = _joined(values) if usable else None
    if joined is not None and "\0" not in joined:
        lined = f"\n{joined}\n"
        if not any(part in lined for part in _NOT_NORMAL):
            return list(values), {}  # each as os.path.normpath gives it already
        return list(map(normal_path, values)), {}
    return _each(values, functools.partial(_image_path, column=column))


def _file_keys(paths: list, root: str) -> list:
    """Which file each normal path (or None) names, so that one image written two ways (a.jpg,
    ../src/a.jpg, /data/src/a.jpg) is found listed twice: its path relative to `root` where it
    is under it, as most rows write it (those are their own key), else absolute or a URL."""
    written = "\n" + "\n".join(p for p in paths if p is not None)
    if os.sep == "/" and not any(part in written for part in ("\n/", "\n..", "://")):
        return paths  # all relative, none climbing out of root
    return [None if p is None else _file_key(p, root) for p in paths]


def _file_key(path: str, root: str) -> str:
    if is_url(path):
        full = path
    elif is_url(root):
        full = path if os.path.isabs(path) else normal_path(f"{root.rstrip('/')}/{path}")
    else:
        full = os.path.normpath(os.path.join(root, path))  # an absolute path stays itself
    under = root.rstrip("/") + "/"
    return full[len(under) :] if full.startswith(under) else full


# What os.path.normpath changes in a path (each path between newlines): a path holding none of
# these is its own normal form.
_NOT_NORMAL = ("//", "/./", "/../", "\n./", "\n../", "/\n", "/.\n", "/..\n", "\n.\n", "\n..\n")


def _column_values(
    name: str, values: Sequence, feature: Feature, csv_text: bool
) -> tuple[list, dict[int, str]]:
    """An extra column's values converted to its type (None where bad), and row -> why."""
    uniform = _uniform_values(values, feature, csv_text)
    if uniform is not None:
        return uniform, {}
    return _each(values, functools.partial(_value, name, feature=feature, csv_text=csv_text))


def _uniform_values(values: Sequence, feature: Feature, csv_text: bool) -> list | None:
    """A scalar column whose every value fits its type, converted at once; else None."""
    if feature.shape:
        return None  # lists: value by value
    types = {str} if csv_text else set(map(type, values))
    if feature.text:
        return list(values) if types == {str} and _short(values) else None
    if csv_text:
        joined = _joined(values)
        if joined is None:
            return None
        if feature.dtype == "int64":
            return list(map(int, values)) if _INTS.fullmatch(joined) else None
        return _float32s(list(map(float, values))) if _NUMBERS.fullmatch(joined) else None
    if not types <= ({int, bool} if feature.dtype == "int64" else {int, bool, float}):
        return None
    ints = [v for v in values if type(v) is int] if int in types else ()
    if ints and not (_INT64[0] <= min(ints) and max(ints) <= _INT64[1]):
        return None
    if feature.dtype == "int64":
        return list(map(int, values)) if bool in types else list(values)
    return _float32s(values)


class _Bad(Exception):
    """Why one row cannot be stored (caught per row; never leaves this module)."""


def _intern(table: dict, value):
    return table.setdefault(value, value) if isinstance(value, str) else value


def _image_path(value, column: str) -> str:
    if value is None or value == "":
        raise _Bad(f"no image path in column {column!r}")
    if not isinstance(value, str):
        raise _Bad(f"the image path in column {column!r} is {_describe(value)}, not text")
    if len(value) > MAX_TEXT_CHARS or "\0" in value:
        raise _Bad(f"the image path in column {column!r} is not a usable file name")
    return normal_path(value)


def normal_path(path: str) -> str:
    """A path in its normal form (os.path.normpath); a URL keeps its scheme's "//"."""
    if "://" in path and is_url(path):
        scheme, _, rest = path.partition("://")
        return f"{scheme}://{posixpath.normpath(rest)}"
    return os.path.normpath(path)


def _split(value) -> str:
    if value is None or value == "":
        raise _Bad("no split in column 'split'")
    if not isinstance(value, str) or not _SPLIT_NAME.match(value):
        raise _Bad(
            f"split {_describe(value)} is not a name of letters, digits and underscores "
            "(like train, validation, test)"
        )
    return value


def _label(value, label: LabelInfo, csv_text: bool, interned: dict[str, str]):
    if value is None or value == "":
        if label.multi:
            return ()
        raise _Bad("no label in column 'label'")
    if label.multi:
        if type(value) is not list:
            raise _Bad(f"label {_describe(value)} is not a list, as the column's other labels")
        return tuple(_intern(interned, _one_label(v, label, csv_text=False)) for v in value)
    return _one_label(value, label, csv_text)


def _one_label(value, label: LabelInfo, csv_text: bool):
    kind = _kind(value, csv_text)
    if _is_bad(kind):
        raise _Bad(f"column 'label' holds {kind[1]}")
    integers = label.kind == "integers"
    if integers and kind == "int":
        if int(value) < 0:
            raise _Bad(f"label {value} is negative; integer labels count classes from 0")
        return int(value)
    if not integers and (kind == "text" or (csv_text and kind is not None)):
        return value  # in CSV a cell spelled like a number is a name in a column of names
    want = "an integer" if integers else "a class name"
    raise _Bad(f"label {_describe(value)} is not {want}, as the column's other labels")


def _value(name: str, value, feature: Feature, csv_text: bool):
    """One extra value converted to the column's type, or _Bad."""
    if csv_text and feature.text and len(value) <= MAX_TEXT_CHARS:
        return value  # in CSV any cell is text (and an empty one "")
    kind = _kind(value, csv_text)
    if kind is None:
        if feature.text and not feature.shape:
            return ""
        if feature.shape:
            width = (0, feature.row) if feature.row else (0,)
            return () if feature.text else np.zeros(width, _NUMPY[feature.dtype])
        raise _Bad(f"no value in column {name!r}")  # a number: _check_filled refused the file
    if _is_bad(kind):
        raise _Bad(f"column {name!r} holds {kind[1]}")
    if not _fits(kind, feature):
        raise _Bad(
            f"column {name!r} holds {_describe_type(feature)}, got {_describe(value)}; "
            "fix the value or remove the row"
        )
    if feature.text:
        return value if not feature.shape else tuple(value)
    if not feature.shape:
        number = _csv_number(value) if csv_text else value
        return int(number) if feature.dtype == "int64" else _F32.unpack(_F32.pack(number))[0]
    array = np.array(value, dtype=_NUMPY[feature.dtype])
    return array.reshape(0, feature.row) if feature.row and not array.size else array


_NUMPY = {"int64": np.int64, "float32": np.float32}


def _csv_number(cell: str) -> int | float:
    lowered = cell.lower()
    if lowered in _CSV_BOOLS:
        return int(_CSV_BOOLS[lowered])
    return int(cell) if _CSV_INT.match(cell) else float(cell)


def _fits(kind, feature: Feature) -> bool:
    if feature.text:
        return kind == ("text" if not feature.shape else ("list", "text")) or (
            feature.shape and kind == ("list", "empty")
        )
    allowed = _NUMBER_KINDS if feature.dtype == "float32" else {"bool", "int"}
    if not feature.shape:
        return kind in allowed
    if kind == ("list", "empty"):
        return True
    if feature.row:
        return kind[0] == "grid" and kind[1] == feature.row and kind[2] in allowed
    return kind[0] == "list" and kind[1] in allowed


def _describe_type(feature: Feature) -> str:
    what = "text" if feature.text else f"{feature.dtype} numbers"
    if feature.row:
        return f"lists of {feature.row}-number lists ({feature.dtype})"
    return f"lists of {what}" if feature.shape else what


def _describe(value) -> str:
    return shortened(repr(value))
