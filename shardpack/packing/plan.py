"""Pure planning: seeded shuffle, balanced shard slices, shard names and the plan digest; and
the two contract types a worker takes (ShardSpec) and gives back (ShardResult)."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from shardpack.containers import CONTAINERS
from shardpack.images import max_file_bytes
from shardpack.options import PackOptions
from shardpack.sources import Dataset, Item, RecordCost

if TYPE_CHECKING:
    from shardpack.packing.kept import Kept

# Raw pixels take roughly this many times a compressed photo's file size (JPEG at q75-95 is
# 8-12x smaller than its pixels); used only to choose a default shard count.
RAW_EXPANSION = 10

# The cost model: one core's seconds per image file = ITEM_S + BYTE_S x its bytes, by output
# encoding (a source's records inside files cost what its RecordCost says). Per-image costs from
# `python -m benchmarks.stages` plus per-item glue; `make bench`'s "defaults" rows check that the
# choice it drives stays within 5% of --workers 1 and 10% of the best.
ITEM_S = {"keep": 50e-6, "raw": 90e-6, "jpeg": 60e-6, "png": 100e-6, "webp": 120e-6}
BYTE_S = {"keep": 2.8e-9, "raw": 30e-9, "jpeg": 33e-9, "png": 105e-9, "webp": 150e-9}
# --check decode decodes every passed-through image: about a JPEG decode per byte.
DECODE_BYTE_S = 16e-9
# A pool of forked workers (packing/forkpool.py): importing joblib and the standard library's
# executor, starting the pool and shutting it down; forking and reaping each worker. From
# paired `make bench` runs at 2 workers against 1 (benchmarks/README.md).
POOL_START_S = 0.1
WORKER_START_S = 0.02
# The share of each encoding's work that more workers do not divide: passthrough is copying
# bytes through the page cache to one disk (next to nothing stays serial in `make bench`'s
# photos keep; a tenth is kept for disks slower than its cache); decoding and encoding are all
# CPU.
SERIAL_SHARE = {"keep": 0.1, "raw": 0.0, "jpeg": 0.0, "png": 0.0, "webp": 0.0}
# Another worker must promise at least this share less wall time: the model is rough, and a
# wrong "more" costs more than a wrong "fewer" on a busy machine.
GAIN_MARGIN = 0.1
# A shard holding fewer images than this is mostly per-file overhead for its readers (an open,
# a shuffle-buffer refill); a shard size that leaves so few earns a warning.
FEW_ITEMS_PER_SHARD = 8
# How a warning of the shard cut begins (`split train: ...`): a grow keeps the held ones.
CUT_WARNING = "split "


@dataclass(frozen=True)
class ShardSpec:
    """Everything one worker needs to write one shard, and nothing more."""

    split: str
    index: int
    num_shards: int
    file: str
    # on a forked worker, the same items packed (forkpool._PackedItems): iterated and counted only
    items: tuple[Item, ...]
    # a grow's: key -> where in OUT each item's record is taken from (kept.py), not its source
    kept: Mapping[str, Kept] | None = None
    # each item's stamp as its folder's listing gave it before the shard was sent (stamps.py:
    # an object's, whose read takes none), as stamps.with_listed packs them; None: the reads'
    listed: bytes | None = None


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
    # each record's byte offset (from a worker, an array of them: a Python int each would cost
    # the packing process 36 bytes a record); () in a journal from before
    offsets: Sequence[int] = ()
    lossless: int = 0  # images --encode keep re-encoded as PNG: TensorFlow cannot decode them
    content: bytes = b""  # facts.FACT_DTYPE rows, one per item in plan order
    tally: tuple[tuple[str, str, int], ...] = ()  # facts.ShardFacts.tally
    arrow_bytes: int | None = None  # WriteResult.arrow_bytes


@dataclass(frozen=True)
class Plan:
    """The shards of every split, in order, and a digest that names this exact plan."""

    shards: tuple[ShardSpec, ...]
    digest: str
    warnings: tuple[str, ...] = ()  # for the user, one line each: shards that hold very few
    cost: RecordCost | None = None  # what an item costs (the source's); None: image files
    shuffle: str = "global"  # options.SHUFFLES: how the items were ordered
    classes: int = 0  # the label's classes: how many counts a shard's label_counts holds


def shard_bounds(num_items: int, num_shards: int) -> list[tuple[int, int]]:
    """Contiguous [start, end) slices, sizes differing by at most one: round(n * i / k)."""
    if num_shards < 1:
        raise ValueError(f"num_shards must be positive, got: {num_shards!r}")
    cuts = [round(num_items * i / num_shards) for i in range(num_shards + 1)]
    return list(itertools.pairwise(cuts))


def estimated_bytes(item: Item, options: PackOptions, cost: RecordCost | None = None) -> int:
    """A rough size of the record `item` becomes, for choosing how many shards to write."""
    if cost is not None:
        return cost.raw_bytes  # a record of pixels never grows past them
    if options.encode != "raw":
        return item.size
    if options.resize is not None:
        return options.resize[0] * options.resize[1] * 3
    size = item.size * RAW_EXPANSION
    return size if options.max_side is None else min(size, options.max_side**2 * 3)


def _tally(
    items: tuple[Item, ...], options: PackOptions, cost: RecordCost | None
) -> tuple[int, int, int]:
    """(records, files, the files' bytes) in one pass: a listing may hold millions. A file
    past the most an image of --max-pixels can take is skipped unread: its bytes count none."""
    if cost is not None:
        return len(items), 0, 0
    limit = max_file_bytes(options.max_pixels)
    return 0, len(items), sum(item.size for item in items if item.size <= limit)


def work_seconds(
    items: tuple[Item, ...], options: PackOptions, cost: RecordCost | None = None
) -> float:
    """One core's estimated seconds to write `items` (records costing `cost` each, or image
    files when None): the cost model above, summed."""
    return _work_seconds(_tally(items, options, cost), options, cost)


def plan_seconds(plan: Plan, options: PackOptions) -> float:
    """One core's estimated seconds to write the plan's items (work_seconds; a range's records
    counted, unread)."""
    if plan.cost is not None:  # records of one cost: their count tells
        return sum(len(spec.items) for spec in plan.shards) * plan.cost.seconds[options.encode]
    return work_seconds(tuple(i for spec in plan.shards for i in spec.items), options)


def _work_seconds(
    tally: tuple[int, int, int], options: PackOptions, cost: RecordCost | None
) -> float:
    records, files, file_bytes = tally
    encode = options.encode
    byte_s = BYTE_S[encode] + (DECODE_BYTE_S if options.check == "decode" else 0.0)
    record_s = records * cost.seconds[encode] if cost is not None else 0.0
    return record_s + files * ITEM_S[encode] + file_bytes * byte_s


def run_seconds(
    work_s: float, workers: int, shards: int | None = None, serial: float = 0.0
) -> float:
    """Estimated wall seconds of `work_s` on `workers` workers: the part more workers cannot
    divide (`serial`, a share), the busiest worker's part of the rest (whole shards, so 3
    shards on 2 workers take 2/3 of it), and the pool's start."""
    if workers == 1:
        return work_s
    busiest = 1 / workers if shards is None else math.ceil(shards / workers) / shards
    divided = work_s * (serial + (1 - serial) * busiest)
    return divided + POOL_START_S + WORKER_START_S * workers


