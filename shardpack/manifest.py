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
a file that cannot be a manifest raises `SourceError`.

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
  a list -> empty, a number or single label -> a bad row (no value is made up).
"""

from __future__ import annotations

import csv
import dataclasses
import errno
import json
import os
import re
import stat
import struct
from collections import Counter
from collections.abc import Iterator
from typing import BinaryIO, NamedTuple

import numpy as np

from shardpack.errors import SourceError
from shardpack.schema import BUILTIN_NAMES, LABEL, Feature

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
PARQUET_BATCH_ROWS = 16_384  # rows converted to Python objects at once: a bounded transient

_INT64 = (-(2**63), 2**63 - 1)
_FLOAT32_MAX = float(np.finfo(np.float32).max)
_F32 = struct.Struct("<f")
# JSON's number grammar: the rule a CSV cell is typed by, so that CSV and JSONL agree.
_CSV_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
_CSV_FLOAT = re.compile(
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z|-?(?:nan|inf|infinity)\Z", re.I
)
_CSV_BOOLS = {"true": True, "false": False}
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
    path: str  # the image path as written (normalized); relative ones are under Manifest.root
    label: str | int | tuple | None  # a name or integer; a tuple of them if multi; None: unlabeled
    split: str | None  # None when the manifest has no split column
    values: tuple  # one per Manifest.columns, in that order (int, float, str, tuple, ndarray)


class BadRow(NamedTuple):
    """A row that cannot be stored, and why (the reason names the manifest line or row)."""

    line: int
    path: str  # "" when the row has no usable path
    reason: str


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A manifest's rows with their typed columns."""

    path: str  # the manifest file
    root: str  # the folder relative image paths are under
    path_column: str
    columns: dict[str, Feature]  # the extra features, by name in sorted order
    label: LabelInfo | None  # None: no label column (an unlabeled dataset)
    has_split: bool
    rows: list[Row]
    bad: list[BadRow]  # in file order

    def fields(self, row: Row) -> dict[str, object]:
        """A row's extra values by column name."""
        return dict(zip(self.columns, row.values, strict=True))


def manifest_file(src: str | os.PathLike) -> str | None:
    """The manifest SRC is (a .csv/.tsv/.jsonl/.parquet file) or holds (metadata.*), else None.

    Raises:
        SourceError: SRC is a file of another kind, or a folder holding several metadata files.
    """
    src = os.path.abspath(os.fspath(src))
    if os.path.isdir(src):
        found = [n for n in METADATA_FILES if os.path.lexists(os.path.join(src, n))]
        if len(found) > 1:
            raise SourceError(
                f"{src}: holds {' and '.join(found)}; keep one metadata file, or pass the one "
                "to pack as SRC"
            )
        return os.path.join(src, found[0]) if found else None
    if os.path.lexists(src) and not src.lower().endswith(SUFFIXES):
        raise SourceError(
            f"{src}: is a file of unknown kind; pass a folder of images, or a manifest ending "
            f"in {', '.join(SUFFIXES)}"
        )
    return src if os.path.lexists(src) else None


def read_manifest(
    src: str | os.PathLike,
    *,
    path_column: str | None = None,
    root: str | os.PathLike | None = None,
) -> Manifest:
    """Read a manifest: infer each column's type, then check and convert every row.

    Args:
        src: a .csv, .tsv, .jsonl or .parquet file, or a folder holding one metadata file.
        path_column: the column naming each image; None finds the one of PATH_COLUMNS present.
        root: the folder relative image paths are under; None: the manifest's folder.

    Raises:
        SourceError: no manifest there, it cannot be read, is not UTF-8, has no image column,
            a column with a built-in feature's name, a malformed line, or no rows.
    """
    path = manifest_file(src)
    if path is None:
        raise SourceError(
            f"{os.path.abspath(os.fspath(src))}: no such manifest; pass a .csv, .tsv, .jsonl "
            f"or .parquet file, or a folder holding one of {', '.join(METADATA_FILES)}"
        )
    suffix = path.lower().rpartition(".")[2]
    csv_text = suffix in ("csv", "tsv")  # every value is a text cell, typed by its spelling
    with _open(path) as f:
        records = _reader(path, suffix, f)
        names, counts = _survey(records(), path, csv_text)
        layout = _Layout.of(path, names, path_column)
        columns = {n: _infer(counts[n], csv_text) for n in layout.extras}
        label = _infer_label(counts[LABEL], csv_text) if layout.labelled else None
        rows, bad, label_values = _convert(records(), path, layout, columns, label, csv_text)
    base = os.path.dirname(path) if root is None else os.fspath(root)
    return Manifest(
        path=path,
        root=os.path.abspath(base),
        path_column=layout.path,
        columns=columns,
        label=None if label is None else dataclasses.replace(label, values=label_values),
        has_split=layout.has_split,
        rows=rows,
        bad=bad,
    )


