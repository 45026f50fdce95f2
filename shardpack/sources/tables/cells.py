"""How values are spelled and bounded: the rules CSV cells are typed by (JSON's number grammar),
whole-column patterns, and the int64/float32/text limits every format shares."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

# A text value longer than this (a path, a caption, a class name) is a bad row. It equals the
# csv module's own field limit: a CSV cell beyond it is read again on its own (one line) or,
# quoted over many lines, stops the read as a quote never closed.
MAX_TEXT_CHARS = 131_072
FLOAT32_MAX = float(np.finfo(np.float32).max)
# JSON's number grammar: the rule a CSV cell is typed by, so that CSV and JSONL agree.
CSV_INT = re.compile(r"-?(?:0|[1-9][0-9]*)\Z")
CSV_FLOAT = re.compile(
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?\Z|-?(?:nan|inf|infinity)\Z", re.I
)
CSV_BOOLS = {"true": True, "false": False}
# The same spellings over a whole column of cells joined by newlines (joined): a column all of
# one kind is typed and converted by one regex and C conversions. An integer here has at most
# 18 digits, so it is always within int64; longer ones take the cell-by-cell way.
_INT_CELL = r"-?(?:0|[1-9][0-9]{0,17})"
_FLOAT_CELL = (
    r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)|-?(?:nan|inf|infinity)"
)
INTS = re.compile(rf"{_INT_CELL}(?:\n{_INT_CELL})*")
INTS_OR_EMPTY = re.compile(rf"(?:{_INT_CELL})?(?:\n(?:{_INT_CELL})?)*")
FLOATS_OR_EMPTY = re.compile(rf"(?:{_FLOAT_CELL})?(?:\n(?:{_FLOAT_CELL})?)*", re.I)
_NUMBER = rf"{_INT_CELL}|{_FLOAT_CELL}"
NUMBERS = re.compile(rf"(?:{_NUMBER})(?:\n(?:{_NUMBER}))*", re.I)


class HugeInt(int):
    """An integer literal too long for int64, kept as a marker (by _JSON: see _SCAN)."""


def joined_cells(cells: Sequence[str]) -> str | None:
    """CSV cells a line each, for one regex over the column; None if a cell spans lines."""
    joined = "\n".join(cells)
    return joined if joined.count("\n") == len(cells) - 1 else None


def short(texts: Sequence[str]) -> bool:
    return max(map(len, texts), default=0) <= MAX_TEXT_CHARS


def float32s(numbers: Sequence) -> list[float] | None:
    """Numbers rounded to float32 as Python floats (as _F32 rounds one); None if one is beyond
    float32's range (and not infinite: inf and nan are float32 values)."""
    array = np.array(numbers, dtype=np.float64)
    if np.any((np.abs(array) > FLOAT32_MAX) & ~np.isinf(array)):
        return None
    return array.astype(np.float32).tolist()


# ---- kinds of values and column types --------------------------------------------------------
# A kind is None (missing), "bool", "int", "float", "text", ("list", elem) with elem one of