def best_workers(
    work_s: float,
    cores: int,
    shards: int | None = None,
    serial: float = 0.0,
    busy: float = 0.0,
) -> int:
    """The fewest workers, up to `cores`, that the cost model expects to finish first; a
    worker more must save at least GAIN_MARGIN of the wall time.

    `busy` is the cores other processes keep busy. The kernel shares the cores between every
    runnable process, so each of `w` workers gets cores / (w + busy) of a core (at most one):
    another process's load slows every worker count, and does not take a whole core from us
    (CIFAR raw with others busy 0.7 of a core: 2 workers 0.84x the wall of 1).
    """

    def wall(workers: int) -> float:
        share = min(1.0, max(1, cores) / (workers + busy))
        return run_seconds(work_s, workers, shards, serial) / share

    best = 1
    for workers in range(2, max(1, cores) + 1):
        if shards is not None and workers > shards:
            break
        if wall(workers) < (1 - GAIN_MARGIN) * wall(best):
            best = workers
    return best


def choose_workers(
    work: float,
    shards: int | None,
    options: PackOptions,
    cores: int,
    others_busy: Callable[[], float],
) -> int:
    """--workers if given; else the count the cost model expects to finish first on the cores
    other processes leave free (at least 1, never more than there are shards where they are
    known); on Dask, the cores.

    Args:
        work: one core's estimated seconds of the work (plan.plan_seconds, work_seconds).
        shards: the shards to write (None: not planned yet, the --dedup pass's choice).
        options: the run's options (the encoding decides the cost per item).
        cores: the cores this process may run on.
        others_busy: returns how many cores other processes keep busy; called only when the
            work is worth more than one worker.
    """
    if options.workers is not None:
        return options.workers
    if options.backend != "local":
        return cores  # a Dask LocalCluster of this machine's cores, as before; no model for it
    serial = SERIAL_SHARE[options.encode]
    if best_workers(work, cores, shards, serial) == 1:
        return 1  # no need to look at the load
    return best_workers(work, cores, shards, serial, busy=max(0.0, others_busy()))