# ---- opening and records ---------------------------------------------------------------------


def _open(path: str) -> BinaryIO:
    """Open a manifest for reading without following a link; refuse anything but a file."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SourceError(
                f"{path}: is a symbolic link; shardpack does not follow links it did not make: "
                "pass the file it points to"
            ) from None
        raise SourceError(f"{path}: cannot open ({e.strerror}); check its permissions") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SourceError(f"{path}: is not a regular file; pass a manifest file")
    return os.fdopen(fd, "rb")


def _reader(path: str, suffix: str, f: BinaryIO):
    """A function that (re)reads the file from the start, yielding (line, record or problem)."""

    def records() -> Iterator[tuple[int, dict | str]]:
        f.seek(0)
        if suffix == "parquet":
            return _parquet_records(path, f)
        if suffix == "jsonl":
            return _jsonl_records(path, f)
        return _csv_records(path, f, "\t" if suffix == "tsv" else ",")

    return records


def _lines(path: str, f: BinaryIO) -> Iterator[str]:
    """The file's lines as text, each bounded and checked to be UTF-8."""
    n = 0
    while raw := f.readline(MAX_LINE_BYTES + 1):
        n += 1
        if len(raw) > MAX_LINE_BYTES:
            raise SourceError(
                f"{path} line {n}: longer than {MAX_LINE_BYTES} bytes; a manifest row is far "
                "shorter: is this really a manifest?"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise SourceError(
                f"{path} line {n}: not UTF-8 text (byte {e.start + 1} of the line); save the "
                "manifest as UTF-8"
            ) from None
        yield text.removeprefix("\ufeff") if n == 1 else text  # a BOM, as Excel writes


def _csv_records(path: str, f: BinaryIO, delimiter: str) -> Iterator[tuple[int, dict | str]]:
    reader = csv.reader(_lines(path, f), delimiter=delimiter)
    try:
        header = next(reader, None)
        if header is None:
            raise SourceError(f"{path}: is empty; the first line must name the columns")
        _check_names(path, header)
        end = reader.line_num
        for cells in reader:
            start, end = end + 1, reader.line_num
            if not cells:
                continue  # a blank line
            if len(cells) != len(header):
                yield start, f"has {len(cells)} cells, the header has {len(header)}"
            else:
                yield start, dict(zip(header, cells, strict=True))
    except csv.Error as e:
        raise SourceError(
            f"{path} line {reader.line_num}: malformed CSV ({e}); check its quoting"
        ) from None


def _jsonl_records(path: str, f: BinaryIO) -> Iterator[tuple[int, dict | str]]:
    for n, text in enumerate(_lines(path, f), 1):
        if not text.strip():
            continue
        try:
            record = _JSON.decode(text)
        except (ValueError, RecursionError) as e:
            why = e.msg if isinstance(e, json.JSONDecodeError) else "nested too deeply"
            raise SourceError(
                f"{path} line {n}: not valid JSON ({why}); each line must be one object like "
                '{"file_name": "a.jpg", "label": "cat"}'
            ) from None
        if not isinstance(record, dict):
            raise SourceError(
                f"{path} line {n}: holds a JSON {type(record).__name__}, not an object like "
                '{"file_name": "a.jpg", "label": "cat"}'
            )
        yield n, record


class _HugeInt(int):
    """An integer literal too long for int64, kept as a marker (parsing it could take seconds)."""


def _json_int(text: str) -> int:
    return int(text) if len(text) <= 20 else _HugeInt(0)


_JSON = json.JSONDecoder(parse_int=_json_int)


def _parquet_records(path: str, f: BinaryIO) -> Iterator[tuple[int, dict | str]]:
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
        row = 0
        for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS):
            for values in zip(*(c.to_pylist() for c in batch.columns), strict=True):
                yield row, dict(zip(names, values, strict=True))
                row += 1
        # Arrow's allocator keeps the pages it freed; hand them back before the packer forks.
        pa.default_memory_pool().release_unused()
    except SourceError:
        raise
    except Exception as e:  # pyarrow raises several types on a damaged file; one to the user
        raise SourceError(f"{path}: not a readable Parquet file ({e})") from None


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


