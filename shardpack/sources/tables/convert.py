"""The second pass: each row checked and converted to its columns' types, or a BadRow."""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
import os
import re
import struct
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from shardpack.errors import shortened
from shardpack.schema import INT64, Feature
from shardpack.sources.classlist import class_name
from shardpack.sources.tables.cells import (
    CSV_BOOLS,
    CSV_INT,
    INTS,
    MAX_TEXT_CHARS,
    NUMBERS,
    float32s,
    joined_cells,
    short,
)
from shardpack.sources.tables.chunks import Chunk
from shardpack.sources.tables.columns import SPLIT, Layout
from shardpack.sources.tables.files import line_name, row_unit
from shardpack.sources.tables.kinds import FLOAT, INT, TEXT, LabelInfo, fits, kind_of
from shardpack.storage.locations import (
    joined,
    location_said,
    normal,
    relative_to,
    unspaced_url,
)

_F32 = struct.Struct("<f")
_SPLIT_NAME = re.compile(r"[A-Za-z0-9_]+\Z")  # shard file names are {name}-{split}.tfrecord-...


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


def convert_rows(
    chunks: list[Chunk],
    path: str,
    root: str,
    layout: Layout,
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
    unit = row_unit(path)
    for at, chunk in enumerate(chunks):
        chunks[at] = None  # type: ignore[call-overload]  # its cells go once its rows are made
        bad.extend(BadRow(line, "", line_name(path, line), why) for line, why in chunk.problems)
        n = len(chunk.lines)
        if not n:
            continue
        raw = chunk.columns
        missing = [None] * n  # a column no record of this chunk has (JSONL)
        paths, failed = _image_paths(_suffixed(raw.get(layout.path, missing), layout.suffix),
                                     layout.path)  # fmt: skip
        failures = [failed]
        values = [None] * n
        if label is not None:
            one = functools.partial(_label, label=label, csv_text=csv_text, interned=interned)
            values, failed = _each(raw.get(label.column, missing), one, cached=not label.multi)
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
                    why = f"the same image as {unit} {first}{_labelled(rows, first, value)}"
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


def _labelled(rows: list[Row], first: int, label: object) -> str:
    """What a row repeating the image of the row at line `first` adds to "the same image as
    line N": where its label differs, both labels and how to keep both (rows: by line)."""
    there = rows[bisect.bisect_left(rows, first, key=operator.itemgetter(0))].label
    if label is None or there == label:
        return ""
    return (
        f", labelled {describe(there)} there and {describe(label)} here: for an image of "
        "several labels, one row with a list of them (JSONL or Parquet)"
    )


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
    usable = set(map(type, values)) == {str} and short(values) and "" not in values
    joined = joined_cells(values) if usable else None
    if joined is not None and "\0" not in joined:
        lined = f"\n{joined}\n"
        if _SPACED.search(lined):  # a cell spaced at either end: a URL there is stripped
            return _each(values, functools.partial(_image_path, column=column))
        if not any(part in lined for part in _NOT_NORMAL):
            return list(values), {}  # each as os.path.normpath gives it already
        return list(map(normal, values)), {}
    return _each(values, functools.partial(_image_path, column=column))


def _suffixed(values: Sequence, suffix: str) -> Sequence:
    """Each path cell with --path-suffix written after it (an empty or missing one as it is,
    refused as no path)."""
    if not suffix:
        return values
    return [v + suffix if isinstance(v, str) and v else v for v in values]


def _file_keys(paths: list, root: str) -> list:
    """Which file each normal path (or None) names, so that one image written two ways (a.jpg,
    ../src/a.jpg, /data/src/a.jpg) is found listed twice: its path relative to `root` where it
    is under it, as most rows write it (those are their own key), else absolute or a URL."""
    written = "\n" + "\n".join(p for p in paths if p is not None)
    if os.sep == "/" and not any(part in written for part in ("\n/", "\n..", "://")):
        return paths  # all relative, none climbing out of root
    return [None if p is None else _file_key(p, root) for p in paths]


def _file_key(path: str, root: str) -> str:
    return relative_to(joined(root, path), root)


# What os.path.normpath changes in a path (each path between newlines): a path holding none of
# these is its own normal form.
_NOT_NORMAL = ("//", "/./", "/../", "\n./", "\n../", "/\n", "/.\n", "/..\n", "\n.\n", "\n..\n")
# A cell (between newlines) that starts or ends with white space.
_SPACED = re.compile(r"\n[^\S\n]|[^\S\n]\n")


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
        return list(values) if types == {str} and short(values) else None
    if csv_text:
        joined = joined_cells(values)
        if joined is None:
            return None
        if feature.dtype == "int64":
            return list(map(int, values)) if INTS.fullmatch(joined) else None
        return float32s(list(map(float, values))) if NUMBERS.fullmatch(joined) else None
    if not types <= ({int, bool} if feature.dtype == "int64" else {int, bool, float}):
        return None
    ints = [v for v in values if type(v) is int] if int in types else ()
    if ints and not (INT64[0] <= min(ints) and max(ints) <= INT64[1]):
        return None
    if feature.dtype == "int64":
        return list(map(int, values)) if bool in types else list(values)
    return float32s(values)


class _Bad(Exception):
    """Why one row cannot be stored (caught per row; never leaves this module)."""


def _intern(table: dict, value):
    return table.setdefault(value, value) if isinstance(value, str) else value


def _image_path(value, column: str) -> str:
    if value is None or value == "":
        raise _Bad(f"no image path in column {column!r}")
    if not isinstance(value, str):
        raise _Bad(f"the image path in column {column!r} is {describe(value)}, not text")
    if len(value) > MAX_TEXT_CHARS or "\0" in value:
        why = "holds a NUL" if "\0" in value else f"is over {MAX_TEXT_CHARS:,} characters"
        raise _Bad(f"the image path in column {column!r} is not a usable "
                   f"{location_said(value)} (it {why})")  # fmt: skip
    return normal(unspaced_url(value))


def _split(value) -> str:
    if value is None or value == "":
        raise _Bad("no split in column 'split'")
    if not isinstance(value, str) or not _SPLIT_NAME.match(value):
        raise _Bad(
            f"split {describe(value)} is not a name of ASCII letters, digits and underscores "
            "(like train, validation, test)"
        )
    return value


def _label(value, label: LabelInfo, csv_text: bool, interned: dict[str, str]):
    if value is None or value == "":
        if label.multi:
            return ()
        raise _Bad(f"no label in column {label.column!r}")
    if label.multi:
        if type(value) is not list:
            raise _Bad(f"label {describe(value)} is not a list, as the column's other labels")
        return tuple(_intern(interned, _one_label(v, label, csv_text=False)) for v in value)
    return _one_label(value, label, csv_text)


def _one_label(value, label: LabelInfo, csv_text: bool):
    kind = kind_of(value, csv_text)
    if kind is not None and kind.bad:
        raise _Bad(f"column {label.column!r} holds {kind.why}")
    integers = label.kind == "integers"
    if integers and kind is INT:
        if int(value) < 0:
            raise _Bad(f"label {value} is negative; integer labels count classes from 0")
        return int(value)
    if not integers and (kind is TEXT or (csv_text and kind is not None)):
        if not (name := class_name(value)):  # in CSV a cell spelled like a number is a name
            raise _Bad(f"no label in column {label.column!r}")
        return name
    if kind is FLOAT:  # pandas' type for a column of integers with a gap
        raise _Bad(f"label {describe(value)} is a float, but a label is an integer (a class "
                   "number) or text (a class name): write it as one (pandas makes integers with "
                   "a gap floats: astype('Int64'))")  # fmt: skip
    want = "an integer" if integers else "a class name"
    raise _Bad(f"label {describe(value)} is not {want}, as the column's other labels")


def _value(name: str, value, feature: Feature, csv_text: bool):
    """One extra value converted to the column's type, or _Bad."""
    if csv_text and feature.text and len(value) <= MAX_TEXT_CHARS:
        return value  # in CSV any cell is text (and an empty one "")
    kind = kind_of(value, csv_text)
    if kind is None:
        if feature.text and not feature.shape:
            return ""
        if feature.shape:
            width = (0, feature.row) if feature.row else (0,)
            return () if feature.text else np.zeros(width, _NUMPY[feature.dtype])
        raise _Bad(f"no value in column {name!r}")  # a number: _check_filled refused the file
    if kind.bad:
        raise _Bad(f"column {name!r} holds {kind.why}")
    if not fits(kind, feature):
        raise _Bad(
            f"column {name!r} holds {_describe_type(feature)}, got {describe(value)}; "
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
    if lowered in CSV_BOOLS:
        return int(CSV_BOOLS[lowered])
    return int(cell) if CSV_INT.match(cell) else float(cell)


def _describe_type(feature: Feature) -> str:
    what = "text" if feature.text else f"{feature.dtype} numbers"
    if feature.row:
        return f"lists of {feature.row}-number lists ({feature.dtype})"
    return f"lists of {what}" if feature.shape else what


def describe(value) -> str:
    return shortened(repr(value))