def fewer_workers(asked: int | None, ran: int, to_write: int, in_process: bool) -> tuple[str, ...]:
    """A line saying why the run used fewer workers than --workers asked, if it did (a run
    with no shard left to write, a resume of a finished one, says nothing of workers)."""
    if asked is None or ran >= asked or to_write == 0:
        return ()
    why = (
        "memory:// storage is this process's own"
        if in_process
        else f"{to_write:,} shard{'' if to_write == 1 else 's'} to write, a worker each at most"
    )
    return (f"{ran} of the {asked} workers asked ran: {why}",)


def num_shards_for(
    items: tuple[Item, ...],
    options: PackOptions,
    workers: int,
    balanced: int | None = None,
    cost: RecordCost | None = None,
) -> int:
    """--shards if given, else enough to hold about --shard-size each, and at least as many
    as the workers (up to `workers`) the cost model says the items are worth; or, when
    several splits share the workers, at least `balanced` (shards_for_balance). `cost`: what
    each item costs when they are records (the source's), None for image files."""
    if options.shards is not None:
        return max(1, min(options.shards, len(items)))
    tally = _tally(items, options, cost)
    records, files, file_bytes = tally
    record_bytes = records * cost.raw_bytes if cost is not None else 0
    if options.encode == "raw" and options.max_side is not None:  # a bound per item
        total = sum(estimated_bytes(item, options, cost) for item in items)
    elif options.encode == "raw" and options.resize is not None:
        total = record_bytes + files * options.resize[0] * options.resize[1] * 3
    else:
        expansion = RAW_EXPANSION if options.encode == "raw" else 1
        total = record_bytes + file_bytes * expansion
    by_size = math.ceil(total / options.shard_size)
    work = _work_seconds(tally, options, cost)
    by_workers = balanced or best_workers(work, workers, serial=SERIAL_SHARE[options.encode])
    if by_size > by_workers > 1:  # whole rounds: 6 shards on 4 workers would idle 2 at the end
        by_size = math.ceil(by_size / by_workers) * by_workers
    return max(1, min(max(by_size, by_workers), len(items)))


# Shards per worker when several splits share the workers: shards of about equal work, enough
# of them that no worker is left with a round to itself.
SPLIT_ROUNDS = 3


def shards_for_balance(dataset: Dataset, options: PackOptions, workers: int) -> dict[str, int]:
    """The fewest shards each split needs so that all splits' shards carry about equal work.

    Splits are sharded separately, so their shards differ in size: CIFAR-10 raw on 2 workers
    would be 25,000 + 25,000 + 10,000 records, one worker writing 35,000 (no faster than one). With
    the dataset's work cut into SPLIT_ROUNDS rounds of the workers it is worth, every shard
    is about one such piece. One split (or one worker) needs nothing of this.
    """
    if options.shards is not None or len(dataset.splits) < 2:
        return {}
    cost = dataset.source.record_cost
    work = {split: work_seconds(items, options, cost) for split, items in dataset.splits.items()}
    total = sum(work.values())
    best = best_workers(total, workers, serial=SERIAL_SHARE[options.encode])
    if best < 2 or total <= 0:
        return {}
    piece = total / (best * SPLIT_ROUNDS)
    return {split: math.ceil(seconds / piece) for split, seconds in work.items()}


def make_plan(dataset: Dataset, name: str, options: PackOptions, workers: int) -> Plan:
    """Shuffle each split with the seed and cut it into shards.

    `workers` is the most workers the run may use (--workers, else the cores this process may
    run on), never the load of the moment: the same listing and options on the same machine
    always plan alike. A pure function of (listing, name, options, workers).
    """
    shards: list[ShardSpec] = []
    container = CONTAINERS[options.format]
    warnings: list[str] = []
    orders: dict[str, np.ndarray] = {}
    balance = shards_for_balance(dataset, options, workers)
    cost = dataset.source.record_cost
    for split in sorted(dataset.splits):
        items = dataset.splits[split]
        order = np.arange(len(items))
        if options.shuffle:
            order = np.random.default_rng(options.seed).permutation(len(items))
        orders[split] = order
        # numpy gathers each shard's items in C, a third of a Python list's time
        # (`python -m benchmarks.listing`)
        objects = np.fromiter(items, object, len(items))
        count = num_shards_for(items, options, workers, balance.get(split), cost)
        if options.shards is None and count > 1 and len(items) < FEW_ITEMS_PER_SHARD * count:
            warnings.append(
                f"{CUT_WARNING}{split}: a shard size of {options.shard_size:,} bytes leaves about "
                f"{len(items) / count:.1f} images per shard ({count:,} shards for {len(items):,} "
                "images); choose a larger shard size or a shard count"
            )
        if options.shards is not None and count < options.shards:
            warnings.append(f"{CUT_WARNING}{split}: {count:,} shards, not the "
                            f"{options.shards:,} asked: a shard holds one image at "
                            "least")  # fmt: skip
        for index, (start, end) in enumerate(shard_bounds(len(items), count)):
            shards.append(
                ShardSpec(
                    split=split,
                    index=index,
                    num_shards=count,
                    file=container.shard_name(name, split, index, count),
                    items=tuple(objects[order[start:end]].tolist()),
                )
            )
        objects = None  # not held while the plan is digested
    digest = _digest(dataset, shards, orders, options)
    return Plan(
        tuple(shards), digest, tuple(warnings), cost, options.shuffle_kind, len(dataset.classes)
    )


