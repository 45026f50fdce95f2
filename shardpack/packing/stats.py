"""Per-split summaries of what the workers noted (facts.py) for index.json: sizes, bytes (the
source's and the stored image's, each with its total) and aspect ratios as min/median/max and
histograms, formats, channels, EXIF orientations and skip reasons as counts (and, of each
reason boxes were dropped for, the first records by key that lost them). Compact: a few
hundred numbers a split, whatever its size; and made from its records' rows a chunk at a time
(held, or spilled to a file: factspill.py), the same numbers as from every row at once, with no
array of every record."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

import numpy as np

from shardpack.contentsfile import DROPPED_IN, dropped_in
from shardpack.errors import shortened
from shardpack.index import MAX_SKIPPED_TEXT
from shardpack.packing.facts import FACT_DTYPE, MAX_NAMED_DROPS

# Bins of the histograms: few enough for the index, enough for a chart.
BINS = 20
SIZE_BINS = 16  # a side of the width x height histogram
# What a tally's names become in a summary.
_TALLIED = {"format": "formats", "channels": "channels", "orientation": "orientations"}
# What a grow counts the records of under each, where an older shardpack noted no tally.
UNTALLIED = "(not noted)"
SUMMED = np.dtype([("size", "<u8"), ("width", "<u4"), ("height", "<u4"), ("stored", "<u8")])


# A split's written records' rows (SUMMED), a chunk at a time, anew at each call: held
# tables, or a file the packing process spilled them to (factspill.py).
Rows = Callable[[], Iterator[np.ndarray]]


def entry_summaries(
    shards: dict[str, list[dict]], skipped: dict[str, list[str]], dropped: dict[str, int]
) -> dict[str, dict]:
    """index.json's `summaries` of a grown dataset (a fresh pack's: factspill.py), from the
    contents.json entries of each split's shards (contents.py), each split's skip reasons with
    no shard to note them, and `dropped`: each split's copies --dedup exact left out."""
    tables: dict[str, list[np.ndarray]] = {}
    tallies: dict[str, Tallies] = {}
    for split, entries in shards.items():
        tally = tallies.setdefault(split, Tallies())
        for entry in entries:
            rows = np.zeros(len(entry["keys"]), FACT_DTYPE)
            for field in SUMMED.names:
                rows[field] = entry[field]
            tables.setdefault(split, []).append(summed(rows))
            tally.add(_tally_of(entry), entry["reasons"])
    for split, reasons in skipped.items():
        tallies.setdefault(split, Tallies()).add((), reasons)
    return summaries({split: held(t) for split, t in tables.items()}, tallies, dropped)


def _tally_of(entry: dict) -> list:
    """An entry's tally; an older shardpack's entry holds none: its records counted UNTALLIED
    under each name (never the split's counts of its other records alone)."""
    n = len(entry["keys"])
    return entry["tally"] or [(what, UNTALLIED, n) for what in _TALLIED if n]


class Tallies:
    """A split's tallies, its shards' added as they land: counts by (what, value), and the
    records named of each reason boxes were dropped for (of those its shards name, the first
    MAX_NAMED_DROPS by key: facts.DROPPED_IN)."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self.dropped_in: dict[str, dict[str, int]] = {}  # reason -> key -> boxes

    def add(self, tally: Iterable, reasons: Iterable[str]) -> None:
        """Add a shard's tally (facts.ShardFacts.tally) and its skip reasons."""
        for what, value, n in tally:
            if what == DROPPED_IN:
                reason, key = dropped_in(value)
                _named_first(self.dropped_in.setdefault(reason, {}), key, n)
            else:
                self.counts[_TALLIED.get(what, what), value] += n
        self.counts.update(("skipped", reason_kind(reason)) for reason in reasons)

    def summary(self) -> dict[str, dict]:
        """The tallies as a summary holds them: {what: {value: count}}, and DROPPED_IN's
        {reason: {key: boxes}}, each sorted (each key cut to MAX_SKIPPED_TEXT characters)."""
        summary: dict[str, dict] = {}
        for (what, value), n in sorted(self.counts.items()):
            summary.setdefault(what, {})[value] = n
        if self.dropped_in:
            summary[DROPPED_IN] = {
                reason: {shortened(key, MAX_SKIPPED_TEXT): n for key, n in sorted(named.items())}
                for reason, named in sorted(self.dropped_in.items())
            }
        return summary


