"""Per-split summaries of what the workers noted (facts.py) for index.json: sizes, bytes and
aspect ratios as min/median/max and histograms, formats, channels, EXIF orientations and skip
reasons as counts. Compact: a few hundred numbers a split, whatever its size."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np

from shardpack.packing.facts import FACT_DTYPE, facts_of
from shardpack.packing.plan import Plan, ShardResult

# Bins of the histograms: few enough for the index, enough for a chart.
BINS = 20
SIZE_BINS = 16  # a side of the width x height histogram
# What a tally's names become in a summary.
_TALLIED = {"format": "formats", "channels": "channels", "orientation": "orientations"}
_SUMMED = np.dtype([("size", "<u8"), ("width", "<u4"), ("height", "<u4")])


def split_summaries(
    plan: Plan, results: list[ShardResult], dropped: dict[str, int]
) -> dict[str, dict]:
    """index.json's `summaries`: one per split, of the records written and the items skipped
    (`dropped`: each split's copies --dedup exact left out)."""
    by_file = {r.file: r for r in results}
    tables: dict[str, list[np.ndarray]] = {}
    counts: dict[str, Counter] = {}
    for spec in plan.shards:
        result = by_file[spec.file]
        tables.setdefault(spec.split, []).append(facts_of(result.content, len(spec.items)))
        tally = counts.setdefault(spec.split, Counter())
        for what, value, n in result.tally:
            tally[_TALLIED.get(what, what), value] += n
        tally.update(("skipped", reason_kind(reason)) for _, reason in result.skipped)
    return _summaries(tables, counts, dropped)


def entry_summaries(
    shards: dict[str, list[dict]], skipped: dict[str, list[str]], dropped: dict[str, int]
) -> dict[str, dict]:
    """split_summaries of a grown dataset, from the contents.json entries of each split's
    shards (contents.py), each split's skip reasons with no shard to note them, and `dropped`."""
    tables: dict[str, list[np.ndarray]] = {}
    counts: dict[str, Counter] = {}
    for split, entries in shards.items():
        tally = counts.setdefault(split, Counter())
        for entry in entries:
            rows = np.zeros(len(entry["keys"]), FACT_DTYPE)
            for field in ("size", "width", "height"):
                rows[field] = entry[field]
            tables.setdefault(split, []).append(rows)
            for what, value, n in entry["tally"]:
                tally[_TALLIED.get(what, what), value] += n
            tally.update(("skipped", reason_kind(reason)) for reason in entry["reasons"])
    for split, reasons in skipped.items():
        counts.setdefault(split, Counter()).update(("skipped", reason_kind(r)) for r in reasons)
    return _summaries(tables, counts, dropped)


def _summaries(
    tables: dict[str, list[np.ndarray]], counts: dict[str, Counter], dropped: dict[str, int]
) -> dict[str, dict]:
    """Each split's summary of its records' facts and its tallies, with `dropped` duplicates."""
    for split, n in dropped.items():
        counts.setdefault(split, Counter())["skipped", "duplicate"] += n
    summaries = {}
    for split in sorted(counts):
        rows = np.concatenate([_summed(t) for t in tables.get(split) or [facts_of(b"", 0)]])
        summary = _numbers(rows)
        for (what, value), n in sorted(counts[split].items()):
            summary.setdefault(what, {})[value] = n
        summaries[split] = summary
    return summaries


def _summed(table: np.ndarray) -> np.ndarray:
    """The written records' rows of a facts table, the columns a summary reads alone (16 bytes
    a record, not 44: a split's are concatenated at the pack's peak of memory)."""
    written = table["size"] > 0
    rows = np.empty(int(np.count_nonzero(written)), _SUMMED)
    for name in _SUMMED.names:
        rows[name] = table[name][written]
    return rows


def reason_kind(reason: str) -> str:
    """A skip reason without what names one file: 'corrupt JPEG: ...' -> 'corrupt JPEG'."""
    for kind in ("duplicate", "near duplicate"):  # what follows names the copy kept
        if reason.startswith(f"{kind} of "):
            return kind
    return re.sub(r"\d+", "N", re.split(r"[:(]", reason, maxsplit=1)[0]).strip() or "other"


def _numbers(rows: np.ndarray) -> dict[str, object]:
    """min/median/max and histograms of the written records' sizes, bytes and aspect ratios."""
    if not len(rows):
        return {"records": 0}
    width, height = rows["width"].astype(np.float64), rows["height"].astype(np.float64)
    size = rows["size"].astype(np.float64)
    aspect = width / np.maximum(height, 1)
    x_edges, y_edges = _edges(width, SIZE_BINS), _edges(height, SIZE_BINS)
    sizes, _, _ = np.histogram2d(width, height, (x_edges, y_edges))
    return {
        "records": len(rows),
        "width": _spread(width),
        "height": _spread(height),
        "bytes": _spread(size),
        "aspect": _spread(aspect),
        "bytes_histogram": _histogram(size),
        "aspect_histogram": _histogram(aspect),
        "size_histogram": {
            "width_edges": _rounded(x_edges),
            "height_edges": _rounded(y_edges),
            "counts": sizes.astype(np.int64).tolist(),  # [width bin][height bin]
        },
    }


def _spread(values: np.ndarray) -> dict[str, float]:
    return {
        "min": _plain(values.min()),
        "median": _plain(_median(values)),
        "max": _plain(values.max()),
    }


def _median(values: np.ndarray) -> float:
    """np.median of values holding no NaN (sizes and their ratios), without np.median's NaN
    check: that imports numpy.ma in every pack's merge (python -X importtime of a pack)."""
    half = len(values) // 2
    if len(values) % 2:
        return float(np.partition(values, half)[half])
    low, high = np.partition(values, (half - 1, half))[half - 1 : half + 1]
    return float((low + high) / 2)


def _histogram(values: np.ndarray) -> dict[str, list]:
    counts, edges = np.histogram(values, _edges(values, BINS))
    return {"edges": _rounded(edges), "counts": counts.tolist()}


def _edges(values: np.ndarray, bins: int) -> np.ndarray:
    """Geometric bin edges from the least value to the largest (sizes spread over decades);
    one bin around a single value."""
    low, high = float(values.min()), float(values.max())
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
