"""The plan of a streamed list (sources/streamed.py): each input file cut into ranges of rows,
a shard each, in the files' order or (the window shuffle) a seeded order of the ranges with
each shard's rows permuted in its worker; and what the merge learns from the ranges again.

O(files + shards): no item is made here. 100M rows at 1,024 a shard are ~100,000 specs.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Iterable

import numpy as np

from shardpack.containers import CONTAINERS
from shardpack.errors import plural
from shardpack.options import PackOptions
from shardpack.packing.plan import (
    BYTE_S,
    CUT_WARNING,
    FEW_ITEMS_PER_SHARD,
    ITEM_S,
    RAW_EXPANSION,
    Plan,
    ShardResult,
    ShardSpec,
    shard_bounds,
)
from shardpack.packing.urlfailures import is_bad_row
from shardpack.sources import Dataset, RecordCost
from shardpack.sources.streamed import RowRange, StreamedRows
from shardpack.storage.imageroot import URL_BYTES
from shardpack.storage.urlpolicy import is_web_url


def streamed_rows(dataset: Dataset) -> StreamedRows | None:
    """The streamed split of a dataset whose scan streamed it, else None."""
    rows = next(iter(dataset.splits.values()), None)
    return rows if isinstance(rows, StreamedRows) else None


def row_bytes(options: PackOptions) -> int:
    """What the planner takes a row's record to weigh, unread: a web photo's guess, as
    pixels under --encode raw."""
    if options.encode != "raw":
        return URL_BYTES
    if options.resize is not None:
        return options.resize[0] * options.resize[1] * 3
    size = URL_BYTES * RAW_EXPANSION
    return size if options.max_side is None else min(size, options.max_side**2 * 3)


def rows_per_shard(total: int, options: PackOptions) -> int:
    """--shards' share of the rows, else as many as make about --shard-size."""
    if options.shards is not None:
        return max(1, math.ceil(total / options.shards))
    return max(1, options.shard_size // row_bytes(options))


def make_range_plan(dataset: Dataset, name: str, options: PackOptions) -> Plan:
    """Cut each file of a streamed list into ranges of about rows_per_shard rows (a file's
    ranges differ by a row at most), one shard each: in the files' order, or with the window
    shuffle in a seeded order. A pure function of (the files' counts, name, options)."""
    rows = streamed_rows(dataset)
    (split,) = dataset.splits
    per = rows_per_shard(len(rows), options)
    pieces = [(number, start, end - start) for number, file in enumerate(rows.files)
              for start, end in shard_bounds(file.rows, math.ceil(file.rows / per))]  # fmt: skip
    window = options.shuffle_kind == "window"
    if window:
        order = np.random.default_rng(options.seed).permutation(len(pieces))
        pieces = [pieces[i] for i in order.tolist()]
    count = len(pieces)
    container = CONTAINERS[options.format]
    shards = tuple(
        ShardSpec(split, index, count, container.shard_name(name, split, index, count),
                  RowRange(rows, number, first, n, options.seed if window else None, index))  # type: ignore[arg-type]
        for index, (number, first, n) in enumerate(pieces)
    )  # fmt: skip
    digest = hashlib.sha256(json.dumps({
        "options": options.output_fields(),
        "kind": dataset.kind,
        "schema": dataset.schema.to_json(),
        "files": [[file.path.rsplit("/", 1)[-1], file.size, file.rows] for file in rows.files],
        "ranges": pieces,
        "shards": [spec.file for spec in shards],
    }, sort_keys=True).encode()).hexdigest()  # fmt: skip
    encode = options.encode
    cost = RecordCost(row_bytes(options), {encode: ITEM_S[encode] + URL_BYTES * BYTE_S[encode]})
    warnings = (*_cut_warnings(split, count, per, rows, options),
                *(_group_warnings(rows, per) if window else ()))  # fmt: skip
    return Plan(shards, digest, warnings, cost, options.shuffle_kind, len(dataset.classes))


def _cut_warnings(
    split: str, count: int, per: int, rows: StreamedRows, options: PackOptions
) -> tuple[str, ...]:
    """What make_plan warns of a cut, for ranges of rows: a --shards count other than the one
    made (a shard's rows lie in one file), or a --shard-size leaving few rows a shard."""
    if options.shards is not None and count != options.shards:
        return (f"{CUT_WARNING}{split}: {count:,} shards, not the {options.shards:,} asked: a "
                f"streamed list's shard holds rows of one of its {len(rows.files):,} files, and "
                "one row at least",)  # fmt: skip
    if options.shards is None and count > 1 and per < FEW_ITEMS_PER_SHARD:
        return (f"{CUT_WARNING}{split}: a shard size of {options.shard_size:,} bytes leaves "
                f"about {plural(per, 'image')} per shard ({count:,} shards for {len(rows):,} "
                f"images; each row taken for {row_bytes(options):,} bytes, unread); choose a "
                "larger shard size or a shard count",)  # fmt: skip
    return ()


# A Parquet row group this many times a shard's rows makes the window shuffle read the list
# about as many times over (a worker holds the last group it read; the ranges come seeded).
GROUP_SHARDS = 8


def _group_warnings(rows: StreamedRows, per: int) -> tuple[str, ...]:
    """A warning where the window shuffle's shards, each reading the whole Parquet row group
    its range lies in, would read the list many times over: row groups of pyarrow's default
    1M rows, a shard's 1,024."""
    largest, where = 0, ""
    for file in rows.files:
        if file.path.lower().endswith(".parquet") and file.marks:
            starts = [mark[0] for mark in file.marks] + [file.rows]
            group = max(b - a for a, b in itertools.pairwise(starts))
            if group > largest:  # the first file of the largest
                largest, where = group, file.path
    if largest < GROUP_SHARDS * per:
        return ()
    return (f"{where}: a row group of {largest:,} rows, {largest // per:,} times a shard's "
            f"{per:,}: --shuffle-window reads a shard's whole row group, so the list is read "
            f"about that many times over; write its files in row groups of about {per:,} rows "
            f"(pyarrow's row_group_size={per}), or pack with --no-shuffle",)  # fmt: skip


def failure_rows(plan: Plan, results: list[ShardResult]):
    """rows_of for url_failures: (file name, line) of each skipped URL, found by reading again
    the range of each shard that skipped one (a shard's rows at a time)."""
    skipped = {r.file: [key for key, _ in r.skipped if is_web_url(key)] for r in results}
    found: dict[str, tuple[str, int]] = {}
    for spec in plan.shards:
        if skipped.get(spec.file):
            found.update(spec.items.lines_of(skipped[spec.file]))  # type: ignore[attr-defined]

    def rows_of(urls: Iterable[str]) -> dict[str, tuple[str, int]]:
        return {url: found[url] for url in urls if url in found}

    return rows_of


def ranges_list_urls(plan: Plan, results: list[ShardResult]) -> bool:
    """Whether a streamed list whose skips name no http(s) URL is a URL list all the same,
    so that failures.jsonl holds its bad rows (urlfailures.lists_urls): the range of a shard
    that skipped a bad row, or of the first that wrote a record, names one. Read only where a
    shard skipped a bad row, a range at a time, up to the first naming a URL."""
    bad = {r.file for r in results if any(is_bad_row(*skip) for skip in r.skipped)}
    if not bad:
        return False
    wrote = next((r.file for r in results if r.num_records), None)
    return any(spec.items.names_urls()  # type: ignore[attr-defined]
               for spec in plan.shards if spec.file in bad or spec.file == wrote)  # fmt: skip
