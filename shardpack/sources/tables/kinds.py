"""Typing a column: the kind of each value (a Kind), counted over the file, decides its Feature."""

from __future__ import annotations

import dataclasses
import enum
import functools
from collections import Counter
from collections.abc import Sequence

from shardpack.schema import INT64, LABEL, MAX_ROW, Feature
from shardpack.sources.tables.cells import (
    CSV_BOOLS,
    CSV_FLOAT,
    CSV_INT,
    FLOAT32_MAX,
    FLOATS_OR_EMPTY,
    INTS_OR_EMPTY,
    MAX_TEXT_CHARS,
    HugeInt,
    float32s,
    joined_cells,
    short,
)
from shardpack.sources.tables.chunks import Chunk


class Shape(enum.Enum):
    """How a value is built: one value, a list, a list of k-long lists, or not storable."""

    SCALAR = "scalar"
    LIST = "list"
    GRID = "grid"  # a list of k-long number lists (boxes, keypoints)
    BAD = "bad"


@dataclasses.dataclass(frozen=True, eq=False, slots=True)
class Kind:
    """The kind of one value, as a column's survey counts it (None in a count: missing).

    Made once per kind (the constants below, _list_of; _grid_of and _bad keep the recent ones),
    so that kinds are compared and hashed by identity, in C: a survey hashes one per value and
    list element. Only scalars and lists are compared; grids and bad kinds by their fields.
    """

    shape: Shape
    # a scalar's, or a list's or grid's elements': "bool", "int", "float" or "text"; an empty
    # list's "empty"; "list" for a list met inside a list (_item_kind)
    elem: str = ""
    k: int = 0  # a grid's row length
    why: str = ""  # a bad value's description

    @property
    def bad(self) -> bool:
        return self.shape is Shape.BAD


BOOL, INT, FLOAT, TEXT = (Kind(Shape.SCALAR, elem) for elem in ("bool", "int", "float", "text"))
EMPTY_LIST = Kind(Shape.LIST, "empty")
_NESTED = Kind(Shape.LIST, "list")
_NUMBER_KINDS = frozenset({BOOL, INT, FLOAT})


@functools.cache
def _list_of(elem: str) -> Kind:
    return Kind(Shape.LIST, elem)


@functools.lru_cache(maxsize=1024)  # equal grids made apart still share a _Family
def _grid_of(elem: str, k: int) -> Kind:
    return Kind(Shape.GRID, elem, k)


@functools.lru_cache(maxsize=1024)  # reasons are few, but a hostile file could vary them
def _bad(why: str) -> Kind:
    return Kind(Shape.BAD, why=why)


@dataclasses.dataclass(frozen=True)
class LabelInfo:
    """What the column of labels holds, for mapping labels to class indices."""

    kind: str  # "names" (class names as text) or "integers"
    multi: bool  # each row holds a list of labels (possibly empty)
    values: tuple  # sorted distinct labels over the good rows: str names or int values
    column: str = LABEL  # its name: `label`, or --label-column's


def survey(chunks: list[Chunk], names: tuple[str, ...], csv_text: bool) -> dict[str, Counter]:
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

    In CSV one text cell makes the column text (_majority, infer_label), so counting stops there.
    """
    counts = _uniform_kinds(values, csv_text)
    if counts is not None:
        return counts
    counts = Counter()
    for value in values:
        kind = kind_of(value, csv_text)
        if csv_text and kind is TEXT:
            return Counter({TEXT: 1})
        counts[kind] += 1
    return counts


def _uniform_kinds(values: Sequence, csv_text: bool) -> Counter | None:
    """The counts of a column all of one kind (or missing), checked a column at a time; or None."""
    n = len(values)
    if csv_text:
        joined = joined_cells(values)
        if joined is None:
            return None
        empty = values.count("")
        if INTS_OR_EMPTY.fullmatch(joined):
            return _counted(INT, n - empty, empty)
        if FLOATS_OR_EMPTY.fullmatch(joined):
            floats = list(map(float, filter(None, values)))
            return _counted(FLOAT, n - empty, empty) if float32s(floats) is not None else None
        return None
    types = set(map(type, values))
    if types == {str}:
        empty = values.count("")
        return _counted(TEXT, n - empty, empty) if short(values) else None
    if types == {int}:
        return Counter({INT: n}) if INT64[0] <= min(values) and max(values) <= INT64[1] else None
    if types == {bool}:
        return Counter({BOOL: n})
    if types == {float}:
        return Counter({FLOAT: n}) if float32s(values) is not None else None
    return None


def _counted(kind: Kind, n: int, missing: int) -> Counter:
    """Counts without zeros: a kind counted 0 times would still name a family in _majority."""
    return Counter({k: c for k, c in ((kind, n), (None, missing)) if c})


def kind_of(value, csv_text: bool) -> Kind | None:
    """A value's kind; None when it is missing (None, or an empty CSV cell or string)."""
    if value is None or value == "":
        return None
    if type(value) is not str:
        return _value_kind(value)
    if len(value) > MAX_TEXT_CHARS:
        return _bad(f"a text of {len(value)} characters (over {MAX_TEXT_CHARS})")
    return _csv_kind(value) if csv_text else TEXT


