"""Brace patterns (`shards-{000..009}.tar`, `part-{a,b}.parquet`) expanded as webdataset's
braceexpand expands them, counted before a name is made."""

from __future__ import annotations

import re
from collections.abc import Sequence

from shardpack.errors import SourceError

_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")
_CHOICES = re.compile(r"\{([^{}]*,[^{}]*)\}")
MAX_PATTERN_NAMES = 1_000_000
# A range bound longer than this is no file count (and int() refuses 4,300 digits with a trace).
_MAX_RANGE_DIGITS = 18


def has_braces(name: str) -> bool:
    """Whether a file name (a path's last part) holds a brace pattern: {a..b} or {x,y}."""
    return bool(_RANGE.search(name) or _CHOICES.search(name))


def expand(pattern: str, where: str, what: str, fix: str) -> list[str]:
    """A brace pattern's names, as webdataset's braceexpand gives them ({0..9}, {a,b}): counted
    first, so that {0..99999999999} is refused before a name is made. Errors name `where`, say
    the names are `what` ("tars") and end in `fix`."""
    count, name = 1, pattern
    while "{" in name and count <= MAX_PATTERN_NAMES:  # each brace multiplies the names
        found, values = _brace(name, where, fix)
        count *= len(values)
        name = name[: found.start()] + (values[0] if values else "") + name[found.end() :]
    if count > MAX_PATTERN_NAMES:
        raise SourceError(f"{where}: names over {MAX_PATTERN_NAMES:,} {what}; {fix}")
    names = [pattern]
    while any("{" in name for name in names):
        expanded = []
        for name in names:
            found, values = _brace(name, where, fix)
            expanded += [name[: found.start()] + v + name[found.end() :] for v in values]
            if len(expanded) > MAX_PATTERN_NAMES:
                raise SourceError(f"{where}: names over {MAX_PATTERN_NAMES:,} {what}; {fix}")
        names = expanded
    return names


def _brace(name: str, where: str, fix: str) -> tuple[re.Match, Sequence[str]]:
    """The first brace of `name` and its values (a range's made only as they are asked for)."""
    found = _RANGE.search(name)
    if found:
        first, last = found[1], found[2]
        if max(len(first), len(last)) > _MAX_RANGE_DIGITS:
            raise SourceError(f"{where}: a range bound of {max(len(first), len(last)):,} digits "
                              f"(at most {_MAX_RANGE_DIGITS}); {fix}")  # fmt: skip
        return found, _Range(int(first), int(last), len(first) if first.startswith("0") else 0)
    if found := _CHOICES.search(name):
        return found, found[1].split(",")
    raise SourceError(f"{where}: a brace that is not {{a..b}} or {{x,y}}; {fix}")


class _Range(Sequence[str]):
    """{first..last}'s names, zero-padded to `width`, made one at a time."""

    def __init__(self, first: int, last: int, width: int) -> None:
        self.numbers, self.width = range(first, last + 1), width

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, i: int) -> str:  # type: ignore[override]
        return f"{self.numbers[i]:0{self.width}d}"