# Items hashed at once: a bounded transient (a few columns of this many values).
DIGEST_BATCH = 4096


def _digest(
    dataset: Dataset,
    shards: list[ShardSpec],
    orders: dict[str, np.ndarray],
    options: PackOptions,
) -> str:
    """sha256 over what decides the output: options, schema, every field of every item, and
    which items each shard holds in which order.

    Each split's items go in listing order (the order they lie in memory: a million shuffled
    items would cost a cache miss per value), then its shuffle order; with the shards' sizes
    that fixes every shard's items. Items are hashed a batch at a time, a column per field and
    their `fields` a column per name (the absent ones marked), each column in C (_column).
    """
    digest = hashlib.sha256()
    _feed(digest, {
        "options": options.output_fields(),
        "kind": dataset.kind,
        "schema": dataset.schema.to_json(),
        "shards": [[s.file, len(s.items)] for s in shards],
    })  # fmt: skip
    for split in sorted(dataset.splits):
        items = dataset.splits[split]
        order = np.ascontiguousarray(orders[split], "<i8")  # uncopied where it is int64 already
        digest.update((1 + order.nbytes).to_bytes(8, "little"))  # _feed_bytes of b"o" + it
        digest.update(b"o")
        digest.update(order)
        for start in range(0, len(items), DIGEST_BATCH):
            _items(digest, items[start : start + DIGEST_BATCH])
    return digest.hexdigest()


def _items(digest: hashlib._Hash, items: tuple[Item, ...]) -> None:
    """Hash items a column per field (an Item is a tuple of its fields: zip gives the columns),
    their `fields` a column per name."""
    *columns, fields = zip(*items, strict=True)
    for column in columns:
        _column(digest, column)
    names = sorted(set().union(*fields))
    _feed(digest, names)
    everywhere = set(map(len, fields)) == {len(names)}  # each item has every name
    for name in names:
        if everywhere:
            _column(digest, list(map(operator.itemgetter(name), fields)))
        else:
            _column(digest, [f.get(name, _ABSENT) for f in fields])


_ABSENT = object()  # an item without the field: JSON {}, which no field's value can be


def _column(digest: hashlib._Hash, values: Sequence) -> None:
    """Hash a column: all text (lengths, then UTF-8), all int64 or all floats (their 8 bytes
    each) in a compact binary form, else as JSON; a tag says which, so no two columns of
    different values hash alike."""
    types = set(map(type, values))
    if types == {str}:
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        blob = "".join(values).encode("utf-8", "surrogatepass")  # one way to read it back
        _feed_bytes(digest, b"s" + lengths.tobytes() + blob)
    elif types == {bytes}:
        lengths = np.fromiter(map(len, values), np.int64, len(values))
        _feed_bytes(digest, b"b" + lengths.tobytes() + b"".join(values))
    elif types == {int} and (ints := _int64s(values)) is not None:
        _feed_bytes(digest, b"i" + ints.tobytes())
    elif types == {float}:
        _feed_bytes(digest, b"f" + np.array(values, np.float64).tobytes())
    else:
        _feed(digest, values)


def _int64s(values: Sequence[int]) -> np.ndarray | None:
    """The ints as int64, or None if one is out of its range."""
    try:
        return np.fromiter(values, np.int64, len(values))
    except OverflowError:
        return None


def _feed_bytes(digest: hashlib._Hash, blob: bytes) -> None:
    digest.update(len(blob).to_bytes(8, "little"))
    digest.update(blob)


def _feed(digest: hashlib._Hash, value: object) -> None:
    """Hash one JSON value, preceded by its length so that no two sequences hash alike."""
    blob = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      default=_as_list).encode("utf-8", "surrogateescape")  # fmt: skip
    _feed_bytes(digest, b"j" + blob)


def _as_list(value: object) -> list | dict:
    """A field's numpy array (a manifest's list column) as the list of its values, bytes (a
    bytes feature's) as {"b": hex}, _ABSENT as {}: json calls this for nothing else."""
    if isinstance(value, bytes):
        return {"b": value.hex()}
    return {} if value is _ABSENT else value.tolist()  # type: ignore[attr-defined]