def _csv_kind(cell: str) -> Kind:
    """A CSV cell's kind by its spelling, in JSON's grammar (plus Python's nan/inf, True)."""
    if cell[0] in _NUMBER_STARTS:
        if CSV_INT.match(cell):
            return INT if len(cell) <= 20 and INT64[0] <= int(cell) <= INT64[1] else _HUGE
        if CSV_FLOAT.match(cell):
            return _float_kind(float(cell))
    elif len(cell) <= 9:  # a word: only these few short ones are not text
        lowered = cell.lower()
        if lowered in CSV_BOOLS:
            return BOOL
        if lowered in ("nan", "inf", "infinity"):
            return FLOAT
    return TEXT


_NUMBER_STARTS = frozenset("-0123456789")
_HUGE = _bad("an integer beyond the int64 range")
_FLOAT_RANGE = _bad("a number beyond the float32 range")


def _float_kind(x: float) -> Kind:
    return FLOAT if not abs(x) > FLOAT32_MAX or abs(x) == float("inf") else _FLOAT_RANGE


def _value_kind(value) -> Kind:
    """The kind of a JSON or Parquet value other than None and str."""
    t = type(value)
    if t is bool:
        return BOOL
    if t is int:
        return INT if INT64[0] <= value <= INT64[1] else _HUGE
    if t is HugeInt:
        return _HUGE
    if t is float:
        return _float_kind(value)
    if t is list:
        return _list_kind(value)
    return _bad("a JSON object" if t is dict else f"a {t.__name__}")


def _list_kind(values: list) -> Kind:
    if not values:
        return EMPTY_LIST
    kinds = {_item_kind(v) for v in values}
    if len(kinds) == 1 or kinds <= _NUMBER_KINDS:
        elem = _join(kinds)
        if elem in _NUMBER_KINDS or elem is TEXT:
            return _list_of(elem.elem)
        if elem is _NESTED:
            return _grid_kind(values)
    bad = next((k for k in kinds if k.bad), None)
    return bad or _bad("a list mixing " + " and ".join(sorted(k.elem for k in kinds)))


def _item_kind(value) -> Kind:
    """The kind of one element of a list: a number, text, a (nested) list, or bad."""
    t = type(value)
    if t is list:
        return _NESTED
    if t is str:
        return TEXT if len(value) <= MAX_TEXT_CHARS else kind_of(value, csv_text=False)
    if value is None:
        return _bad("a list holding null")
    return _value_kind(value)  # a number, or bad (an object)


def _grid_kind(rows: list[list]) -> Kind:
    lengths = {len(r) for r in rows}
    if len(lengths) != 1 or 0 in lengths:
        return _bad(f"a ragged list of lists (lengths {sorted(lengths)})")
    width = lengths.pop()
    if width > MAX_ROW:  # the index would declare a shape its readers refuse; told before
        # the values are looked at, each of them (millions) in Python
        return _bad(f"rows of {width:,} values (over {MAX_ROW:,}); store each as one list")
    kinds = {_item_kind(v) for r in rows for v in r}
    if not kinds <= _NUMBER_KINDS:
        bad = next((k for k in kinds if k.bad), None)
        return bad or _bad("lists of lists holding other than numbers")
    return _grid_of(_join(kinds).elem, width)


def _join(kinds: set[Kind]) -> Kind:
    """Numbers widen (bool < int < float); any other set has one member, returned."""
    if kinds <= _NUMBER_KINDS:
        return FLOAT if FLOAT in kinds else INT if INT in kinds else BOOL
    return next(iter(kinds))