def _survey(
    records: Iterator[tuple[int, dict | str]], path: str, csv_text: bool
) -> tuple[list[str], dict[str, Counter]]:
    """First pass: the column names in order of appearance, and the kinds of values in each."""
    counts: dict[str, Counter] = {}
    for _, record in records:
        if isinstance(record, str):
            continue
        for name, value in record.items():
            column = counts.get(name)
            if column is None:
                column = counts[name] = Counter()
            column[_kind(value, csv_text)] += 1
    if not counts:
        raise SourceError(f"{path}: holds no rows; add one row per image")
    return list(counts), counts


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
    records: Iterator[tuple[int, dict | str]],
    path: str,
    layout: _Layout,
    columns: dict[str, Feature],
    label: LabelInfo | None,
    csv_text: bool,
) -> tuple[list[Row], list[BadRow], tuple]:
    """Second pass: each row checked and converted, or a BadRow; and the labels seen."""
    rows: list[Row] = []
    bad: list[BadRow] = []
    seen: dict[str, int] = {}  # path -> first line, to refuse an image listed twice
    interned: dict[str, str] = {}  # split and class names, shared by every row that holds them
    labels: set = set()
    unit = "row" if path.lower().endswith(".parquet") else "line"
    name = os.path.basename(path)
    for line, record in records:
        if isinstance(record, str):
            bad.append(BadRow(line, "", f"{name} {unit} {line}: {record}"))
            continue
        try:
            image = _image_path(record.get(layout.path), layout.path)
            value = None if label is None else _label(record.get(LABEL), label, csv_text)
            split = _split(record.get(SPLIT)) if layout.has_split else None
            values = tuple(_value(c, record.get(c), f, csv_text) for c, f in columns.items())
            first = seen.setdefault(image, line)
            if first != line:
                raise _Bad(f"the same image as {unit} {first}")
        except _Bad as e:
            raw = record.get(layout.path)
            shown = raw if isinstance(raw, str) and len(raw) <= MAX_TEXT_CHARS else ""
            bad.append(BadRow(line, shown, f"{name} {unit} {line}: {e}"))
            continue
        if label is not None:
            if label.multi:
                value = tuple(_intern(interned, v) for v in value)
                labels.update(value)
            else:
                value = _intern(interned, value)
                labels.add(value)
        if split is not None:
            split = _intern(interned, split)
        rows.append(Row(line, image, value, split, values))
    return rows, bad, tuple(sorted(labels))


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
    return os.path.normpath(value)


def _split(value) -> str:
    if value is None or value == "":
        raise _Bad("no split in column 'split'")
    if not isinstance(value, str) or not _SPLIT_NAME.match(value):
        raise _Bad(
            f"split {_describe(value)} is not a name of letters, digits and underscores "
            "(like train, validation, test)"
        )
    return value


def _label(value, label: LabelInfo, csv_text: bool):
    if value is None or value == "":
        if label.multi:
            return ()
        raise _Bad("no label in column 'label'")
    if label.multi:
        if type(value) is not list:
            raise _Bad(f"label {_describe(value)} is not a list, as the column's other labels")
        return tuple(_one_label(v, label, csv_text=False) for v in value)
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
        raise _Bad(f"no value in column {name!r}")
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
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