def _named_first(named: dict[str, int], key: str, n: int) -> None:
    """Add the `n` boxes `key` lost to `named` (key -> boxes), which keeps the MAX_NAMED_DROPS
    least keys."""
    named[key] = named.get(key, 0) + n
    if len(named) > MAX_NAMED_DROPS:
        del named[max(named)]


def held(tables: list[np.ndarray]) -> Rows:
    """Rows of tables held in memory, one chunk each."""
    return lambda: iter(tables)


def summaries(
    tables: dict[str, Rows], tallies: dict[str, Tallies], dropped: dict[str, int]
) -> dict[str, dict]:
    """Each split's summary of its records' rows and its tallies, with `dropped` duplicates."""
    for split, n in dropped.items():
        tallies.setdefault(split, Tallies()).counts["skipped", "duplicate"] += n
    return {split: {**_numbers(tables.get(split, held([]))), **tallies[split].summary()}
            for split in sorted(tallies)}  # fmt: skip


def summed(table: np.ndarray) -> np.ndarray:
    """The written records' rows of a facts table, the columns a summary reads alone (24 bytes
    a record, not 52: what a split's summary reads, or the packing process spills)."""
    written = table["size"] > 0
    rows = np.empty(int(np.count_nonzero(written)), SUMMED)
    for name in SUMMED.names:
        rows[name] = table[name][written]
    return rows


# Where a reason points in the file that listed the image (YOLO's `labels/a.txt line 2: `,
# VOC's `Annotations/a.xml object 0 (dog): `, a manifest's `labels.csv line 7: `, a Parquet
# file's `data/train-00000-of-00001.parquet row 3: `), a file's path (a word with a slash)
# and a value quoted as repr() quotes it ('x', not data.yaml's) within one. Patterns, compiled
# by re at the first skip: a pack that skips nothing never needs them.
_PLACE = r"^[^:]*? (?:line \d+|row \d+|object \d+(?: \([^)]*\))?): "
_PATH = r"(?<!\S)[^\s<>]*/[^\s<>]*"
# An image named before what is wrong with it (`image /data/a.jpg: No such file or directory`)
_IMAGE = rf"^image {_PATH}: "
_QUOTED = r"(?<!\w)'[^']*'(?!\w)"
_NUMBER = r"\d{1,3}(?:,\d{3})+|\d+"  # 1,498,764,624 as 1498764624: one N


def reason_kind(reason: str) -> str:
    """A skip reason without what names one file: 'corrupt JPEG: ...' -> 'corrupt JPEG';
    'labels/a.txt line 2: class 7 is not ...' -> 'class N is not ...' (1,024 too), 'a.csv line
    7: image /d/a.jpg: No such file or directory' -> 'No such file or directory'; a path ->
    'FILE', a quoted value -> '...'."""
    for kind in ("duplicate", "near duplicate"):  # what follows names the copy kept
        if reason.startswith(f"{kind} of "):
            return kind
    placed = re.sub(_IMAGE, "", re.sub(_PLACE, "", reason, count=1), count=1)
    kept = re.sub(_QUOTED, "'...'", placed)
    head = re.split(r"[:(]", kept, maxsplit=1)[0]
    return re.sub(_NUMBER, "N", re.sub(_PATH, "FILE", head)).strip() or "other"


def reasons_of(reasons: Iterable[str]) -> dict[str, int]:
    """How many of these skip reasons are of each kind (reason_kind), the most first."""
    return dict(Counter(map(reason_kind, reasons)).most_common())