@dataclasses.dataclass(frozen=True)
class _Family:
    """Kinds that a column of one type holds together: numbers, text, a list type, k-long rows."""

    name: str  # "number", "text", "number list", "text list" or "grid"
    k: int = 0  # a grid's row length

    def order(self) -> tuple[int, int]:
        """Which family wins a tie: the first of _FAMILY_ORDER, then the smaller k."""
        return _FAMILY_ORDER.get(self.name, 4), self.k


_NUMBERS, _TEXT, _NUMBER_LIST, _TEXT_LIST = map(
    _Family, ("number", "text", "number list", "text list")
)
_FAMILY_ORDER = {"number": 0, "text": 1, "number list": 2, "text list": 3}


def _family(kind: Kind) -> _Family:
    if kind in _NUMBER_KINDS:
        return _NUMBERS
    if kind is TEXT:
        return _TEXT
    if kind.shape is Shape.LIST:
        return _TEXT_LIST if kind.elem == "text" else _NUMBER_LIST
    return _Family("grid", kind.k)  # a bad kind never reaches here


def _majority(counts: Counter, csv_text: bool) -> _Family:
    """The family most values fall in (ties: _Family.order).

    In CSV any cell is also text, so a column with one text cell is text.
    """
    families: Counter = Counter()
    for kind, n in counts.items():
        if kind is not None and not kind.bad and kind != EMPTY_LIST:
            families[_family(kind)] += n
    if csv_text and _TEXT in families:
        return _TEXT
    if not families:
        return _NUMBER_LIST if counts[EMPTY_LIST] else _TEXT
    return min(families, key=lambda f: (-families[f], *f.order()))


def _elements(counts: Counter, family: _Family) -> set[str]:
    """The element kinds of the family's values (numbers: the scalar kinds themselves)."""
    return {
        kind.elem
        for kind in counts
        if kind is not None and not kind.bad and kind != EMPTY_LIST and _family(kind) == family
    }


def infer(counts: Counter, csv_text: bool) -> Feature:
    """The type of an extra column (lists that are all empty: float32)."""
    family = _majority(counts, csv_text)
    if family == _TEXT:
        return Feature("bytes", text=True)
    if family == _TEXT_LIST:
        return Feature("bytes", (-1,), text=True)
    elements = _elements(counts, family)
    dtype = "float32" if "float" in elements or not elements else "int64"
    if family == _NUMBERS:
        return Feature(dtype)
    if family == _NUMBER_LIST:
        return Feature(dtype, (-1,))
    return Feature(dtype, (-1, family.k))


def infer_label(counts: Counter, csv_text: bool) -> LabelInfo:
    """Single or multi label (the kind most rows hold), of class names or integers.

    In CSV a label spelled as anything but an integer makes the column's labels names.
    """
    scalars = sum(n for k, n in counts.items() if k is not None and k.shape is Shape.SCALAR)
    lists = sum(n for k, n in counts.items() if k is not None and k.shape is Shape.LIST)
    multi = lists > scalars
    if multi:
        return _label_info(counts[_list_of("int")] > counts[_list_of("text")], multi)
    ints = counts[INT]
    names = sum(n for k, n in counts.items() if k in (TEXT, FLOAT, BOOL))
    if csv_text:
        return _label_info(names == 0 and ints > 0, multi)
    return _label_info(ints > counts[TEXT], multi)


def _label_info(integers: bool, multi: bool) -> LabelInfo:
    return LabelInfo("integers" if integers else "names", multi, ())  # values: by convert_rows


def fits(kind: Kind, feature: Feature) -> bool:
    """Whether a value of this kind can be stored as the feature."""
    if feature.text:
        return kind == (TEXT if not feature.shape else _list_of("text")) or bool(
            feature.shape and kind == EMPTY_LIST
        )
    allowed = ("bool", "int", "float") if feature.dtype == "float32" else ("bool", "int")
    if not feature.shape:
        return kind.shape is Shape.SCALAR and kind.elem in allowed
    if kind == EMPTY_LIST:
        return True
    if feature.row:
        return kind.shape is Shape.GRID and kind.k == feature.row and kind.elem in allowed
    return kind.shape is Shape.LIST and kind.elem in allowed
