"""Pure planning: seeded shuffle, balanced shard slices, shard names and the plan digest; and
the two contract types a worker takes (ShardSpec) and gives back (ShardResult)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass

import numpy as np

from shardpack.options import PackOptions
from shardpack.sources import Dataset, Item
from shardpack.sources.cifar import CIFAR_PIXELS

# Raw pixels take roughly this many times a compressed photo's file size (JPEG at q75-95 is
# 8-12x smaller than its pixels); used only to choose a default shard count.
RAW_EXPANSION = 10
# A worker costs ~0.35 s to start (benchmarks/README.md, start-up) and 256 images are ~0.4 s
# of re-encoding photos: below that, another worker costs more than it saves.
MIN_SHARD_ITEMS = 256


@dataclass(frozen=True)
class ShardSpec:
    """Everything one worker needs to write one shard, and nothing more."""

    split: str
    index: int
    num_shards: int
    file: str
    items: tuple[Item, ...]


@dataclass(frozen=True)
class ShardResult:
    """What one worker wrote: the shard's facts for the index, and what it skipped."""

    split: str
    index: int
    file: str
    num_records: int
    num_bytes: int
    sha256: str
    label_counts: tuple[int, ...]
    skipped: tuple[tuple[str, str], ...]
    seconds: float
    offsets: tuple[int, ...] = ()  # each record's byte offset; () in a journal from before


@dataclass(frozen=True)
class Plan:
    """The shards of every split, in order, and a digest that names this exact plan."""

    shards: tuple[ShardSpec, ...]
    digest: str


def shard_bounds(num_items: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) slices, sizes differing by at most one: round(n * i / k)."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be positive, got: {num_shards!r}")
    cuts = [round(num_items * i / num_shards) for i in range(num_shards + 1)]
    return list(itertools.pairwise(cuts))


def shard_name(name: str, split: str, index: int, num_shards: int) -> str:
    """TFDS-style shard file name: {name}-{split}.tfrecord-{i:05d}-of-{n:05d}."""
    return f"{name}-{split}.tfrecord-{index:05d}-of-{num_shards:05d}"


# What shard_name gives, for any count (past 99,999 shards the numbers grow a digit).
_SHARD_NAME = re.compile(
    r"(?P<name>[A-Za-z0-9][A-Za-z0-9_.]*)-(?P<split>[A-Za-z0-9_.\-]+)\.tfrecord-\d{5,}-of-\d{5,}"
)


def is_shard_name(file: str, name: str | None = None) -> bool:
    """Whether `file` is a name shard_name gives (for dataset `name`, when given)."""
    match = _SHARD_NAME.fullmatch(file)
    return match is not None and name in (None, match["name"])


def estimated_bytes(item: Item, options: PackOptions) -> int:
    """A rough size of the record `item` becomes, for choosing how many shards to write."""
    if item.record is not None:
        return CIFAR_PIXELS  # a CIFAR record never grows past its raw pixels
    if options.encode != "raw":
        return item.size
    if options.resize is not None:
        return options.resize[0] * options.resize[1] * 3
    size = item.size * RAW_EXPANSION
    return size if options.max_side is None else min(size, options.max_side**2 * 3)


def num_shards_for(items: tuple[Item, ...], options: PackOptions, workers: int) -> int:
    """--shards if given, else enough to hold about --shard-size each, and one per worker
    as long as each still gets MIN_SHARD_ITEMS images."""
    if options.shards is not None:
        return max(1, min(options.shards, len(items)))
    total = sum(estimated_bytes(item, options) for item in items)
    by_size = math.ceil(total / options.shard_size)
    by_workers = min(workers, len(items) // MIN_SHARD_ITEMS)
    return max(1, min(max(by_size, by_workers), len(items)))


def make_plan(dataset: Dataset, name: str, options: PackOptions, workers: int) -> Plan:
    """Shuffle each split with the seed and cut it into shards.

    A pure function of (listing, name, options, workers): two calls plan alike.
    """
    shards: list[ShardSpec] = []
    for split in sorted(dataset.splits):
        items = dataset.splits[split]
        order = np.arange(len(items))
        if options.shuffle:
            order = np.random.default_rng(options.seed).permutation(len(items))
        shuffled = tuple(items[i] for i in order)
        count = num_shards_for(items, options, workers)
        for index, (start, end) in enumerate(shard_bounds(len(items), count)):
            shards.append(
                ShardSpec(
                    split=split,
                    index=index,
                    num_shards=count,
                    file=shard_name(name, split, index, count),
                    items=shuffled[start:end],
                )
            )
    return Plan(tuple(shards), _digest(dataset, shards, options))


def _digest(dataset: Dataset, shards: list[ShardSpec], options: PackOptions) -> str:
    """sha256 over what decides the output: options, schema and every field of every item."""
    canonical = {
        "options": options.output_fields(),
        "kind": dataset.kind,
        "schema": dataset.schema.to_json(),
        "shards": [[s.file, [_item_fields(i) for i in s.items]] for s in shards],
    }
    blob = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=_as_list)  # fmt: skip
    return hashlib.sha256(blob.encode("utf-8", "surrogateescape")).hexdigest()


def _as_list(value: object) -> list:
    """A field's numpy array (a manifest's list column) as the list of its values."""
    return value.tolist()  # type: ignore[attr-defined]  # json calls this for arrays only


def _item_fields(item: Item) -> list:
    """Every field of an item, in a JSON-able form (fields in name order)."""
    return [item.key, item.label, item.path, item.size, item.record, sorted(item.fields.items())]