# The columns of a summary, each from a chunk of rows, as float64 (sizes and bytes spread
# over decades; an aspect ratio is a fraction).
_COLUMNS = {
    "width": lambda rows: rows["width"].astype(np.float64),
    "height": lambda rows: rows["height"].astype(np.float64),
    "bytes": lambda rows: rows["size"].astype(np.float64),
    "stored_bytes": lambda rows: rows["stored"].astype(np.float64),
    "aspect": lambda rows: (
        rows["width"].astype(np.float64) / np.maximum(rows["height"].astype(np.float64), 1)
    ),
}
# The columns of bytes a summary also totals (what a split's images take), and their fields.
_TOTALS = {"bytes": "size", "stored_bytes": "stored"}
# A summary's figures in the order index.json lists them: spreads, then histograms.
_SPREADS = ("width", "height", "aspect", "bytes", "stored_bytes")
_HISTOGRAMS = ("bytes", "stored_bytes", "aspect")
# What inspect and the card say of a figure a summary leaves out (_numbers).
NOT_NOTED = "unknown (packed before shardpack noted it)"
# A median is found in one np.median where a split holds at most this many records (2 MiB a
# column, ~3 copies at once); over it, histogram passes narrow it down to this many first
# (select()), each a read of the split's rows.
SELECT_ROWS = 1 << 18
SELECT_BINS = 1024


def _numbers(rows: Rows) -> dict[str, object]:
    """min/median/max and histograms of the written records' sizes, bytes and aspect ratios,
    a chunk of rows at a time: the same numbers as of all of them at once. A column whose least
    value is 0 holds a record an older shardpack did not note it of (a written image has sides
    and bytes): it is left out, with what is drawn from it (aspect ratios and the size grid from
    width and height), rather than figured over zeros or over some of the records."""
    count = sum(len(chunk) for chunk in rows())
    if not count:
        return {"records": 0}

    def column(name: str) -> Rows:
        return lambda: (_COLUMNS[name](chunk) for chunk in rows() if len(chunk))

    bounds = {name: _bounds(column(name)) for name in _COLUMNS}
    known = {name for name, (low, _) in bounds.items() if low > 0}
    if not {"width", "height"} <= known:  # aspect ratios and the grid need both sides
        known -= {"width", "height", "aspect"}
    summary: dict[str, object] = {"records": count}
    for name in (n for n in _SPREADS if n in known):
        spread = summary[name] = _spread(column(name), count, *bounds[name])
        if name in _TOTALS:
            spread["total"] = _total(rows, _TOTALS[name])
    for name in (n for n in _HISTOGRAMS if n in known):
        summary[f"{name}_histogram"] = _histogram(column(name), *bounds[name])
    if "width" in known:
        x_edges = _edges(*bounds["width"], SIZE_BINS)
        y_edges = _edges(*bounds["height"], SIZE_BINS)
        sizes = sum(np.histogram2d(_COLUMNS["width"](chunk), _COLUMNS["height"](chunk),
                                   (x_edges, y_edges))[0] for chunk in rows())  # fmt: skip
        summary["size_histogram"] = {
            "width_edges": _rounded(x_edges),
            "height_edges": _rounded(y_edges),
            "counts": sizes.astype(np.int64).tolist(),  # [width bin][height bin]
        }
    return summary


def _total(rows: Rows, field: str) -> int:
    """The sum of a column of whole numbers (bytes), exact: a chunk at a time, as ints."""
    return sum(int(chunk[field].sum(dtype=np.uint64)) for chunk in rows())


def _bounds(values: Rows) -> tuple[float, float]:
    """The least and the greatest of the values, chunk by chunk."""
    lows, highs = zip(*((v.min(), v.max()) for v in values()), strict=True)
    return float(min(lows)), float(max(highs))


def _spread(values: Rows, count: int, low: float, high: float) -> dict[str, float]:
    return {"min": _plain(low), "median": _plain(median(values, count, low, high)),
            "max": _plain(high)}  # fmt: skip


def median(values: Rows, count: int, low: float, high: float) -> float:
    """np.median of the `count` values `values` yields, all in [low, high]: of them all at
    once where they fit SELECT_ROWS, else of its one or two middle values (select())."""
    if count <= SELECT_ROWS:
        return _median(np.concatenate(list(values())))
    middle = [select(values, k, count, low, high) for k in sorted({(count - 1) // 2, count // 2})]
    return _median(np.array(middle))  # the mean of the two, as np.median takes it


def _median(values: np.ndarray) -> float:
    """np.median of values holding no NaN (sizes and their ratios), without np.median's NaN
    check: that imports numpy.ma in every pack's merge (python -X importtime of a pack)."""
    half = len(values) // 2
    if len(values) % 2:
        return float(np.partition(values, half)[half])
    low, high = np.partition(values, (half - 1, half))[half - 1 : half + 1]
    return float((low + high) / 2)


def select(values: Rows, k: int, count: int, low: float, high: float) -> float:
    """The k-th least (from 0) of the `count` values `values` yields, all in [low, high], as
    np.partition finds it, without holding them all: a histogram pass finds the bin that holds
    it and the next pass reads only there, until the values left fit SELECT_ROWS."""
    within = _Range(low, high, closed=True)
    while count > SELECT_ROWS:
        edges = np.linspace(within.low, within.high, SELECT_BINS + 1)
        counts = np.zeros(SELECT_BINS, np.int64)
        for v in values():
            place = np.searchsorted(edges, within.of(v), side="right") - 1
            counts += np.bincount(np.clip(place, 0, SELECT_BINS - 1), minlength=SELECT_BINS)
        b = int(np.searchsorted(np.cumsum(counts), k, side="right"))
        if counts[b] < count:  # the bin: [edges[b], edges[b + 1]), the last one to the end
            last = b == SELECT_BINS - 1
            k, count = k - int(counts[:b].sum()), int(counts[b])
            within = _Range(edges[b], within.high if last else edges[b + 1], within.closed and last)
            continue
        # every value in one bin (a span of a few floats): narrow to the values' own bounds
        least, most = _bounds(_part(values, within))
        if least == most:
            return least
        if (least, most, True) != (within.low, within.high, within.closed):
            within = _Range(least, most, closed=True)
            continue
        lowest = sum(int(np.count_nonzero(v == least)) for v in values())
        if k < lowest:
            return least
        k, count = k - lowest, count - lowest
        within = _Range(float(np.nextafter(least, np.inf)), most, closed=True)
    held_ = np.concatenate([within.of(v) for v in values()])
    return float(np.partition(held_, k)[k])


def _part(values: Rows, within: _Range) -> Rows:
    """The values inside `within`, the chunks left empty left out."""
    return lambda: (part for part in map(within.of, values()) if len(part))


class _Range(NamedTuple):
    """The values select() still looks at: [low, high], or [low, high) where not closed."""

    low: float
    high: float
    closed: bool

    def of(self, v: np.ndarray) -> np.ndarray:
        return v[(v >= self.low) & ((v <= self.high) if self.closed else (v < self.high))]


def _histogram(values: Rows, low: float, high: float) -> dict[str, list]:
    edges = _edges(low, high, BINS)
    counts = sum(np.histogram(v, edges)[0] for v in values())
    return {"edges": _rounded(edges), "counts": counts.tolist()}


def _edges(low: float, high: float, bins: int) -> np.ndarray:
    """Geometric bin edges from the least value to the largest (sizes spread over decades);
    one bin around a single value."""
    if high <= low:
        return np.array([low - 0.5, high + 0.5])
    if low <= 0:
        return np.linspace(low, high, bins + 1)
    return np.geomspace(low, high, bins + 1)


def _rounded(edges: np.ndarray) -> list[float]:
    return [round(float(e), 4) for e in edges]


def _plain(value: float) -> int | float:
    """A number as JSON shows it best: whole numbers as ints."""
    value = float(value)
    return int(value) if value.is_integer() else round(value, 4)
